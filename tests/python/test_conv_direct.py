"""float32 convolutions at the sizes the direct stride-1 kernel and the im2col path see, against
torch: odd sizes, padding, dilation, groups, 1x1, strides, conv1d/3d, batch 1 and > 1, thread
counts, and a compiled conv-bn-relu block."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close, make

import kiln
import kiln.nn.functional as KF


def pair(shape, seed):
    return make(shape, "float32", seed=seed, low=-1.0, high=1.0)


CONV2D = [
    # (input, weight, kwargs): every case stride 1 takes the direct kernel on AVX-512 CPUs
    ((1, 64, 56, 56), (64, 64, 3, 3), {"padding": 1}),  # the ResNet block
    ((8, 16, 23, 19), (24, 16, 3, 3), {"padding": 1}),  # batch > 1, odd sizes
    ((1, 3, 33, 35), (16, 3, 7, 7), {"padding": 3}),  # stem-like, few input channels
    ((2, 8, 17, 13), (12, 8, 3, 3), {}),  # no padding; 12 output channels = 8 + 4
    ((2, 8, 17, 13), (8, 8, 5, 3), {"padding": (2, 1)}),
    ((2, 8, 17, 13), (8, 8, 3, 3), {"padding": 2, "dilation": 2}),
    ((2, 8, 17, 13), (8, 8, 3, 3), {"padding": (1, 3), "dilation": (1, 3)}),
    ((2, 8, 12, 12), (16, 4, 3, 3), {"padding": 1, "groups": 2}),
    ((2, 8, 12, 12), (8, 2, 3, 3), {"padding": 1, "groups": 4}),  # 2 per group: im2col
    ((2, 8, 12, 12), (8, 8, 2, 4), {"padding": "same"}),  # asymmetric padding
    ((1, 4, 1, 40), (8, 4, 1, 5), {"padding": (0, 2)}),  # a single row
    ((1, 4, 40, 1), (8, 4, 5, 1), {"padding": (2, 0)}),  # a single column
    ((1, 4, 5, 5), (8, 4, 5, 5), {}),  # one output position
    ((2, 16, 14, 14), (32, 16, 1, 1), {}),  # pointwise: GEMM on the input
    ((2, 16, 14, 14), (32, 16, 1, 1), {"padding": 1}),  # 1x1 with padding: direct
    ((2, 16, 15, 15), (32, 16, 3, 3), {"stride": 2, "padding": 1}),  # strided: im2col
    ((2, 16, 15, 15), (32, 16, 1, 1), {"stride": 2}),  # strided 1x1
    ((2, 16, 15, 15), (32, 16, 3, 3), {"stride": (1, 2), "padding": 1}),
    ((2, 64, 7, 7), (48, 64, 3, 3), {"padding": 1}),  # mostly padding columns: im2col
    ((2, 64, 14, 14), (48, 64, 3, 3), {"padding": 1}),
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,kw", CONV2D)
def test_conv2d_float32(xs, ws, kw, bias):
    tx, kx = pair(xs, 0)
    tw, kw_ = pair(ws, 1)
    tb, kb = pair((ws[0],), 2) if bias else (None, None)
    assert_close(KF.conv2d(kx, kw_, kb, **kw), F.conv2d(tx, tw, tb, **kw), atol=2e-5, rtol=2e-5)


def _has_avx512f() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return " avx512f" in f.read()
    except OSError:
        return False


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("batch", [1, 2, 5])
def test_conv2d_threads_give_identical_results(threads, batch):
    """The direct kernel computes each output in one thread, whatever the split; without
    AVX-512 the convolution is im2col + OpenBLAS, whose sums follow the thread count."""
    if batch < threads and not _has_avx512f():
        pytest.skip("the direct convolution kernel needs AVX-512")
    tx, kx = pair((batch, 24, 21, 30), 3)
    tw, kw = pair((40, 24, 3, 3), 4)
    kiln.set_num_threads(1)
    try:
        want = KF.conv2d(kx, kw, padding=1).numpy()
        kiln.set_num_threads(threads)
        got = KF.conv2d(kx, kw, padding=1).numpy()
    finally:
        kiln.set_num_threads(0)
    np.testing.assert_array_equal(got, want)
    assert_close(kiln.from_numpy(got), F.conv2d(tx, tw, padding=1), atol=2e-5, rtol=2e-5)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize(
    "kw", [{"padding": 2}, {"padding": 4, "dilation": 2}, {"padding": "same"}, {"groups": 2}]
)
def test_conv1d_float32(kw):
    tx, kx = pair((3, 8, 100), 5)
    tw, kw_ = pair((16, 8 // kw.get("groups", 1), 5), 6)
    assert_close(KF.conv1d(kx, kw_, **kw), F.conv1d(tx, tw, **kw), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("kw", [{"padding": 1}, {"padding": (0, 1, 2), "dilation": (1, 1, 2)}])
def test_conv3d_float32(kw):
    tx, kx = pair((2, 6, 5, 9, 10), 7)
    tw, kw_ = pair((10, 6, 3, 2, 3), 8)
    tb, kb = pair((10,), 9)
    assert_close(KF.conv3d(kx, kw_, kb, **kw), F.conv3d(tx, tw, tb, **kw), atol=2e-5, rtol=2e-5)


def test_conv2d_keeps_nan_and_inf():
    tx, kx = pair((1, 8, 9, 9), 10)
    tx[0, 3, 4, 4] = float("nan")
    tx[0, 5, 0, 0] = float("inf")
    kx = kiln.from_numpy(tx.numpy().copy())
    tw, kw = pair((8, 8, 3, 3), 11)
    assert_close(KF.conv2d(kx, kw, padding=1), F.conv2d(tx, tw, padding=1))


def test_compiled_conv_bn_relu_equals_torch():
    torch.manual_seed(0)
    tconv, tbn = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False), torch.nn.BatchNorm2d(16)
    with torch.no_grad():
        tbn.running_mean.uniform_(-0.5, 0.5)
        tbn.running_var.uniform_(0.5, 2.0)
        tbn.weight.uniform_(0.5, 1.5)
        tbn.bias.uniform_(-0.5, 0.5)
    tconv.eval()
    tbn.eval()
    conv, bn = kiln.nn.Conv2d(16, 16, 3, padding=1, bias=False), kiln.nn.BatchNorm2d(16)
    conv.weight = kiln.nn.Parameter(kiln.from_numpy(tconv.weight.detach().numpy().copy()))
    for name in ("weight", "bias"):
        setattr(bn, name, kiln.nn.Parameter(kiln.from_numpy(getattr(tbn, name).detach().numpy())))
    bn.running_mean = kiln.from_numpy(tbn.running_mean.numpy().copy())
    bn.running_var = kiln.from_numpy(tbn.running_var.numpy().copy())
    conv.eval()
    bn.eval()

    def block(x):
        return KF.relu(bn(conv(x)))

    tx, kx = pair((2, 16, 20, 20), 12)
    with kiln.no_grad(), torch.no_grad():
        got = kiln.compile(block)(kx)
        want = F.relu(tbn(tconv(tx)))
    assert_close(got, want, atol=1e-4, rtol=1e-4)

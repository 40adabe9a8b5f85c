"""Depthwise convolutions (one input channel per group) against torch: the direct kernel of
runtime/ops/conv_depthwise.cc over strides, dilations, paddings (asymmetric, larger than the
window's reach, an input the windows do not fully cover), channel multipliers, conv1d/3d,
float64, NaN/inf, and thread counts."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close, make

import kiln
import kiln.nn.functional as KF

CASES = [
    # (input, weight, kwargs)
    ((1, 32, 56, 56), (32, 1, 3, 3), {"padding": 1}),  # MobileNet stride 1
    ((2, 24, 15, 17), (24, 1, 3, 3), {"stride": 2, "padding": 1}),  # MobileNet stride 2, odd
    ((2, 24, 16, 16), (24, 1, 3, 3), {"stride": 2}),  # the last column/row never read
    ((1, 16, 14, 14), (16, 1, 7, 7), {"padding": 3}),  # ConvNeXt's 7x7
    ((1, 16, 9, 9), (16, 1, 5, 5), {"padding": 2, "stride": 2}),
    ((2, 8, 13, 11), (8, 1, 3, 3), {"padding": 2, "dilation": 2}),
    ((2, 8, 13, 11), (8, 1, 3, 2), {"padding": (1, 3), "dilation": (1, 3), "stride": (2, 1)}),
    ((2, 8, 13, 11), (8, 1, 3, 3), {"stride": (1, 3), "padding": (0, 2)}),
    ((2, 8, 12, 12), (24, 1, 3, 3), {"padding": 1}),  # channel multiplier 3
    ((2, 8, 12, 12), (16, 1, 3, 3), {"padding": 1, "stride": 2}),  # multiplier 2, strided
    ((1, 4, 7, 7), (4, 1, 3, 3), {"padding": 4}),  # padding wider than the window
    ((1, 6, 8, 8), (6, 1, 2, 4), {"padding": "same"}),  # asymmetric padding
    ((3, 5, 1, 30), (5, 1, 1, 5), {"padding": (0, 2)}),  # a single row
    ((1, 5, 3, 3), (5, 1, 3, 3), {}),  # one output position
    ((1, 960, 7, 7), (960, 1, 3, 3), {"padding": 1}),  # many small planes
]


@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("xs,ws,kw", CASES)
def test_depthwise_conv2d(xs, ws, kw, bias):
    groups = xs[1]
    tx, kx = make(xs, "float32", seed=0, low=-1.0, high=1.0)
    tw, kw_ = make(ws, "float32", seed=1, low=-1.0, high=1.0)
    tb, kb = make((ws[0],), "float32", seed=2) if bias else (None, None)
    got = KF.conv2d(kx, kw_, kb, groups=groups, **kw)
    assert_close(got, F.conv2d(tx, tw, tb, groups=groups, **kw), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("kw", [{"padding": 2}, {"stride": 3, "padding": 1, "dilation": 2}])
def test_depthwise_conv1d(kw):
    tx, kx = make((2, 6, 50), "float32", seed=3)
    tw, kw_ = make((12, 1, 5), "float32", seed=4)
    assert_close(KF.conv1d(kx, kw_, groups=6, **kw), F.conv1d(tx, tw, groups=6, **kw),
                 atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("kw", [{"padding": 1}, {"stride": (2, 1, 2), "padding": (1, 0, 1)}])
def test_depthwise_conv3d(kw):
    tx, kx = make((2, 4, 6, 7, 9), "float32", seed=5)
    tw, kw_ = make((4, 1, 3, 2, 3), "float32", seed=6)
    tb, kb = make((4,), "float32", seed=7)
    assert_close(KF.conv3d(kx, kw_, kb, groups=4, **kw), F.conv3d(tx, tw, tb, groups=4, **kw),
                 atol=1e-4, rtol=1e-4)


def test_depthwise_float64_and_reduced_precision():
    tx, kx = make((2, 8, 11, 11), "float64", seed=8)
    tw, kw = make((8, 1, 3, 3), "float64", seed=9)
    assert_close(KF.conv2d(kx, kw, padding=1, stride=2, groups=8),
                 F.conv2d(tx, tw, padding=1, stride=2, groups=8), atol=1e-12, rtol=1e-12)
    for dtype in ("bfloat16", "float16"):
        got = KF.conv2d(kx.to(getattr(kiln, dtype)), kw.to(getattr(kiln, dtype)), padding=1,
                        groups=8)
        want = F.conv2d(tx.float(), tw.float(), padding=1, groups=8).to(getattr(torch, dtype))
        assert got.dtype == getattr(kiln, dtype)
        assert_close(got, want, atol=0.1, rtol=0.02)


def test_depthwise_keeps_nan_and_inf():
    tx, _ = make((1, 4, 9, 9), "float32", seed=10)
    tx[0, 1, 4, 4] = float("nan")
    tx[0, 2, 0, 0] = float("inf")
    kx = kiln.from_numpy(tx.numpy().copy())
    tw, kw = make((4, 1, 3, 3), "float32", seed=11)
    assert_close(KF.conv2d(kx, kw, padding=1, groups=4), F.conv2d(tx, tw, padding=1, groups=4))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_depthwise_threads_give_identical_results(threads):
    _, kx = make((3, 40, 21, 30), "float32", seed=12)
    _, kw = make((40, 1, 3, 3), "float32", seed=13)
    kiln.set_num_threads(1)
    try:
        want = KF.conv2d(kx, kw, padding=1, groups=40).numpy()
        kiln.set_num_threads(threads)
        got = KF.conv2d(kx, kw, padding=1, groups=40).numpy()
    finally:
        kiln.set_num_threads(0)
    np.testing.assert_array_equal(got, want)


def test_depthwise_gradients_equal_torch():
    tx, kx = make((2, 6, 10, 10), "float64", seed=14)
    tw, kw = make((12, 1, 3, 3), "float64", seed=15)
    tx.requires_grad_(True)
    tw.requires_grad_(True)
    kx.requires_grad_(True)
    kw.requires_grad_(True)
    F.conv2d(tx, tw, stride=2, padding=1, groups=6).square().sum().backward()
    KF.conv2d(kx, kw, stride=2, padding=1, groups=6).square().sum().backward()
    assert_close(kx.grad, tx.grad, atol=1e-10, rtol=1e-10)
    assert_close(kw.grad, tw.grad, atol=1e-10, rtol=1e-10)

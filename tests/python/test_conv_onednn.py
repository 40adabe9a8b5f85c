"""Convolutions on oneDNN (runtime/onednn_conv.cc) against torch: windows of every kind run there
(blocked layouts, reorders around each call), float32 1x1 and depthwise ones stay on kiln's
kernels (bfloat16 ones, and strided float32 depthwise ones over small planes, run on oneDNN),
bfloat16 runs natively where the CPU has bfloat16 dot products, and KILN_ONEDNN=0 (or no
library) gives the same results on kiln's own kernels."""

import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import assert_close, make

import kiln
import kiln.nn.functional as KF
from kiln._capture.backend_compiled import CpuBackend

FLOAT32, BF16, _ = kiln._C._onednn_conv_stats()
needs_onednn = pytest.mark.skipif(not FLOAT32, reason="oneDNN is not installed here")


def calls():
    return kiln._C._onednn_conv_stats()[2]


def once_on_onednn(op, xs, ws, kw, bias_channels, seed):
    """kiln's `op` (asserted to run once on oneDNN) and torch's, on the same random operands; a
    bias of `bias_channels` unless that is None."""
    tx, kx = make(xs, "float32", seed=seed, low=-1.0, high=1.0)
    tw, kw_ = make(ws, "float32", seed=seed + 1, low=-1.0, high=1.0)
    tb, kb = (make((bias_channels,), "float32", seed=seed + 2) if bias_channels
              else (None, None))
    before = calls()
    got = getattr(KF, op)(kx, kw_, kb, **kw)
    assert calls() == before + 1, f"{op} did not run on oneDNN"
    return got, getattr(F, op)(tx, tw, tb, **kw)


WINDOWS = [
    # (op, input, weight, kwargs)
    ("conv2d", (1, 3, 64, 64), (16, 3, 7, 7), {"stride": 2, "padding": 3}),  # a stem
    ("conv2d", (2, 16, 20, 20), (32, 16, 3, 3), {"padding": 1}),
    ("conv2d", (2, 16, 21, 19), (24, 16, 3, 3), {"stride": 2, "padding": 1}),
    ("conv2d", (1, 8, 17, 13), (8, 8, 3, 3), {"padding": 2, "dilation": 2}),
    ("conv2d", (1, 8, 12, 12), (8, 8, 2, 4), {"padding": "same"}),  # asymmetric padding
    ("conv2d", (2, 16, 12, 12), (32, 4, 3, 3), {"padding": 1, "groups": 4}),
    ("conv2d", (1, 8, 9, 9), (8, 8, 3, 3), {"stride": 3}),  # the last column never read
    ("conv1d", (3, 8, 50), (16, 8, 5), {"padding": 2, "stride": 2}),
    ("conv3d", (2, 4, 6, 7, 9), (8, 4, 3, 2, 3), {"padding": (1, 0, 1)}),
]


@needs_onednn
@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("op,xs,ws,kw", WINDOWS)
def test_window_convolutions_run_on_onednn(op, xs, ws, kw, bias):
    got, want = once_on_onednn(op, xs, ws, kw, ws[0] if bias else None, seed=0)
    assert_close(got, want, atol=5e-5, rtol=5e-5)


@needs_onednn
def test_unbatched_input_and_a_second_call_reuse_the_primitive():
    tx, kx = make((16, 20, 20), "float32", seed=3)
    tw, kw = make((8, 16, 3, 3), "float32", seed=4)
    for _ in range(2):  # the second call takes the cached primitive and its buffers
        assert_close(KF.conv2d(kx, kw, padding=1), F.conv2d(tx, tw, padding=1), atol=1e-4,
                     rtol=1e-4)


@needs_onednn
@pytest.mark.parametrize("ws,kw", [((32, 16, 1, 1), {}), ((16, 1, 3, 3), {"groups": 16})])
def test_pointwise_and_depthwise_stay_on_kiln_kernels(ws, kw):
    tx, kx = make((2, 16, 14, 14), "float32", seed=5)
    tw, kw_ = make(ws, "float32", seed=6)
    before = calls()
    got = KF.conv2d(kx, kw_, **kw)
    assert calls() == before
    assert_close(got, F.conv2d(tx, tw, **kw), atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not BF16, reason="no oneDNN or no bfloat16 dot products on this CPU")
def test_bfloat16_convolution_runs_natively():
    tx, kx = make((2, 16, 14, 14), "float32", seed=7, low=-1.0, high=1.0)
    tw, kw = make((32, 16, 3, 3), "float32", seed=8, low=-1.0, high=1.0)
    tb, kb = make((32,), "float32", seed=9)
    before = calls()
    got = KF.conv2d(kx.to(kiln.bfloat16), kw.to(kiln.bfloat16), kb.to(kiln.bfloat16), padding=1)
    assert calls() == before + 1
    assert got.dtype == kiln.bfloat16
    want = F.conv2d(tx.bfloat16(), tw.bfloat16(), tb.bfloat16(), padding=1)
    assert_close(got, want, atol=0.1, rtol=0.02)


@pytest.mark.skipif(not BF16, reason="no oneDNN or no bfloat16 dot products on this CPU")
@pytest.mark.parametrize("xs,ws,kw", [
    ((2, 16, 14, 14), (32, 16, 1, 1), {}),
    ((1, 24, 9, 9), (8, 24, 1, 1), {"stride": 2}),
    ((2, 12, 6, 6), (12, 4, 1, 1), {"groups": 3}),
])
def test_bfloat16_pointwise_convolution_runs_on_onednn_forward_and_backward(xs, ws, kw):
    """A bfloat16 1x1 convolution computed as a float32 GEMM on converted copies was 2-3x slower
    than oneDNN's native kernel: it runs there, its gradients too."""
    tx, kx = make(xs, "float32", seed=30, low=-1.0, high=1.0)
    tw, kw_ = make(ws, "float32", seed=31, low=-1.0, high=1.0)
    tx, kx, tw, kw_ = tx.bfloat16(), kx.to(kiln.bfloat16), tw.bfloat16(), kw_.to(kiln.bfloat16)
    for t in (tx, tw, kx, kw_):
        t.requires_grad_(True)
    before = calls()
    got = KF.conv2d(kx, kw_, **kw)
    assert calls() == before + 1 and got.dtype == kiln.bfloat16
    want = F.conv2d(tx, tw, **kw)
    assert_close(got.float(), want.float(), atol=0.05, rtol=0.02)
    tg, kg = make(tuple(want.shape), "float32", seed=32)
    before = calls()
    got.backward(kg.to(kiln.bfloat16))
    assert calls() == before + 2, "the input and weight gradients did not run on oneDNN"
    want.backward(tg.bfloat16())
    for k, t in ((kx, tx), (kw_, tw)):
        assert_close(k.grad.float(), t.grad.float(), atol=0.1, rtol=0.03)


@needs_onednn
@pytest.mark.parametrize("xs,stride,dtype,on_onednn", [
    ((1, 64, 14, 14), 2, "float32", True),  # a strided small plane: oneDNN is 5x faster
    ((2, 16, 14, 14), 2, "float32", True),
    ((1, 16, 30, 30), 2, "float32", False),  # 15x15 outputs: kiln's kernel
    ((1, 16, 14, 14), 1, "float32", False),
    ((1, 24, 20, 20), 1, "bfloat16", True),  # kiln's kernel would compute on float32 copies
    ((2, 24, 21, 17), 2, "bfloat16", True),
])
def test_depthwise_routing_and_results(xs, stride, dtype, on_onednn):
    if dtype == "bfloat16" and not BF16:
        pytest.skip("no bfloat16 dot products on this CPU")
    c = xs[1]
    tx, kx = make(xs, "float32", seed=40, low=-1.0, high=1.0)
    tw, kw = make((c, 1, 3, 3), "float32", seed=41, low=-1.0, high=1.0)
    if dtype == "bfloat16":
        tx, kx, tw, kw = tx.bfloat16(), kx.to(kiln.bfloat16), tw.bfloat16(), kw.to(kiln.bfloat16)
    before = calls()
    got = KF.conv2d(kx, kw, stride=stride, padding=1, groups=c)
    assert calls() == before + on_onednn
    want = F.conv2d(tx, tw, stride=stride, padding=1, groups=c)
    tol = 0.03 if dtype == "bfloat16" else 1e-5
    assert_close(got.float(), want.float(), atol=tol, rtol=tol)


@needs_onednn
def test_threads_agree():
    _, kx = make((2, 16, 21, 30), "float32", seed=10)
    _, kw = make((24, 16, 3, 3), "float32", seed=11)
    kiln.set_num_threads(1)
    try:
        want = KF.conv2d(kx, kw, padding=1).numpy()
        kiln.set_num_threads(2)
        got = KF.conv2d(kx, kw, padding=1).numpy()
    finally:
        kiln.set_num_threads(0)
    assert abs(got - want).max() <= 1e-5


def test_without_onednn_kiln_kernels_give_torch_results():
    """KILN_ONEDNN=0: the direct and im2col kernels, checked by their own test file."""
    here = os.path.dirname(__file__)
    env = dict(os.environ, KILN_ONEDNN="0")
    code = ("import kiln, sys; assert kiln._C._onednn_conv_stats() == (False, False, 0); "
            "import pytest; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', "
            f"{os.path.join(here, 'test_conv_direct.py')!r}, "
            f"{os.path.join(here, 'test_conv_depthwise.py')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=here, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_compiled_conv_net_runs_its_windows_on_onednn():
    torch.manual_seed(0)
    tnet = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)).eval()
    knet = kiln.nn.Sequential(kiln.nn.Conv2d(3, 8, 3, padding=1), kiln.nn.ReLU(),
                              kiln.nn.Conv2d(8, 8, 3, stride=2, padding=1)).eval()
    knet.load_state_dict({k: kiln.tensor(v.numpy()) for k, v in tnet.state_dict().items()})
    tx, kx = make((2, 3, 16, 16), "float32", seed=12)
    backend = CpuBackend(fallback=False)  # a declined node raises instead of running eagerly
    compiled = kiln.compile(knet, backend=backend)
    with kiln.no_grad(), torch.no_grad():
        compiled(kx)  # capture and compile
        before = calls()
        got = compiled(kx)
        want = tnet(tx)
    assert calls() - before == (2 if FLOAT32 else 0)
    assert len(backend.reports) == 1 and len(backend.reports[0].parts) == 1
    assert backend.reports[0].eager_nodes == 0
    assert_close(got, want, atol=1e-4, rtol=1e-4)


@needs_onednn
@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("op,xs,ws,kw", WINDOWS + [
    ("conv2d", (2, 12, 15, 15), (12, 1, 3, 3), {"stride": 2, "padding": 1, "groups": 12}),
])
def test_backward_runs_on_onednn_and_equals_torch(op, xs, ws, kw):
    tx, kx = make(xs, "float32", seed=13, low=-1.0, high=1.0)
    tw, kw_ = make(ws, "float32", seed=14, low=-1.0, high=1.0)
    tb, kb = make((ws[0],), "float32", seed=15)
    for t in (tx, tw, tb, kx, kw_, kb):
        t.requires_grad_(True)
    tout = getattr(F, op)(tx, tw, tb, **kw)
    kout = getattr(KF, op)(kx, kw_, kb, **kw)
    tg, kg = make(tuple(tout.shape), "float32", seed=16)
    before = calls()
    kout.backward(kg)
    assert calls() == before + 2, "the input and weight gradients did not run on oneDNN"
    tout.backward(tg)
    for k, t in ((kx, tx), (kw_, tw), (kb, tb)):
        assert_close(k.grad, t.grad, atol=2e-4, rtol=2e-4)


@needs_onednn
@pytest.mark.parametrize("need", ["input", "weight"])
def test_backward_of_one_operand_and_unbatched_input(need):
    tx, kx = make((8, 11, 9), "float32", seed=17)
    tw, kw = make((6, 8, 3, 3), "float32", seed=18)
    for t in ((tx, kx) if need == "input" else (tw, kw)):
        t.requires_grad_(True)
    before = calls()
    KF.conv2d(kx, kw, padding=1, stride=2).square().sum().backward()
    assert calls() == before + 2  # the forward and one backward pass
    F.conv2d(tx, tw, padding=1, stride=2).square().sum().backward()
    k, t = (kx, tx) if need == "input" else (kw, tw)
    assert_close(k.grad, t.grad, atol=1e-4, rtol=1e-4)
    assert (kw if need == "input" else kx).grad is None


def test_double_backward_keeps_the_differentiable_rule():
    tx, kx = make((1, 3, 7, 7), "float64", seed=19)
    tw, kw = make((4, 3, 3, 3), "float64", seed=20)
    for t in (tx, tw, kx, kw):
        t.requires_grad_(True)
    (kgx,) = kiln.autograd.grad(KF.conv2d(kx, kw, padding=1).square().sum(), kx,
                                create_graph=True)
    (tgx,) = torch.autograd.grad(F.conv2d(tx, tw, padding=1).square().sum(), tx,
                                 create_graph=True)
    kgx.sum().backward()
    tgx.sum().backward()
    assert_close(kw.grad, tw.grad, atol=1e-10, rtol=1e-10)


TRANSPOSED = [
    # (op, input, weight [in, out / groups, *kernel], kwargs)
    ("conv_transpose2d", (2, 16, 7, 7), (16, 8, 4, 4), {"stride": 2, "padding": 1}),  # a decoder
    ("conv_transpose2d", (1, 8, 5, 6), (8, 4, 3, 3), {"stride": 2, "padding": 1,
                                                      "output_padding": 1}),
    ("conv_transpose2d", (2, 8, 5, 5), (8, 3, 3, 2), {"groups": 2, "dilation": (2, 1)}),
    ("conv_transpose1d", (2, 6, 9), (6, 4, 5), {"stride": 3, "padding": 2}),
    ("conv_transpose3d", (1, 4, 3, 4, 5), (4, 2, 2, 3, 3), {"stride": 2, "padding": (0, 1, 1)}),
]


@needs_onednn
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("op,xs,ws,kw", TRANSPOSED)
def test_transposed_convolutions_run_on_onednn(op, xs, ws, kw, bias):
    out_channels = ws[1] * kw.get("groups", 1)
    got, want = once_on_onednn(op, xs, ws, kw, out_channels if bias else None, seed=21)
    assert_close(got, want, atol=5e-5, rtol=5e-5)


@needs_onednn
def test_output_padding_past_the_padding_stays_on_kiln_kernels():
    # output_padding 1 > padding 0: the forward convolution would need a trailing pad of -1
    tx, kx = make((1, 4, 5, 5), "float32", seed=24)
    tw, kw = make((4, 3, 3, 3), "float32", seed=25)
    before = calls()
    got = KF.conv_transpose2d(kx, kw, stride=2, output_padding=1)
    assert calls() == before
    assert_close(got, F.conv_transpose2d(tx, tw, stride=2, output_padding=1), atol=1e-4,
                 rtol=1e-4)


def test_empty_batch_forward_and_backward():
    tx = torch.zeros(0, 4, 8, 8, requires_grad=True)
    tw = torch.randn(6, 4, 3, 3, requires_grad=True)
    kx = kiln.zeros(0, 4, 8, 8, requires_grad=True)
    kw = kiln.tensor(tw.detach().numpy(), requires_grad=True)
    ky, ty = KF.conv2d(kx, kw, padding=1), F.conv2d(tx, tw, padding=1)
    assert tuple(ky.shape) == tuple(ty.shape)
    ky.sum().backward()
    ty.sum().backward()
    assert_close(kw.grad, tw.grad)
    assert_close(kx.grad, tx.grad)


@pytest.mark.skipif(not BF16, reason="no oneDNN or no bfloat16 dot products on this CPU")
def test_bfloat16_transposed_convolution_with_bias_rounds_once():
    tx, kx = make((2, 8, 5, 5), "float32", seed=26, low=-1.0, high=1.0)
    tw, kw = make((8, 4, 3, 3), "float32", seed=27, low=-1.0, high=1.0)
    tb, kb = make((4,), "float32", seed=28)
    bf = kiln.bfloat16
    got = KF.conv_transpose2d(kx.to(bf), kw.to(bf), kb.to(bf), stride=2)
    want = F.conv_transpose2d(tx.bfloat16(), tw.bfloat16(), tb.bfloat16(), stride=2)
    assert_close(got, want, atol=0.05, rtol=0.02)

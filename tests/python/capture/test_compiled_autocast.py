"""kiln.compile under kiln.autocast: a compiled function called inside a region gets the casts
eager makes as cast nodes of its graph (same dtypes, values within the narrow type's rounding,
nothing on eager kernels), is guarded on the regions (entering or leaving one captures again),
and trains compiled with eager's gradients. A region opened inside compiled code compiles the
same way, and a graph break inside it resumes with the region open."""

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn.functional as F
from kiln._capture.backend_compiled import CpuBackend

TARGETS = kiln.tensor([0, 1, 2, 3, 0, 1, 2, 3])


def mlp():
    kiln.manual_seed(0)
    return kiln.nn.Sequential(kiln.nn.Linear(16, 32), kiln.nn.GELU(), kiln.nn.Linear(32, 4))


def close(a, b, tol):
    np.testing.assert_allclose(a.detach().float().numpy(), b.detach().float().numpy(), rtol=tol,
                               atol=tol)


@pytest.mark.parametrize("dtype", [kiln.bfloat16, kiln.float16])
def test_inference_inside_a_region_compiles_the_casts(dtype):
    m = mlp()

    def step(x):
        out = m(x)
        return out, F.cross_entropy(out, TARGETS), out.softmax(-1)

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(step, backend=backend)
    x = kiln.randn(8, 16)
    for enabled in (True, False, True):
        with kiln.autocast("cpu", dtype=dtype, enabled=enabled):
            want, got = step(x), compiled(x)
        for w, g in zip(want, got, strict=True):
            assert g.dtype == w.dtype
            close(g, w, 1e-2 if w.dtype != kiln.float32 or enabled else 1e-6)
    assert want[0].dtype == dtype and want[1].dtype == kiln.float32  # linear down, loss up
    assert len(backend.reports) == 2, "one capture per region state"
    assert all(r.eager_nodes == 0 for r in backend.reports)
    guards = kiln.explain(step)(x).guards
    assert any(g.startswith("autocast regions: none") for g in guards)


def test_training_inside_a_region_matches_eager():
    eager, model = mlp(), mlp()
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(model, backend=backend)
    x = kiln.randn(8, 16)
    for net in (eager, compiled):
        with kiln.autocast("cpu"):
            loss = F.cross_entropy(net(x), TARGETS)
        loss.backward()
    assert sum(r.backward_parts for r in backend.reports) == 1
    assert all(r.eager_nodes == 0 for r in backend.reports)
    for (name, p), (_, q) in zip(eager.named_parameters(), model.named_parameters(), strict=True):
        assert q.grad.dtype == kiln.float32, name
        close(q.grad, p.grad, 2e-2)


def test_a_region_opened_inside_compiled_code_compiles():
    def f(a, b):
        with kiln.autocast("cpu", dtype=kiln.bfloat16):
            y = (a @ b).relu()
            loss = F.mse_loss(y, y * 0.5)
            with kiln.autocast("cpu", enabled=False):
                full = a @ b
        return y, y.float() * 2, loss, full, a @ b

    a, b = kiln.randn(4, 8), kiln.randn(8, 3)
    backend = CpuBackend(fallback=False)
    want, got = f(a, b), kiln.compile(f, backend=backend)(a, b)
    assert [g.dtype for g in got] == [kiln.bfloat16] + [kiln.float32] * 4
    for w, g in zip(want, got, strict=True):
        assert g.dtype == w.dtype
        close(g, w, 0)
    assert kiln.explain(f)(a, b).graph_break_count == 0
    assert backend.reports[0].eager_nodes == 0
    assert not kiln.is_autocast_enabled("cpu")  # the capture put the regions back


def test_a_graph_break_inside_a_region_resumes_inside_it(capsys):
    def f(a, b):
        with kiln.autocast("cpu"):
            y = a @ b
            print("inside")
            w = y @ b.t()
        return w, a @ b

    a, b = kiln.randn(4, 8), kiln.randn(8, 8)
    compiled = kiln.compile(f)
    want = f(a, b)
    for _ in range(2):  # the capture, then the compiled entry with its break
        got = compiled(a, b)
        assert [g.dtype for g in got] == [kiln.bfloat16, kiln.float32]
        for w, g in zip(want, got, strict=True):
            close(g, w, 0)
        assert not kiln.is_autocast_enabled("cpu")
    assert capsys.readouterr().out.count("inside") == 3


def conv_bn_net():
    kiln.manual_seed(0)
    nn = kiln.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 4))


def test_conv_batchnorm_training_inside_a_region_compiles():
    """BatchNorm in training mode on a bfloat16 input (after an autocast convolution): its
    statistics and affine map in float32 as eager's kernel, the result bfloat16; the running
    statistics and every gradient as eager's."""
    eager, model = conv_bn_net(), conv_bn_net()
    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(model, backend=backend)
    x = kiln.randn(4, 3, 8, 8)
    for net in (eager, compiled):
        with kiln.autocast("cpu"):
            loss = F.cross_entropy(net(x), TARGETS[:4])
        loss.backward()
    assert all(r.eager_nodes == 0 and not r.fallbacks for r in backend.reports)
    assert sum(r.backward_parts for r in backend.reports) == 1
    close(model[1].running_mean, eager[1].running_mean, 1e-2)
    close(model[1].running_var, eager[1].running_var, 1e-2)
    for (name, p), (_, q) in zip(eager.named_parameters(), model.named_parameters(), strict=True):
        assert q.grad.dtype == kiln.float32, name
        close(q.grad, p.grad, 3e-2)


def test_an_eager_op_in_a_block_runs_in_the_blocks_regions():
    """An op the compiler leaves to eager (conv2d with padding='same' is one) inside a block the
    code opens runs in that block's regions, not the caller's."""

    def f(x, w):
        with kiln.autocast("cpu", enabled=False):
            y = F.conv2d(x, w, padding="same")
        return y, x @ x.transpose(-1, -2)

    x, w = kiln.randn(1, 2, 5, 5), kiln.randn(3, 2, 3, 3)
    with kiln.autocast("cpu"):
        want, got = f(x, w), kiln.compile(f)(x, w)
    assert [g.dtype for g in got] == [w.dtype for w in want] == [kiln.float32, kiln.bfloat16]
    for a, b in zip(want, got, strict=True):
        close(b, a, 0)


def test_list_form_einsum_gets_the_casts():
    def f(a, b):
        return kiln.einsum("ij,jk->ki", [a, b])

    a, b = kiln.randn(3, 4), kiln.randn(4, 5)
    backend = CpuBackend(fallback=False)
    with kiln.autocast("cpu"):
        want, got = f(a, b), kiln.compile(f, backend=backend)(a, b)
    assert got.dtype == want.dtype == kiln.bfloat16
    close(got, want, 0)
    assert backend.reports[0].eager_nodes == 0


def test_the_guard_sees_the_region_dtype_a_block_reads():
    def f(a):
        with kiln.autocast("cpu"):  # the dtype of the region at the time
            return a @ a

    compiled, a = kiln.compile(f), kiln.randn(3, 3)
    assert compiled(a).dtype == kiln.bfloat16
    kiln.set_autocast_dtype("cpu", kiln.float16)
    try:
        assert compiled(a).dtype == f(a).dtype == kiln.float16
    finally:
        kiln.set_autocast_dtype("cpu", kiln.bfloat16)


def test_export_puts_the_regions_back_when_it_fails():
    def f(x):
        with kiln.autocast("cpu"):
            y = x @ x
            if y.sum() > 0:  # a data-dependent branch: export refuses it
                return y
            return -y

    with pytest.raises(Exception, match="graph break"):
        kiln.export(f, (kiln.randn(3, 3),))
    assert not kiln.is_autocast_enabled("cpu")


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm", "group_norm"])
def test_norms_after_a_low_precision_gemm_compile_and_keep_its_dtype(norm):
    """A LayerNorm / RMSNorm / GroupNorm with float32 parameters after a bfloat16 GEMM (autocast):
    eager normalizes in float32 and returns bfloat16, with or without autograd (torch's dtype);
    compiled, the input is widened and the result narrowed, with no eager node, in inference
    and in training."""
    import torch

    kiln.manual_seed(0)
    layers = {"layer_norm": kiln.nn.LayerNorm(16), "rms_norm": kiln.nn.RMSNorm(16),
              "group_norm": kiln.nn.GroupNorm(4, 16)}  # fmt: skip
    net = kiln.nn.Sequential(kiln.nn.Linear(16, 16), layers[norm], kiln.nn.Linear(16, 4))
    tnorm = {"layer_norm": torch.nn.LayerNorm(16), "rms_norm": torch.nn.RMSNorm(16),
             "group_norm": torch.nn.GroupNorm(4, 16)}[norm]  # fmt: skip
    h = torch.randn(8, 16, dtype=torch.bfloat16, requires_grad=True)
    assert tnorm(h).dtype == torch.bfloat16
    assert net[1](kiln.randn(8, 16, dtype=kiln.bfloat16, requires_grad=True)).dtype == (
        kiln.bfloat16)
    x = kiln.randn(8, 16)
    for grad in (False, True):
        backend = CpuBackend(fallback=False)
        compiled = kiln.compile(net, backend=backend)
        with kiln.set_grad_enabled(grad), kiln.autocast("cpu", dtype=kiln.bfloat16):
            got, want = compiled(x), net(x)
        assert got.dtype == want.dtype == kiln.bfloat16
        close(got, want, 3e-2)
        assert [r.eager_nodes for r in backend.reports] == [0]
        if grad:
            got.float().sum().backward()
            assert backend.reports[0].backward_parts == 1

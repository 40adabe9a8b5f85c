"""kiln.compile and autograd: with grad mode on and parameters that require grad, the graph
compiles a forward and a backward (no fallback) and its gradients are eager's; under no_grad the
same module compiles its inference graph."""

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln._capture.backend_compiled import BackendCompilerFailed, CpuBackend


def model():
    kiln.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))


def test_inference_compiles_without_fallbacks():
    m, x = model(), kiln.randn(3, 8)
    backend = CpuBackend(fallback=False)  # a decline raises
    with kiln.no_grad():
        y = kiln.compile(m, backend=backend)(x)
        np.testing.assert_allclose(y.numpy(), m(x).numpy(), rtol=1e-5, atol=1e-6)
    (report,) = backend.reports
    assert len(report.parts) == 1 and report.eager_nodes == 0 and report.fallbacks == []


def test_training_graph_compiles_for_a_strict_backend():
    m, x = model(), kiln.randn(3, 8)
    backend = CpuBackend(fallback=False)
    y = kiln.compile(m, backend=backend)(x)
    (report,) = backend.reports
    assert report.backward_parts == 1 and report.eager_nodes == 0 and y.requires_grad


def test_a_strict_backend_refuses_what_has_no_compiled_derivative():
    w = kiln.randn(4, 4).requires_grad_()
    with pytest.raises(BackendCompilerFailed, match="no compiled derivative"):
        kiln.compile(lambda x: kiln.nn.functional.conv_transpose2d(  # output_padding >= stride
            (x * w).reshape(1, 1, 4, 4), kiln.ones(1, 1, 2, 2), dilation=3, output_padding=1),
            backend=CpuBackend(fallback=False))(kiln.randn(4, 4))


def test_training_graph_compiles_its_backward_and_matches_eager():
    m, x = model(), kiln.randn(3, 8)
    out = kiln.explain(m)(x)
    assert out.fallbacks == [[]] and out.backward_parts == [1]
    assert "part0 trains: forward" in out.report()
    compiled = kiln.compile(m)
    y = compiled(x)
    assert y.grad_fn is not None
    y.square().sum().backward()
    grads = [p.grad.numpy().copy() for p in m.parameters()]
    m.zero_grad()
    m(x).square().sum().backward()
    for g, p in zip(grads, m.parameters(), strict=True):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-5, atol=1e-6)  # fused float32


def test_no_grad_block_inside_compiled_code_keeps_its_mode():
    m = model()

    def f(x):
        with kiln.no_grad():
            frozen = m(x)
        return frozen, m(x)

    frozen, live = kiln.compile(f)(kiln.randn(2, 8))
    assert not frozen.requires_grad and live.requires_grad

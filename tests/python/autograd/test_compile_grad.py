"""kiln.compile and autograd: with grad mode on and parameters that require grad, the graph runs
on the eager kernels (one reported fallback) and its gradients are eager's; under no_grad the same
module compiles with no fallback at all."""

import numpy as np
import pytest

import kiln
import kiln.nn as nn
from kiln._capture.backend_cpu import BackendCompilerFailed, CpuBackend


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


def test_training_graph_refuses_a_strict_backend():
    m, x = model(), kiln.randn(3, 8)
    with pytest.raises(BackendCompilerFailed, match="require grad"):
        kiln.compile(m, backend=CpuBackend(fallback=False))(x)


def test_training_graph_runs_eagerly_and_backward_matches_eager():
    m, x = model(), kiln.randn(3, 8)
    out = kiln.explain(m)(x)
    ((node, target, reason),) = out.fallbacks[0]
    assert target == "the whole graph" and "require grad" in reason
    compiled = kiln.compile(m)
    y = compiled(x)
    assert y.grad_fn is not None
    y.square().sum().backward()
    grads = [p.grad.numpy().copy() for p in m.parameters()]
    m.zero_grad()
    m(x).square().sum().backward()
    for g, p in zip(grads, m.parameters(), strict=True):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-6)


def test_no_grad_block_inside_compiled_code_keeps_its_mode():
    m = model()

    def f(x):
        with kiln.no_grad():
            frozen = m(x)
        return frozen, m(x)

    frozen, live = kiln.compile(f)(kiln.randn(2, 8))
    assert not frozen.requires_grad and live.requires_grad

"""Gradients of the scatters against PyTorch: scatter (with a source), scatter_add and index_add,
out of place and in place (the GNN idiom `zeros(...).index_add_(0, idx, src)`), and the forms
autograd does not follow refusing instead of dropping the gradient."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

G = np.random.default_rng(0)


def _grads(fn, *arrays):
    ours = [kiln.from_numpy(a.copy()).requires_grad_() for a in arrays]
    theirs = [torch.from_numpy(a.copy()).requires_grad_() for a in arrays]
    w = G.standard_normal(tuple(fn(torch, *theirs).shape)).astype(np.float32)
    a = (fn(kiln, *ours) * kiln.from_numpy(w)).sum()
    b = (fn(torch, *theirs) * torch.from_numpy(w)).sum()
    np.testing.assert_allclose(a.item(), b.item(), rtol=1e-5)
    a.backward()
    b.backward()
    for x, y in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-5, atol=1e-6)


IDX = np.array([[0, 3], [1, 1], [2, 0]])
ROWS = np.array([0, 2, 2, 1, 0])


def test_out_of_place():
    x = G.standard_normal((3, 4)).astype(np.float32)
    s = G.standard_normal((3, 2)).astype(np.float32)
    _grads(lambda m, x, s: x.scatter_add(1, m.from_numpy(IDX), s), x, s)
    _grads(
        lambda m, x, s: m.scatter(x, 1, m.from_numpy(np.array([[0, 3], [1, 2], [2, 0]])), s), x, s
    )
    src = G.standard_normal((5, 4)).astype(np.float32)
    _grads(lambda m, x, s: x.index_add(0, m.from_numpy(ROWS), s, alpha=2), x, src)


def test_in_place_on_a_fresh_tensor():
    src = G.standard_normal((5, 3)).astype(np.float32)

    def gnn(m, s):
        out = m.zeros(3, 3).index_add_(0, m.from_numpy(ROWS), s)
        out2 = m.zeros(3, 3).scatter_add_(0, m.from_numpy(np.repeat(ROWS[:, None], 3, 1)), s * 2)
        y = s.clone()
        y.scatter_(1, m.from_numpy(np.zeros((5, 1), dtype=np.int64)), s[:, 1:2] * 3)
        return out * out2 + y[:3]

    _grads(gnn, src)


def test_untracked_forms_refuse():
    x = kiln.randn(3, 4, requires_grad=True)
    idx = kiln.zeros(3, 1, dtype=kiln.int64)
    with pytest.raises(NotImplementedError, match="not differentiable yet"):
        kiln.scatter(x, 1, idx, value=2.0)
    with pytest.raises(NotImplementedError, match="not differentiable yet"):
        x.clone().scatter_(1, idx, kiln.ones(3, 1), reduce="add")
    with pytest.raises(NotImplementedError, match="not differentiable yet"):
        x.scatter_reduce(1, idx, kiln.ones(3, 1), "prod")
    with kiln.no_grad():  # without grad mode every form runs
        kiln.scatter(x, 1, idx, value=2.0)

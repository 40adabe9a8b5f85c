"""Gradients of cumprod (exact with zeros, one or several per line) and logcumsumexp (gradients
of both signs) against PyTorch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import kiln  # noqa: E402

G = np.random.default_rng(0)


def _check(fn, a, dtype=np.float64):
    a = a.astype(dtype)
    x, t = kiln.from_numpy(a.copy()).requires_grad_(), torch.from_numpy(a.copy()).requires_grad_()
    ours, theirs = fn(kiln, x), fn(torch, t)
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=1e-6)
    w = G.standard_normal(tuple(theirs.shape)).astype(dtype)
    (ours * kiln.from_numpy(w)).sum().backward()
    (theirs * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cumprod(dim):
    a = G.standard_normal((4, 6))
    _check(lambda m, x: m.cumprod(x, dim), a)
    a[1, 2] = 0.0  # one zero, then two in a line
    a[2, 1] = a[2, 4] = 0.0
    a[0, 0] = 0.0
    _check(lambda m, x: x.cumprod(dim), a)
    _check(lambda m, x: x.cumprod(dim), a, np.float32)


@pytest.mark.parametrize("dim", [0, -1])
def test_logcumsumexp(dim):
    a = G.standard_normal((4, 6)) * 3
    _check(lambda m, x: m.logcumsumexp(x, dim), a)
    _check(lambda m, x: x.logcumsumexp(dim) * 2, a, np.float32)

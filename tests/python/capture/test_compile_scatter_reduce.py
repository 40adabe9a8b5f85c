"""scatter_reduce compiles (it was an eager node): sum as scatter_add, prod as a multiplying
scatter, mean as their sum over the count, amax/amin as eager's kernel inside the program,
include_self either way, in place too; amax/amin train with torch's gradient (shared among
ties). Equal to eager and torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
from kiln._capture.backend_compiled import CpuBackend


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_reduce_compiles(reduce, include_self, dim):
    rng = np.random.default_rng(dim)
    x = rng.normal(size=(4, 5)).astype(np.float32)
    src = rng.normal(size=(6, 7)).astype(np.float32)
    index = rng.integers(0, x.shape[dim], (3, 4))

    def fn(a, i, s):
        return a.scatter_reduce(dim, i, s, reduce, include_self=include_self) * 2

    args = (kiln.from_numpy(x), kiln.from_numpy(index), kiln.from_numpy(src))
    backend = CpuBackend(fallback=False)
    ours = kiln.compile(fn, backend=backend)(*args)
    theirs = torch.from_numpy(x).scatter_reduce(dim, torch.from_numpy(index), torch.from_numpy(src),
                                                reduce, include_self=include_self) * 2
    np.testing.assert_allclose(ours.numpy(), fn(*args).numpy(), rtol=1e-6)
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    assert [len(r.parts) for r in backend.reports] == [1]


def test_in_place_and_integer_sum():
    x = kiln.arange(12).reshape(3, 4)
    index = kiln.tensor([[0, 1, 2, 0]])
    src = kiln.tensor([[5, 6, 7, 8]])

    def fn(a):
        a.scatter_reduce_(0, index, src, "sum")
        return a + 1

    ours, ref = x.clone(), x.clone()
    out = kiln.compile(fn, backend=CpuBackend(fallback=False))(ours)
    assert out.tolist() == fn(ref).tolist() and ours.tolist() == ref.tolist()


@pytest.mark.parametrize("reduce", ["amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_amax_amin_train_with_torchs_gradient(reduce, include_self):
    # Rounded values give ties, which share the gradient.
    rng = np.random.default_rng(7)
    x = np.round(rng.normal(size=(4, 6)), 1).astype(np.float64)
    src = np.round(rng.normal(size=(5, 6)), 1).astype(np.float64)
    index = rng.integers(0, 4, (5, 6))
    weight = rng.normal(size=(4, 6))

    def fn(a, s, i, w):
        return (a.scatter_reduce(0, i, s, reduce, include_self=include_self) * w).sum()

    results = []
    for lib, compile_ in ((torch, lambda f: f), (kiln, lambda f: kiln.compile(
            f, backend=CpuBackend(fallback=False)))):
        a = lib.tensor(x, requires_grad=True)
        s = lib.tensor(src, requires_grad=True)
        loss = compile_(fn)(a, s, lib.tensor(index), lib.tensor(weight))
        loss.backward()
        results.append((loss.item(), a.grad.numpy(), s.grad.numpy()))
    (want, wa, ws), (got, ga, gs) = results
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(ga, wa, rtol=1e-12)
    np.testing.assert_allclose(gs, ws, rtol=1e-12)


def test_amax_of_integers_in_place():
    x = kiln.tensor([5, 1, 1])
    index, src = kiln.tensor([0, 0, 2, 1]), kiln.tensor([3, 9, -2, 4])

    def fn(a):
        a.scatter_reduce_(0, index, src, "amin", include_self=False)
        return a * 2

    ours, ref = x.clone(), x.clone()
    backend = CpuBackend(fallback=False)
    out = kiln.compile(fn, backend=backend)(ours)
    assert out.tolist() == fn(ref).tolist() and ours.tolist() == ref.tolist() == [3, 4, -2]
    assert [len(r.parts) for r in backend.reports] == [1]

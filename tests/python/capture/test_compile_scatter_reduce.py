"""scatter_reduce compiles (it was an eager node): sum as scatter_add, prod as a multiplying
scatter, mean as their sum over the count, include_self either way, in place too; amax/amin
stay eager. Equal to eager and torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
from kiln._capture.backend_compiled import CpuBackend


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean"])
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


def test_amax_stays_eager_and_right():
    backend = CpuBackend()
    x, index, src = kiln.zeros(3), kiln.tensor([0, 0, 2]), kiln.tensor([1.0, 5.0, -2.0])
    out = kiln.compile(lambda a: a.scatter_reduce(0, index, src, "amax") + 1, backend=backend)(x)
    assert out.tolist() == [6.0, 1.0, 1.0]
    assert any("amax" in reason for r in backend.reports for _, _, reason in r.fallbacks)

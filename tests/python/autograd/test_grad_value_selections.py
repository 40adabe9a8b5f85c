"""max/min along a dim and take keep their autograd history (their values came back detached,
so a model's gradients silently stopped there), with torch's gradients: each selected element
gets its output's gradient, ties go to the index the kernel returns."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln


def _pair(values):
    return (kiln.from_numpy(values.copy()).requires_grad_(),
            torch.from_numpy(values.copy()).requires_grad_())  # fmt: skip


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False)])
def test_max_min_along_a_dim(name, dim, keepdim):
    x = np.random.default_rng(0).normal(size=(3, 4, 5))
    k, t = _pair(x)
    kv, ki = getattr(k, name)(dim, keepdim=keepdim)
    tv, ti = getattr(t, name)(dim, keepdim=keepdim)
    assert kv.requires_grad and not ki.requires_grad
    np.testing.assert_array_equal(ki.numpy(), ti.numpy())
    weights = np.random.default_rng(1).normal(size=tuple(tv.shape))
    (kv * kiln.from_numpy(weights)).sum().backward()
    (tv * torch.from_numpy(weights)).sum().backward()
    np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy())
    # the function spelling and the named fields record too
    assert getattr(kiln, name)(k, dim).values.requires_grad


def test_take():
    x = np.random.default_rng(2).normal(size=(3, 4))
    k, t = _pair(x)
    index = np.array([[0, 5], [-1, 5]])
    kiln.take(k, kiln.from_numpy(index)).pow(2).sum().backward()
    torch.take(t, torch.from_numpy(index)).pow(2).sum().backward()
    np.testing.assert_allclose(k.grad.numpy(), t.grad.numpy())

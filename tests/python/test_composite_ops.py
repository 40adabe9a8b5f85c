"""The composite ops (kiln/_ops_composite.py, nn/_functional_composite.py) against PyTorch:
values over a few shapes and reductions, gradients through their parts, error messages, and
that kiln.compile runs them with no eager node."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln
import kiln.nn.functional as KF
from kiln._capture.backend_compiled import CpuBackend

G = np.random.default_rng(0)


def arr(*shape, positive=False):
    a = G.standard_normal(shape).astype(np.float32)
    return np.abs(a) + 0.5 if positive else a


def signs(*shape):
    return np.where(G.standard_normal(shape) > 0, 1.0, -1.0).astype(np.float32)


# name -> (fn(module, F, *tensors), arrays); the first float arrays are differentiated
CASES = {
    "addcmul": (lambda m, F, a, b, c: m.addcmul(a, b, c, value=0.5),
                [arr(3, 4), arr(4), arr(3, 1)]),
    "addcdiv": (lambda m, F, a, b, c: a.addcdiv(b, c, value=2), [arr(3, 4), arr(3, 4),
                                                                  arr(3, 4, positive=True)]),
    "logaddexp": (lambda m, F, a, b: m.logaddexp(a, b) + a.logaddexp(b * 3), [arr(3, 4), arr(4)]),
    "diff": (lambda m, F, a, b: m.diff(a, n=2, dim=0, append=b), [arr(4, 5), arr(2, 5)]),
    "rot90": (lambda m, F, a: m.rot90(a, 1, [0, 2]) + a.rot90(3, [1, 2]).sum(), [arr(2, 3, 3)]),
    "take_along_dim": (lambda m, F, a: m.take_along_dim(a, a.argsort(1)[:, :2], 1), [arr(3, 4)]),
    "tensordot": (lambda m, F, a, b: m.tensordot(a, b, dims=([1, 2], [0, 1])),
                  [arr(2, 3, 4), arr(3, 4, 5)]),
    "tensordot_int": (lambda m, F, a, b: m.tensordot(a, b, 1), [arr(2, 3), arr(3, 4)]),
    "trace": (lambda m, F, a: m.trace(a) * a.trace(), [arr(4, 4)]),
    "trace_wide": (lambda m, F, a, b: m.trace(a) + m.trace(b), [arr(3, 5), arr(5, 2)]),
    "kron": (lambda m, F, a, b: m.kron(a, b), [arr(2, 3), arr(4, 2)]),
    "cross": (lambda m, F, a, b: m.cross(a, b, dim=1), [arr(4, 3), arr(4, 3)]),
    "cdist": (lambda m, F, a, b: m.cdist(a, b), [arr(2, 5, 3), arr(2, 4, 3)]),
    "cdist_p1": (lambda m, F, a, b: m.cdist(a, b, p=1), [arr(5, 3), arr(4, 3)]),
    "cosine_similarity": (lambda m, F, a, b: F.cosine_similarity(a, b, dim=-1),
                          [arr(3, 5), arr(1, 5)]),
    "pairwise_distance": (lambda m, F, a, b: F.pairwise_distance(a, b, keepdim=True),
                          [arr(3, 5), arr(3, 5)]),
    "pixel_shuffle": (lambda m, F, a: F.pixel_shuffle(a, 2), [arr(2, 8, 3, 3)]),
    "pixel_unshuffle": (lambda m, F, a: F.pixel_unshuffle(a, 2), [arr(2, 2, 4, 6)]),
    "channel_shuffle": (lambda m, F, a: F.channel_shuffle(a, 2), [arr(2, 6, 3)]),
    "margin_ranking_loss": (lambda m, F, a, b, t: F.margin_ranking_loss(a, b, t, margin=0.3),
                            [arr(6), arr(6), signs(6)]),
    "hinge_embedding_loss": (lambda m, F, a, t: F.hinge_embedding_loss(a, t, reduction="sum"),
                             [arr(6), signs(6)]),
    "soft_margin_loss": (lambda m, F, a, t: F.soft_margin_loss(a, t), [arr(6), signs(6)]),
    "cosine_embedding_loss": (lambda m, F, a, b, t: F.cosine_embedding_loss(a, b, t, margin=0.2),
                              [arr(4, 5), arr(4, 5), signs(4)]),
    "triplet_margin_loss": (lambda m, F, a, b, c: F.triplet_margin_loss(a, b, c, swap=True),
                            [arr(4, 5), arr(4, 5), arr(4, 5)]),
    "gaussian_nll_loss": (lambda m, F, a, b, v: F.gaussian_nll_loss(a, b, v, full=True),
                          [arr(4, 3), arr(4, 3), arr(4, 1, positive=True)]),
    "poisson_nll_loss": (lambda m, F, a, t: F.poisson_nll_loss(a, t, full=True),
                         [arr(5), arr(5, positive=True) * 3]),
}


# inputs torch does not differentiate (targets): the last ones of these cases
TARGETS = {"margin_ranking_loss": 1, "hinge_embedding_loss": 1, "soft_margin_loss": 1,
           "cosine_embedding_loss": 1, "poisson_nll_loss": 1}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(name):
    fn, arrays = CASES[name]
    grads = len(arrays) - TARGETS.get(name, 0)
    ours = [kiln.from_numpy(a.copy()).requires_grad_(k < grads) for k, a in enumerate(arrays)]
    theirs = [torch.from_numpy(a.copy()).requires_grad_(k < grads) for k, a in enumerate(arrays)]
    out = fn(kiln, KF, *ours)
    ref = fn(torch, torch.nn.functional, *theirs)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    out.sum().backward()
    ref.sum().backward()
    for a, b in zip(ours, theirs, strict=True):
        if b.grad is not None:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(set(CASES) - {"gaussian_nll_loss"}))
def test_compiled_without_eager_nodes(name):
    """(gaussian_nll_loss checks its variance for negative entries with a Python `if`, a graph
    break, as in torch.)"""
    fn, arrays = CASES[name]
    args = [kiln.from_numpy(a) for a in arrays]
    kiln.compiler.reset()
    backend = CpuBackend()
    with kiln.no_grad():
        out = kiln.compile(lambda *a: fn(kiln, KF, *a), backend=backend)(*args)
        ref = fn(kiln, KF, *args)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
    assert all(r.eager_nodes == 0 for r in backend.reports), [r.fallbacks for r in
                                                               backend.reports]


def test_errors_name_the_problem():
    x = kiln.randn(2, 5, 3, 3)
    with pytest.raises(RuntimeError, match="divisible by the square of upscale_factor"):
        KF.pixel_shuffle(x, 2)
    with pytest.raises(RuntimeError, match="contracted dimensions need to match"):
        kiln.tensordot(kiln.randn(2, 3), kiln.randn(4, 2), 1)
    with pytest.raises(RuntimeError, match="must have length 3"):
        kiln.cross(kiln.randn(4, 3), kiln.randn(4, 3), dim=0)
    with pytest.raises(ValueError, match="var is of incorrect size"):
        KF.gaussian_nll_loss(kiln.randn(4, 3), kiln.randn(4, 3), kiln.ones(2))
    with pytest.raises(RuntimeError, match="Integer division with addcdiv"):
        kiln.addcdiv(kiln.ones(2), kiln.ones(2, dtype=kiln.int64), kiln.ones(2, dtype=kiln.int64))

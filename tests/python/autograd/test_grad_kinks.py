"""Gradients where formulas have kinks, ties or saturation, eager and compiled, against torch:
binary cross entropy of probabilities that are exactly 0 or 1 (a sigmoid of a large logit),
with logits at exactly 0, max/min along a dim with tied values, hardswish at its corners."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import kiln

KF, TF = kiln.nn.functional, torch.nn.functional

CASES = {
    # name: (function of (module F, lib, x, extra), x values, extra values)
    "bce_of_saturated_sigmoid": (
        lambda F, lib, x, t: F.binary_cross_entropy(lib.sigmoid(x), t),
        [20.0, -120.0, 0.3, -30.0, 40.0], [0.0, 1.0, 0.5, 1.0, 1.0]),
    "bce_of_probabilities_0_and_1": (
        lambda F, lib, x, t: F.binary_cross_entropy(x, t, reduction="sum"),
        [1.0, 0.0, 1.0, 0.0, 0.25], [1.0, 0.0, 0.0, 1.0, 0.5]),
    "bce_logits_at_zero": (
        lambda F, lib, x, t: F.binary_cross_entropy_with_logits(x, t, reduction="sum"),
        [0.0, 0.0, 0.0, 1.5], [1.0, 0.0, 0.3, 0.2]),
    "bce_logits_at_zero_pos_weight": (
        lambda F, lib, x, t: F.binary_cross_entropy_with_logits(
            x, t, pos_weight=lib.full_like(t, 2.0)),
        [0.0, 0.0, -80.0, 80.0], [1.0, 0.0, 1.0, 0.0]),
    "max_dim_ties": (
        lambda F, lib, x, t: x.reshape(2, 3).max(1).values.sum() + (x * t).sum(),
        [1.0, 3.0, 3.0, 2.0, 2.0, -1.0], [0.0] * 6),
    "min_dim_ties_keepdim": (
        lambda F, lib, x, t: (x.reshape(3, 2).min(0, keepdim=True).values * 2).sum(),
        [1.0, 0.5, 1.0, 0.5, 4.0, 0.5], [0.0] * 6),
    "hardswish_corners": (
        lambda F, lib, x, t: F.hardswish(x).sum(),
        [-3.0, 3.0, -2.999, 2.999, -4.0, 4.0], [0.0] * 6),
}


def _torch_grad(case):
    fn, xs, ts = CASES[case]
    x = torch.tensor(xs, requires_grad=True)
    fn(TF, torch, x, torch.tensor(ts)).backward()
    return x.grad.numpy()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_gradient_at_kinks_equals_torch(case, compiled):
    fn, xs, ts = CASES[case]

    def loss(x, t):
        return fn(KF, kiln, x, t)

    x = kiln.tensor(xs, requires_grad=True)
    if compiled:  # and really compiled: forward and backward, nothing on eager kernels
        explained = kiln.explain(loss)(x, kiln.tensor(ts))
        explained.result.backward()
        assert explained.graph_break_count == 0 and explained.fallbacks == [[]]
        assert explained.backward_parts == [1]
    else:
        loss(x, kiln.tensor(ts)).backward()
    got, want = x.grad.numpy(), _torch_grad(case)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)

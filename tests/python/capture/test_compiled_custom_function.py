"""Custom autograd.Functions inside compiled code (DANN's gradient reversal, a straight-through
estimator): `Fn.apply(...)` is one node that runs the Function eagerly (its forward uncaptured,
its backward recorded by autograd), between compiled parts, with no graph break."""

from __future__ import annotations

import numpy as np
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln


class GradReverse(kiln.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha  # a Python attribute on ctx: the capture never sees it
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g.neg() * ctx.alpha, None


class ScaleAndShift(kiln.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        return x * w, x + 1

    @staticmethod
    def backward(ctx, g_scaled, g_shifted):
        (w,) = ctx.saved_tensors
        return g_scaled * w + g_shifted, None


def test_gradient_reversal_trains_compiled_with_no_break():
    kiln.manual_seed(0)
    feat, head = kiln.nn.Linear(4, 4), kiln.nn.Linear(4, 2)

    def loss(x, alpha):
        return head(GradReverse.apply(feat(x).relu(), alpha)).pow(2).sum()

    x = kiln.randn(3, 4)
    loss(x, 0.5).backward()
    want = [p.grad.clone() for p in (*feat.parameters(), *head.parameters())]
    for p in (*feat.parameters(), *head.parameters()):
        p.grad = None
    explained = kiln.explain(loss)(x, 0.5)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    explained.result.backward()
    got = [p.grad for p in (*feat.parameters(), *head.parameters())]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-6, atol=1e-7)
    assert float(want[0].abs().sum()) > 0  # the reversed gradient reached the features


def test_a_function_with_two_outputs_and_saved_tensors():
    w = kiln.full((4,), 0.5)

    def fn(x):
        a, b = ScaleAndShift.apply(x * 2, w)
        return (a * b).sum()

    x1 = kiln.randn(4, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_(True)
    fn(x1).backward()
    explained = kiln.explain(fn)(x2)
    assert explained.graph_break_count == 0
    explained.result.backward()
    np.testing.assert_allclose(x2.grad.numpy(), x1.grad.numpy(), rtol=1e-6)

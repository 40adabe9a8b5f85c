"""Parameters' `.grad` in compiled code: read as graph inputs on every call (never baked),
written back when changed in place, and replayed when assigned, so a whole training step
(zero_grad, forward, backward, gradient clipping, the optimizer step) compiles into the graph
before backward and the graph after it, with results equal to eager."""

from __future__ import annotations

import numpy as np
import pytest
from corpus_util import compiler_of, fresh_capture  # noqa: F401 - autouse: empty caches

import kiln
import kiln.nn as nn
import kiln.nn.functional as F


def _net():
    kiln.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))


def _batches(n):
    rng = np.random.default_rng(1)
    return [(kiln.tensor(rng.standard_normal((5, 6)).astype(np.float32)),
             kiln.tensor(rng.integers(0, 3, 5))) for _ in range(n)]


# Thresholds well below the gradients' norms, so every step clips (the returned norms show it).
CLIPS = {
    "norm": lambda ps: nn.utils.clip_grad_norm_(ps, 0.01),
    "inf_norm": lambda ps: nn.utils.clip_grad_norm_(ps, 0.002, norm_type=float("inf")),
    "value": lambda ps: nn.utils.clip_grad_value_(ps, 0.001),
}


def _train(compiled: bool, set_to_none: bool, clip, steps=5):
    net = _net()
    opt = kiln.optim.AdamW(net.parameters(), lr=1e-2, weight_decay=0.1)

    def step(x, y):
        opt.zero_grad(set_to_none=set_to_none)
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        norm = clip(net.parameters())
        opt.step()
        return loss, norm

    run = kiln.compile(step) if compiled else step
    losses = []
    for x, y in _batches(steps):
        loss, norm = run(x, y)
        assert norm is None or norm.item() > 0.01  # it clipped
        losses.append(loss.item())
    explained = kiln.explain(step)(*_batches(1)[0]) if compiled else step(*_batches(1)[0])
    params = [p.detach().numpy().copy() for p in net.parameters()]
    return losses, params, explained


@pytest.mark.parametrize("set_to_none", [True, False], ids=["set_to_none", "zeroed"])
@pytest.mark.parametrize("clip", CLIPS, ids=list(CLIPS))
def test_a_whole_training_step_compiles_with_one_break_at_backward(set_to_none, clip):
    want_losses, want_params, _ = _train(False, set_to_none, CLIPS[clip])
    losses, params, explained = _train(True, set_to_none, CLIPS[clip])
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    for got, want in zip(params, want_params, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # zero_grad and the forward in one graph; clipping and the AdamW update in the other
    assert [r.reason for r in explained.break_reasons] == ["autograd is not captured"]
    assert explained.graph_count == 2 and explained.fallbacks == [[], []]


def test_grads_of_a_modules_parameters_are_read_on_every_call():
    """The parameters are baked into the entry; their gradients are fetched through it per call
    (a new tensor after every backward), so the second call sees the second backward's."""
    net = _net()

    def grad_norm_and_halve(m):
        total = 0.0
        for p in m.parameters():
            total = total + (p.grad * p.grad).sum()
            p.grad.mul_(0.5)
        return total

    compiled = kiln.compile(grad_norm_and_halve)
    records: list = []
    compiler_of(compiled).recorder = records
    for x, _ in _batches(2):
        net.zero_grad()
        net(x).pow(2).sum().backward()
        grads = [p.grad.clone() for p in net.parameters()]
        got = compiled(net)
        want = sum(float((g * g).sum()) for g in grads)
        np.testing.assert_allclose(got.item(), want, rtol=1e-5)
        for p, g in zip(net.parameters(), grads, strict=True):
            np.testing.assert_allclose(p.grad.numpy(), g.numpy() * 0.5, rtol=1e-6)
    assert len(records) == 1  # one capture serves both calls
    assert records[0].report.eager_nodes == 0  # the gradients' reads and writes compiled


def test_assigning_grad_is_replayed_and_later_reads_see_it():
    w = nn.Parameter(kiln.ones(3))
    w.grad = kiln.full((3,), 4.0)

    def rescale(w):
        w.grad = w.grad * 0.25
        out = w.grad + 1  # reads the assigned value
        w.grad = None if out.sum().item() < 0 else w.grad  # a data-dependent branch: a break
        return out

    def drop(w):
        w.grad = None
        return w * 2

    np.testing.assert_allclose(kiln.compile(rescale)(w).numpy(), np.full(3, 2.0))
    np.testing.assert_allclose(w.grad.numpy(), np.full(3, 1.0))
    explained = kiln.explain(drop)(w)
    assert w.grad is None and explained.graph_break_count == 0
    w.grad = kiln.ones(3)  # a tensor where the capture saw None: guarded, captured again
    kiln.compile(drop)(w)
    assert w.grad is None


MANUAL_UPDATES = {
    "isub": lambda p: p.__isub__(0.1 * p.grad),
    "data_add_": lambda p: p.data.add_(p.grad, alpha=-0.1),
    "copy_": lambda p: p.copy_(p - 0.1 * p.grad),
    "data_assign": lambda p: setattr(p, "data", p.data - 0.1 * p.grad.data),
}


@pytest.mark.parametrize("update", MANUAL_UPDATES, ids=list(MANUAL_UPDATES))
def test_manual_sgd_updates_compile_and_write_the_parameters_back(update):
    """Hand-written SGD (`p -= lr * p.grad` under no_grad, `p.data.add_`, `p.data = ...`)
    followed by clearing the gradient, compiled with no break and no eager node."""

    def train(compiled):
        net = _net()

        def sgd():
            with kiln.no_grad():
                for p in net.parameters():
                    MANUAL_UPDATES[update](p)
                    p.grad.zero_()

        run = kiln.compile(sgd) if compiled else sgd
        for x, _ in _batches(3):
            net(x).pow(2).sum().backward()
            run()
        net(x).pow(2).sum().backward()
        explained = kiln.explain(sgd)() if compiled else sgd()
        return [p.detach().numpy().copy() for p in net.parameters()], explained

    want, _ = train(False)
    got, explained = train(True)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert explained.graph_break_count == 0 and explained.fallbacks == [[]]


def test_grad_of_a_computed_tensor_still_breaks_with_the_reason():
    x = kiln.randn(3, requires_grad=True)

    def f(x):
        y = x * 2
        return y.grad

    explained = kiln.explain(f)(x)
    assert any("computed in the graph" in r.reason for r in explained.break_reasons)

"""Two forms real model code uses inside compiled functions: ``f(..., out=t)`` (spectral norm's
power iteration writes ``normalize(W @ v, out=u)``) is the call's value copied into ``t``, and
an existing callable object (a loss or transform class that is not a Module) has its class's
``__call__`` inlined, guarded on what it reads of the object."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln
import kiln.nn as nn
import kiln.nn.functional as F


def test_out_argument_writes_the_value_into_the_given_tensor():
    acc = kiln.zeros(4)

    def f(x):
        y = kiln.add(x, 1.0, out=acc)
        return F.normalize(y, dim=0, out=y) * 2

    x = kiln.randn(4)
    explained = kiln.explain(f)(x)
    assert explained.graph_break_count == 0 and explained.fallbacks == [[]]
    want_acc = F.normalize(x + 1.0, dim=0)
    got = kiln.compile(f)(x)
    assert kiln.allclose(acc, want_acc, atol=1e-6)  # written through out= into the global
    assert kiln.allclose(got, want_acc * 2, atol=1e-6)


def test_out_of_another_shape_raises_eagers_error():
    """Not captured (the graph breaks there), so the call runs eagerly and raises as eager."""
    out = kiln.zeros(3)

    def f(x):
        return kiln.add(x, 1.0, out=out)

    for fn in (f, kiln.compile(f)):
        with pytest.raises(RuntimeError, match="out= tensor has shape"):
            fn(kiln.randn(4))


def _train_spectral_norm(normed, buffers, compiled: bool):
    """Three SGD steps of a spectrally normalized Linear(6, 5) (`normed` wraps it), eager or
    compiled: (losses, clones of `buffers(layer)`, the layer and its input)."""
    kiln.manual_seed(0)
    lin = normed(nn.Linear(6, 5))
    opt = kiln.optim.SGD(lin.parameters(), lr=0.1)
    run = kiln.compile(lin) if compiled else lin
    x = kiln.randn(3, 6)
    losses = []
    for _ in range(3):
        loss = run(x).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [b.clone() for b in buffers(lin)], lin, x


def test_spectral_norm_parametrization_trains_compiled_as_eager():
    """The power iteration updates the u and v buffers in place (out=) under no_grad every
    training forward: compiled, with no graph break, the buffers and losses equal eager's."""
    normed = nn.utils.parametrizations.spectral_norm

    def buffers(lin):
        return [lin.parametrizations.weight[0]._u]

    want, (u_want,), _, _ = _train_spectral_norm(normed, buffers, compiled=False)
    got, (u_got,), lin, x = _train_spectral_norm(normed, buffers, compiled=True)
    explained = kiln.explain(lin)(x)
    assert explained.graph_break_count == 0 and all(f == [] for f in explained.fallbacks)
    assert got == pytest.approx(want, rel=1e-5)
    assert kiln.allclose(u_got, u_want, atol=1e-6)


class _Focal:
    """A focal loss written as a plain callable class, as training scripts often do."""

    def __init__(self, gamma):
        self.gamma = gamma

    def __call__(self, logits, target):
        p = logits.softmax(-1).gather(1, target[:, None]).squeeze(1)
        return (-((1 - p) ** self.gamma) * p.log()).mean()


CRITERION = _Focal(2.0)


def test_a_callable_object_is_inlined_and_guarded_on_its_attributes():
    def loss(x, t):
        return CRITERION(x, t)

    x, t = kiln.randn(5, 4), kiln.randint(0, 4, (5,))
    explained = kiln.explain(loss)(x, t)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    assert explained.fallbacks == [[]]
    compiled = kiln.compile(loss)
    try:
        assert kiln.allclose(compiled(x, t), loss(x, t))
        CRITERION.gamma = 1.0  # an attribute the inlined __call__ read: a guard fails, recompiles
        assert kiln.allclose(compiled(x, t), loss(x, t))
    finally:
        CRITERION.gamma = 2.0


class _Scale:
    def __init__(self, k):
        self.k = k

    def __call__(self, module, inputs):
        return (inputs[0] * self.k,)


def test_a_hook_object_is_inlined_and_a_change_to_it_recompiles():
    """A forward pre-hook that is an object (not a function) is captured with no graph break;
    the entry holds it, so an attribute it read changing recompiles instead of giving stale
    numbers."""
    lin = nn.Linear(4, 4)
    hook = _Scale(2.0)
    lin.register_forward_pre_hook(hook)
    x = kiln.randn(2, 4)
    explained = kiln.explain(lin)(x)
    assert explained.graph_break_count == 0 and all(f == [] for f in explained.fallbacks)
    compiled = kiln.compile(lin)
    assert kiln.allclose(compiled(x), lin(x))
    hook.k = 3.0
    assert kiln.allclose(compiled(x), lin(x))


def test_spectral_norm_hook_trains_compiled_as_eager():
    """nn.utils.spectral_norm's forward pre-hook object (its power iteration updates weight_u
    and weight_v with out=): one graph, and the buffers and losses equal eager's."""

    def buffers(lin):
        return [lin.weight_u, lin.weight_v]

    want, (u, v), _, _ = _train_spectral_norm(nn.utils.spectral_norm, buffers, compiled=False)
    got, (u2, v2), lin, x = _train_spectral_norm(nn.utils.spectral_norm, buffers, compiled=True)
    assert kiln.explain(lin)(x).graph_break_count == 0
    assert got == pytest.approx(want, rel=1e-5)
    assert kiln.allclose(u2, u, atol=1e-6) and kiln.allclose(v2, v, atol=1e-6)

"""kiln.explain reports, per graph, the compiled parts and every node that ran on an eager
kernel because the compiler declined it, with the reason."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln


@kiln.compiler.allow_in_graph
def opaque(x):  # a node the compiler cannot look into
    return x.erfc()


def test_fallbacks_name_the_node_and_the_reason():
    def f(x):
        return opaque(x).sin() + x

    out = kiln.explain(f)(kiln.randn(4))
    ((fallback,),) = out.fallbacks  # one graph, one declined node
    name, target, reason = fallback
    assert target == f"{__name__}.opaque" and "no op for this call" in reason
    text = str(out)
    assert "Compiled Parts:" in text and "1 compiled parts, 2 compiled nodes, 1 eager nodes" in text
    assert f"fallback t0 ({__name__}.opaque)" in text


def test_a_fully_compiled_graph_has_no_fallbacks():
    out = kiln.explain(lambda x: (x.sin() * 2 + x.cos()).relu().sum(-1))(kiln.randn(3, 5))
    assert out.fallbacks == [[]]
    assert "1 compiled parts, 6 compiled nodes, 0 eager nodes" in str(out)


def test_other_backends_are_named_as_such():
    out = kiln.explain(kiln.compile(lambda x: x + 1, backend="eager"))(kiln.randn(3))
    assert "not compiled by kiln's backend" in str(out)


def test_allow_in_graph_records_one_node_that_runs_the_function_uncaptured():
    calls = []

    @kiln.compiler.allow_in_graph
    def custom(x, scale=1.0):
        calls.append(1)
        return (x * scale).erfc()

    def f(x):
        return custom(x, scale=2.0).sin() + custom(x)

    x = kiln.randn(5)
    out = kiln.explain(f)(x)
    assert out.graph_count == 1 and out.graph_break_count == 0
    targets = [target for _, target, _ in out.fallbacks[0]]
    assert len(targets) == 2 and all(t.endswith("<locals>.custom") for t in targets)
    compiled = kiln.compile(f)
    compiled(x)  # the capture runs each call once on its examples
    calls.clear()
    got = compiled(x)
    want = (x * 2.0).erfc().sin() + x.erfc()
    assert (got - want).abs().max().item() < 1e-6
    assert len(calls) == 2  # run by the nodes, each once, not traced into


def test_allow_in_graph_rejects_what_is_not_callable():
    with pytest.raises(TypeError, match="expects a function"):
        kiln.compiler.allow_in_graph(3)


def test_a_whole_training_step_breaks_only_at_backward_with_a_reason_that_says_what_to_do():
    model = kiln.nn.Linear(4, 2)
    opt = kiln.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step(x, y):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    x, y = kiln.randn(8, 4), kiln.randn(8, 2)
    before = model.weight.detach().clone()
    out = kiln.explain(train_step)(x, y)
    assert not kiln.equal(model.weight.detach(), before)  # the step ran
    reasons = [(br.reason, br.hint) for br in out.break_reasons]
    assert len(reasons) == 1  # zero_grad's .grad stores are replayed by the first graph
    assert "call backward() outside the compiled function" in reasons[0][1]
    assert out.graph_count == 2  # zero_grad, the forward and loss, then the step

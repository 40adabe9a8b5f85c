"""kiln.explain reports, per graph, the compiled parts and every node that ran on an eager
kernel because the compiler declined it, with the reason."""

from __future__ import annotations

from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test

import kiln


def test_fallbacks_name_the_node_and_the_reason():
    def f(x):
        return x.erfc().sin() + x

    out = kiln.explain(f)(kiln.randn(4))
    ((fallback,),) = out.fallbacks  # one graph, one declined node
    name, target, reason = fallback
    assert target == "kiln.Tensor.erfc" and "no op for this call" in reason
    text = str(out)
    assert "Compiled Parts:" in text and "1 compiled parts, 2 compiled nodes, 1 eager nodes" in text
    assert "fallback t0 (kiln.Tensor.erfc)" in text


def test_a_fully_compiled_graph_has_no_fallbacks():
    out = kiln.explain(lambda x: (x.sin() * 2 + x.cos()).relu().sum(-1))(kiln.randn(3, 5))
    assert out.fallbacks == [[]]
    assert "1 compiled parts, 6 compiled nodes, 0 eager nodes" in str(out)


def test_other_backends_are_named_as_such():
    out = kiln.explain(kiln.compile(lambda x: x + 1, backend="eager"))(kiln.randn(3))
    assert "not compiled by kiln's backend" in str(out)

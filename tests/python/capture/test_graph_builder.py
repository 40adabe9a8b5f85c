"""kiln._C._ir.GraphBuilder: graphs built in memory, each node checked against the op table and
typed by its shape rule as it is added; the capture builds every graph it compiles this way and
never writes or parses .kir text."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import kiln
from kiln._capture.graph import Graph
from kiln._capture.graph_build import GraphWriter

ir = kiln._C._ir
FRONTEND = Path(kiln.__file__).resolve().parent


def test_add_returns_the_result_type_at_once():
    b = ir.GraphBuilder("f")
    (x, xt) = b.input("x", ("f32", ["s0", 8], None, None))
    (w, _) = b.input("w", ("f32", [16, 8], None, None))
    assert xt == ("f32", ("s0", 8), (8, 1), None, True)
    [(y, yt)] = b.add("linear", [x, w])
    assert yt[:2] == ("f32", ("s0", 16))
    [(t, tt)] = b.add("transpose", [y], {"dim0": 0, "dim1": 1})
    assert tt == ("f32", (16, "s0"), (1, 16), None, False)  # a view keeps eager's strides
    [(n, nt)] = b.add("constant", [], {"value": 2}, types=["int"])
    assert nt == "int"
    [(m, mt)] = b.add("mul", [y, n])
    assert mt[0] == "f32"  # a Python int is weak
    [(r, rt)] = b.add("reshape", [m], {"shape": ["s0*16"]})
    assert rt[1] == ("s0*16",)
    g = b.finish([r, t])
    assert g.name == "f"
    text = g.text()
    assert text.startswith("graph @f(%x: f32[s0, 8], %w: f32[16, 8]) {\n")
    assert "reshape(%3) {shape = [s0*16]} : f32[s0*16]" in text
    assert ir.parse_and_print(text) == text


@pytest.mark.parametrize("op, operands, attrs, message", [
    ("add", [0, 1], {}, "add: operand shapes do not broadcast: 4 vs 3"),
    ("exp", [0, 1], {}, "exp: expects 1 operand, got 2"),
    ("sum", [0], {"axis": 0}, "sum: unknown attribute 'axis'"),
    ("sym_size", [0], {}, "sym_size: missing required attribute 'dim'"),
    ("sum", [0], {"dim": "x"}, "sum: attribute 'dim'"),
    ("frobnicate", [0], {}, "unknown op 'frobnicate'"),
    ("call", [0], {"target": "f"}, "call: give the result types"),
])  # fmt: skip
def test_a_node_the_table_rejects_is_not_added(op, operands, attrs, message):
    b = ir.GraphBuilder("f")
    b.input("x", ("f32", [4], None, None))
    b.input("y", ("f32", [3], None, None))
    with pytest.raises((ValueError, TypeError), match=re.escape(message)):
        b.add(op, operands, attrs)
    assert b.mark() == 2


def test_rollback_forgets_the_nodes_and_their_handles():
    b = ir.GraphBuilder("f")
    (x, _) = b.input("x", ("f32", [4], None, None))
    [(e, _)] = b.add("exp", [x])
    mark = b.mark()
    [(s, _)] = b.add("sin", [e])
    b.rollback(mark)
    with pytest.raises(IndexError, match="no value"):
        b.add("cos", [s])
    [(c, _)] = b.add("cos", [e])
    assert "sin" not in b.finish([c]).text()


def test_a_parsed_program_compiles_and_declines_by_line():
    g = ir.parse("graph @g(%x: f32[4]) {\n  %0 = exp(%x) : f32[4]\n"
                 "  %1 = call(%0) {target = \"lib.op\"} : f32[4]\n  return %1\n}\n", "g.kir")
    ok, line, reason = kiln._C._compiler.can_lower(g, "g.kir")
    assert (ok, line) == (False, 3) and "cannot lower" in reason


def test_a_lowering_whose_rule_disagrees_with_eager_declines():
    """The writer checks each rule type against the example eager computed: a lowering that
    would change dtype or shape runs eagerly instead of giving other numbers."""
    g = Graph("f")
    x = g.placeholder("x", kiln.ones(2, 3))
    wrong = kiln.ones(3, 2, dtype=kiln.float64)  # not what exp(x) is
    y = g.call(kiln.exp, (x,), {}, wrong)
    g.output([y])
    w = GraphWriter(g)
    built = w.write()
    assert "call(" in built.text() and "exp" not in built.text().split("call(")[0]
    assert "typed f32[2, 3] by its rule, but eager gave f64[3, 2]" in y.meta["decline"]


def test_the_frontend_writes_and_parses_no_kir_text():
    """Graphs reach the compiler built in memory: no Python module prints a graph header or
    a node line, and none calls the text parsers except the exported-program loader."""
    writers = []
    for path in FRONTEND.rglob("*.py"):
        source = path.read_text()
        if re.search(r"""f?["']graph @""", source) or re.search(r"""["'] : ["']""", source):
            writers.append(path.name)
    assert writers == []
    parsers = sorted(p.relative_to(FRONTEND).as_posix() for p in FRONTEND.rglob("*.py")
                     if re.search(r"_ir\.(parse|verify|infer_shapes|parse_and_print)\(",
                                  p.read_text()))  # fmt: skip
    assert parsers == ["_export/load.py", "_export/program.py"]

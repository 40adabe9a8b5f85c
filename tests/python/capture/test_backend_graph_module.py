"""A callable backend gets what torch's `backend(gm, example_inputs) -> callable` gets: a graph
that is itself callable (running it gives the graph's outputs on the eager kernels), with
`.forward`, `.code` (the forward's Python source) and `print_readable()`; returning the graph
unchanged (`lambda gm, example_inputs: gm`) is a valid backend.
"""

from corpus_util import assert_same, compiler_of, fresh_capture  # noqa: F401

import kiln
from kiln._capture.graph import Graph

C = kiln._C._capture


def rand(*shape, seed=0):
    kiln.manual_seed(seed)
    return kiln.randn(*shape)


def simple(x, y):
    return (x + y).relu() * 2


@kiln.compiler.disable
def kept_eager(t):
    return t


def with_break(x):
    a = x.sin()
    b = kept_eager(a)  # one graph break
    return b * 3


def test_identity_backend_runs_the_graph():
    compiled = kiln.compile(simple, backend=lambda gm, example_inputs: gm)
    x, y = rand(2, 3), rand(2, 3, seed=1)
    for _ in range(2):
        assert_same(compiled(x, y), simple(x, y))
    assert len(C.entries(simple.__code__)) == 1


def test_identity_backend_across_a_graph_break():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    compiled = kiln.compile(with_break, backend=backend)
    records = []
    compiler_of(compiled).recorder = records
    x = rand(4)
    assert_same(compiled(x), with_break(x))
    assert len(graphs) == 2 and [r.break_record is not None for r in records] == [True, False]


def test_backend_reads_code_and_returns_forward():
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm.code)
        result = gm(*example_inputs)  # runs eagerly: the graph's outputs
        assert isinstance(result, tuple) and len(result) == 1
        assert_same(result[0], simple(*example_inputs))
        assert gm.forward is gm.forward  # generated once
        return gm.forward

    compiled = kiln.compile(simple, backend=backend)
    x, y = rand(3), rand(3, seed=1)
    assert_same(compiled(x, y), simple(x, y))
    assert_same(compiled(x, y), simple(x, y))
    assert len(seen) == 1
    code = seen[0]
    assert code.startswith("def forward(L_x, L_y):") and "relu" in code and "return" in code


def test_print_readable_prints_and_returns_the_source(capsys):
    printed = []

    def backend(gm, example_inputs):
        printed.append(gm.print_readable())
        assert gm.print_readable(print_output=False) == printed[0]
        assert gm.graph is gm and gm.graph.op_count() == 3  # gm.graph.nodes, as in torch
        return gm

    compiled = kiln.compile(simple, backend=backend)
    x, y = rand(3), rand(3, seed=1)
    assert_same(compiled(x, y), simple(x, y))
    assert len(printed) == 1 and "def forward" in printed[0]
    assert capsys.readouterr().out == printed[0] + "\n"  # printed once, by the first call


def test_forward_is_regenerated_after_the_graph_changes():
    g = Graph("g")
    x = g.placeholder("x", rand(3))
    used = g.call(kiln.Tensor.relu, (x,), {}, rand(3).relu())
    unused = g.call(kiln.Tensor.sin, (x,), {}, rand(3).sin())
    g.output([used])
    first = g.forward
    assert "sin" in g.code and first is g.forward
    g.erase_unused()
    assert unused not in g.nodes and "sin" not in g.code
    assert g.forward is not first and "sin" not in g.forward.__kiln_source__
    assert_same(g(rand(3))[0], rand(3).relu())

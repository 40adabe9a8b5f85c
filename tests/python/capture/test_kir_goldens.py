"""Golden `.kir` dumps of representative captures, and printer/parser round-trips.

Each case captures a small program with kiln.compile and compares `graph.to_kir()` with
`golden/<case>.kir`. Goldens are stored without `loc(...)` attributes: they pin the graph, not
line numbers of this file or of kiln's own modules (the full text, locations included, is
checked to round-trip and verify). Regenerate with `KILN_UPDATE_GOLDENS=1` and review the diff:
every golden must stay sane (shapes, dtypes, attributes, symbolic sizes).

Every captured graph (the goldens' and those of the other programs here) must print back
unchanged through `kiln._C._ir.parse_and_print` and pass `kiln._C._ir.verify`; the graphs also
run (compile_python) to eager's results.
"""

import math
import os
import pathlib
import re

import pytest
from corpus_util import RecordingBackend, assert_same, clone_args, fresh_capture  # noqa: F401

import kiln
import kiln.nn as nn
import kiln.nn.functional as F

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"
UPDATE = os.environ.get("KILN_UPDATE_GOLDENS") == "1"
_LOC = re.compile(r' loc\("(?:[^"\\]|\\.)*":\d+\)$', re.MULTILINE)


def strip_locations(text: str) -> str:
    """The .kir text without `loc("file":line)` attributes."""
    return _LOC.sub("", text)


class MLP(nn.Module):
    """Linear, GELU, Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Attention(nn.Module):
    """Pre-norm multi-head self-attention with a residual connection."""

    def __init__(self, d=16, heads=2) -> None:
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return x + self.proj(y)


def softmax(x):
    m = x.amax(dim=-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(dim=-1, keepdim=True)


def dropout_train(x):
    return F.dropout(x, p=0.25, training=True) + 1


def normal_draw(x):
    return kiln.normal(x.abs() + 0.1, 0.5) + 1


def before_break(x, w):
    h = (x @ w).tanh()
    if h.mean() > 0:
        return h * 2
    return h


def seeded(make):
    """`make()` with kiln's generator seeded first (module parameters are random)."""
    kiln.manual_seed(0)
    return make()


def rand(*shape, seed=0):
    """A reproducible float32 tensor."""
    kiln.manual_seed(seed)
    return kiln.randn(*shape)


def capture(fn, calls, **compile_kw):
    """Compiles `fn`, calls it with each argument tuple in `calls` (checking eager's results
    where the program is deterministic) and returns the backend's graphs."""
    backend = RecordingBackend()
    compiled = kiln.compile(fn, backend=backend, **compile_kw)
    for args in calls:
        result = compiled(*clone_args(args))
        if fn not in (dropout_train, normal_draw):  # random
            assert_same(result, fn(*clone_args(args)))
    return backend.graphs


# name -> (program, argument tuples of the calls, compile options, index of the golden graph)
CASES = {
    "mlp": (lambda: seeded(MLP), [(rand(2, 8),)], {}, 0),
    "attention": (lambda: seeded(Attention), [(rand(2, 5, 16),)], {}, 0),
    "softmax": (lambda: softmax, [(rand(3, 7),)], {}, 0),
    # The second batch size makes dim 0 symbolic: the golden is the second capture.
    "mlp_dynamic_batch": (lambda: seeded(MLP), [(rand(2, 8),), (rand(3, 8),)], {}, 1),
    "call_fallback": (lambda: normal_draw, [(rand(4),)], {}, 0),
    "dropout_train": (lambda: dropout_train, [(rand(4),)], {}, 0),
    "before_break": (lambda: before_break, [(rand(4, 3), rand(3, 2, seed=1))], {}, 0),
}


def golden_text(name: str) -> str:
    fn, calls, kw, index = CASES[name]
    graphs = capture(fn(), calls, **kw)
    return graphs[index].to_kir()


def check_round_trip(text: str, label: str) -> None:
    assert kiln._C._ir.parse_and_print(text, label) == text
    kiln._C._ir.verify(text, label)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_round_trips_and_verifies(name):
    text = golden_text(name)
    check_round_trip(text, f"{name}.kir")
    check_round_trip(strip_locations(text), f"{name}.kir")
    path = GOLDEN_DIR / f"{name}.kir"
    check_round_trip(path.read_text(), str(path))


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_matches(name):
    text = strip_locations(golden_text(name))
    path = GOLDEN_DIR / f"{name}.kir"
    if UPDATE:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs; KILN_UPDATE_GOLDENS=1 regenerates it"


def test_goldens_are_sane():
    """Properties a reviewer checks in the goldens, asserted so a regeneration keeps them."""
    texts = {p.stem: p.read_text() for p in GOLDEN_DIR.glob("*.kir")}
    assert sorted(texts) == sorted(CASES)
    mlp = texts["mlp"]
    assert mlp.startswith("graph @forward_0(%L_x: f32[2, 8], %self_fc1_weight: f32[16, 8], "
                          "%self_fc1_bias: f32[16], %self_fc2_weight: f32[4, 16], "
                          "%self_fc2_bias: f32[4]) {")
    assert [line.split(" = ")[1].split("(")[0] for line in mlp.splitlines()[1:4]] == [
        "linear", "gelu", "linear"]
    attention = texts["attention"]
    assert attention.count("slice(%1) {dim = 2, end = ") == 3  # the qkv split
    assert "softmax(%14) {dim = -1} : f32[2, 2, 5, 5]" in attention
    assert attention.count("matmul(") == 2 and attention.count("linear(") == 2
    assert "f32[s0, 8]" in texts["mlp_dynamic_batch"]
    assert ": f32[s0, 16]" in texts["mlp_dynamic_batch"]  # results follow the symbol (shape-infer)
    assert 'target = "kiln.normal"' in texts["call_fallback"]
    assert "philox_state() {count = 4} : i64[2]" in texts["dropout_train"]
    assert "dropout(%L_x, %0) {p = 0.25} : f32[4]" in texts["dropout_train"]
    assert texts["before_break"].rstrip().endswith(
        "return %4, %L_x, %L_w, %1\n}")  # the branch condition and the state the break needs
    assert "gt(%2, %3) : b8[]" in texts["before_break"]
    for name, text in texts.items():
        assert "loc(" not in text, name
        assert "0x" not in text, name  # no addresses in names


def test_golden_graphs_run_like_eager():
    for name in ("mlp", "attention", "softmax"):
        fn, calls, _, _ = CASES[name]
        program = fn()
        backend = RecordingBackend()
        compiled = kiln.compile(program, backend=backend)
        (args,) = calls
        assert_same(compiled(*args), program(*args))
        kiln.compiler.reset()


def branchy(x):
    y = x.relu()
    if y.sum() > 1:
        y = y * 3
    print("", end="")
    return y.softmax(-1), x.shape[0]


def shapes(x):
    n = x.shape[0]
    return x.view(n, -1).sum(1) + kiln.arange(n), x[: n // 2].mean()


def mixed(x, flags):
    out = x.float() if flags["cast"] else x
    return (out.clamp(min=0.0).sqrt(), out.max(dim=-1), kiln.where(out > 1, out, -out),
            out.to(kiln.float16).double())


@pytest.mark.parametrize("fn,calls,kw", [
    (branchy, [(rand(3, 4),), (-rand(3, 4).abs(),)], {}),
    (shapes, [(rand(4, 3),), (rand(6, 3),), (rand(7, 3),)], {}),
    (shapes, [(rand(4, 3),)], {"dynamic": True}),
    (mixed, [(rand(2, 5), {"cast": True}), (rand(2, 5), {"cast": False})], {}),
], ids=["branches", "auto-dynamic", "dynamic", "mixed-ops"])
def test_every_captured_graph_round_trips(fn, calls, kw):
    graphs = capture(fn, calls, **kw)
    assert graphs
    for i, graph in enumerate(graphs):
        check_round_trip(graph.to_kir(), f"{fn.__name__}_{i}.kir")


def test_dynamic_results_follow_the_input_symbols():
    """to_kir runs shape-infer: op results carry the input's symbol (kiln.arange of the dynamic
    size too), and the floordiv of the size is a floor_divide of Python ints."""
    graphs = capture(shapes, [(rand(4, 3),), (rand(6, 3),)])
    text = strip_locations(graphs[1].to_kir())
    assert text.startswith("graph @shapes_1(%L_x: f32[s0, 3]) {")
    assert "= view(%L_x) {shape = [s0, -1]} : f32[s0, 3]\n" in text
    assert "= sum(%1) {dim = [1]} : f32[s0]\n" in text
    assert "= arange() {end = s0} : i64[s0]\n" in text
    assert "= floor_divide(%0, %5) : int\n" in text
    assert "%4 = add(%2, %3) : f32[s0]\n" in text  # s0 with 6: the left size stays


def test_infer_shapes_reports_the_node_and_source_line():
    text = (
        "graph @g(%x: f32[s0, 4], %y: f32[s0, 4]) {\n"
        '  %0 = slice(%x) {start = 1} : f32[5, 4] loc("m.py":3)\n'
        '  %1 = add(%0, %y) : f32[5, 4] loc("m.py":4)\n'
        "  return %1\n"
        "}\n"
    )
    kiln._C._ir.verify(text)  # the example sizes hide the clash from the verifier
    with pytest.raises(ValueError, match=re.escape(
            "g.kir:3:3: error: %1 = add: operand shapes do not broadcast: s0 - 1 vs s0 in dim -2 "
            "(from m.py:4)")):  # fmt: skip
        kiln._C._ir.infer_shapes(text, "g.kir")
    fixed = kiln._C._ir.infer_shapes(text.replace("start = 1", "start = 0"), "g.kir")
    assert '%0 = slice(%x) {start = 0} : f32[s0, 4] loc("m.py":3)\n' in fixed
    assert '%1 = add(%0, %y) : f32[s0, 4] loc("m.py":4)\n' in fixed

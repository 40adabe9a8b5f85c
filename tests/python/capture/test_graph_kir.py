"""Graph.to_kir(): golden .kir text of captured graphs, and every text round-trips through the C++
parser/printer unchanged and passes the verifier (kiln._C._ir)."""

import operator
import sys
from pathlib import Path

import pytest

import kiln
import kiln.nn.functional as F
from kiln._capture.graph import Graph, sym_size

sys.path.insert(0, str(Path(__file__).parent))
from test_graph import fresh, rec  # noqa: E402

ir = kiln._C._ir


def check(g: Graph) -> str:
    """The graph's .kir text, after checking it prints back unchanged and verifies."""
    text = g.to_kir()
    assert ir.parse_and_print(text) == text
    ir.verify(text)
    return text


def body(g: Graph) -> list[str]:
    """The statement lines of the graph's .kir text (no header, no closing brace)."""
    return [line.strip() for line in check(g).splitlines()[1:-1]]


# --- golden graphs -------------------------------------------------------------------------------


def elementwise_chain():
    g = Graph("elementwise")
    x, y = g.placeholder("x", fresh(2, 3)), g.placeholder("y", fresh(3, seed=1))
    t = rec(g, kiln.add, x, y)
    t = rec(g, kiln.Tensor.add, t, y)
    t = rec(g, operator.add, t, y)
    t = rec(g, kiln.exp, rec(g, kiln.Tensor.relu, t))
    t = rec(g, operator.neg, rec(g, kiln.Tensor.sigmoid, t))
    t = rec(g, kiln.Tensor.__mul__, rec(g, kiln.tanh, t), t)
    g.output([t])
    return g


def test_elementwise_chain_golden():
    assert check(elementwise_chain()) == (
        "graph @elementwise(%x: f32[2, 3], %y: f32[3]) {\n"
        "  %0 = add(%x, %y) : f32[2, 3]\n"
        "  %1 = add(%0, %y) : f32[2, 3]\n"
        "  %2 = add(%1, %y) : f32[2, 3]\n"
        "  %3 = relu(%2) : f32[2, 3]\n"
        "  %4 = exp(%3) : f32[2, 3]\n"
        "  %5 = sigmoid(%4) : f32[2, 3]\n"
        "  %6 = neg(%5) : f32[2, 3]\n"
        "  %7 = tanh(%6) : f32[2, 3]\n"
        "  %8 = mul(%7, %6) : f32[2, 3]\n"
        "  return %8\n"
        "}\n"
    )


def linear_gelu():
    g = Graph("mlp")
    x = g.placeholder("x", fresh(8, 16), sym_sizes=["s0", 16])
    w = g.placeholder("self.fc1.weight", fresh(32, 16))
    b = g.placeholder("self.fc1.bias", fresh(32))
    h = rec(g, F.linear, x, w, b, loc=("/home/u/model.py", 10))
    h.meta["sym_sizes"] = ["s0", 32]
    a = rec(g, F.gelu, h, approximate="tanh", loc=("/home/u/model.py", 11))
    a.meta["sym_sizes"] = ["s0", 32]
    g.output([a])
    return g


def test_linear_gelu_golden():
    assert check(linear_gelu()) == (
        "graph @mlp(%x: f32[s0, 16], %self_fc1_weight: f32[32, 16], %self_fc1_bias: f32[32]) {\n"
        '  %0 = linear(%x, %self_fc1_weight, %self_fc1_bias) : f32[s0, 32] loc("model.py":10)\n'
        '  %1 = gelu(%0) {approximate = "tanh"} : f32[s0, 32] loc("model.py":11)\n'
        "  return %1\n"
        "}\n"
    )


def softmax_graph():
    g = Graph("attn_probs")
    s = g.placeholder("scores", fresh(2, 4, 4))
    p1 = rec(g, F.softmax, s, dim=-1)
    p2 = rec(g, kiln.Tensor.softmax, s, -1)
    p3 = rec(g, kiln.log_softmax, s, 1, kiln.float64)
    m = rec(g, kiln.amax, s, -1, True)
    e = rec(g, kiln.exp, rec(g, operator.sub, s, m))
    p4 = rec(g, operator.truediv, e, rec(g, kiln.Tensor.sum, e, -1, keepdim=True))
    g.output([p1, p2, p3, p4])
    return g


def test_softmax_golden():
    assert body(softmax_graph()) == [
        "%0 = softmax(%scores) {dim = -1} : f32[2, 4, 4]",
        "%1 = softmax(%scores) {dim = -1} : f32[2, 4, 4]",
        "%2 = log_softmax(%scores) {dim = 1, dtype = f64} : f64[2, 4, 4]",
        "%3 = amax(%scores) {dim = [-1], keepdim = true} : f32[2, 4, 1]",
        "%4 = sub(%scores, %3) : f32[2, 4, 4]",
        "%5 = exp(%4) : f32[2, 4, 4]",
        "%6 = sum(%5) {dim = [-1], keepdim = true} : f32[2, 4, 1]",
        "%7 = div(%5, %6) : f32[2, 4, 4]",
        "return %0, %1, %2, %7",
    ]


def dynamic_views():
    g = Graph("views")
    x = g.placeholder("x", fresh(6, 8), sym_sizes=["s0", 8])
    k = g.placeholder("k", 3, sym_sizes=["s1"])
    n = g.call(sym_size, (x, 0), {}, 6)
    half = rec(g, operator.floordiv, n, 2)
    v = rec(g, kiln.Tensor.view, x, n, 2, 4)
    v.meta["sym_sizes"] = ["s0", 2, 4]
    t = rec(g, kiln.Tensor.transpose, v, -1, 0)
    t.meta["sym_sizes"] = [4, 2, "s0"]
    r = rec(g, kiln.reshape, x, (rec(g, operator.mul, n, 2), -1))
    r.meta["sym_sizes"] = ["s0*2", 4]
    s = rec(g, operator.getitem, x, (slice(1, half), 0))
    e = rec(g, kiln.Tensor.expand, rec(g, kiln.Tensor.unsqueeze, x, 0), 3, n, 8)
    nar = rec(g, kiln.narrow, x, 1, k, rec(g, operator.add, k, 1))
    g.output([t, r, s, e, half, nar])
    return g


def test_dynamic_views_golden():
    assert check(dynamic_views()) == (
        "graph @views(%x: f32[s0, 8], %k: int) {\n"
        "  %0 = sym_size(%x) {dim = 0} : int\n"
        "  %1 = constant() {value = 2} : int\n"
        "  %2 = floor_divide(%0, %1) : int\n"
        "  %3 = view(%x) {shape = [s0, 2, 4]} : f32[s0, 2, 4]\n"
        "  %4 = transpose(%3) {dim0 = -1, dim1 = 0} : f32[4, 2, s0] strided [1, 4, 8]\n"
        "  %5 = mul(%0, %1) : int\n"
        "  %6 = reshape(%x) {shape = [s0*2, -1]} : f32[s0*2, 4]\n"
        "  %7 = slice(%x) {end = s0 floordiv 2, start = 1} : f32[s0 floordiv 2 - 1, 8]\n"
        "  %8 = select(%7) {dim = 1, index = 0} : f32[s0 floordiv 2 - 1] strided [8]\n"
        "  %9 = unsqueeze(%x) {dim = 0} : f32[1, s0, 8]\n"
        "  %10 = expand(%9) {size = [3, s0, 8]} : f32[3, s0, 8] strided [0, 8, 1]\n"
        "  %11 = constant() {value = 1} : int\n"
        "  %12 = add(%k, %11) : int\n"
        "  %13 = slice(%x) {dim = 1, end = s1*2 + 1, start = s1} : f32[s0, s1 + 1] strided [8, 1]\n"
        "  return %4, %6, %8, %10, %2, %13\n"
        "}\n"
    )


def fallback_calls():
    g = Graph("fallback")
    x = g.placeholder("x", fresh(4, 5))
    d = rec(g, kiln.diag_embed, x, 1)  # recorded whole: no graph op
    top = rec(g, kiln.frexp, x)  # two results, no graph op
    vals, idx = rec(g, operator.getitem, top, 0), rec(g, operator.getitem, top, 1)
    c = rec(g, kiln.Tensor.contiguous, rec(g, kiln.Tensor.t, x))
    g.call(print, ("vals:", vals, {"sep": "\n"}), {}, None)
    g.output([d, vals, idx, c])
    return g


def test_call_fallback_golden():
    assert body(fallback_calls()) == [
        '%0 = call(%x) {args = "($0, 1)", target = "kiln.diag_embed"} : f32[4, 6, 6]',
        '%1, %2 = call(%x) {target = "kiln.frexp"} : f32[4, 5], i32[4, 5]',
        "%3 = transpose(%x) {dim0 = 0, dim1 = 1} : f32[5, 4] strided [1, 5]",
        "%4 = contiguous(%3) : f32[5, 4]",
        "call(%1) {args = \"('vals:', $0, {'sep': '\\\\n'})\", target = \"builtins.print\"}",
        "return %0, %1, %2, %4",
    ]


def scalar_operands():
    g = Graph("scalars")
    x = g.placeholder("x", fresh(3))
    n = g.placeholder("n", 4, sym_sizes=["s1"])
    flag = g.placeholder("flag", True)
    a = rec(g, operator.mul, x, 2)
    b = rec(g, operator.sub, 0.5, a)
    c = rec(g, operator.gt, b, 0)
    d = rec(g, kiln.where, c, b, -1.5)
    e = rec(g, operator.mul, d, n)
    m = rec(g, operator.add, n, 1)
    f = rec(g, operator.pow, e, 2)
    g.output([f, m, flag, 7, 2.0, None, "text"])
    return g


def test_scalar_operands_golden():
    assert check(scalar_operands()) == (
        "graph @scalars(%x: f32[3], %n: int, %flag: bool) {\n"
        "  %0 = constant() {value = 2} : int\n"
        "  %1 = mul(%x, %0) : f32[3]\n"
        "  %2 = constant() {value = 0.5} : float\n"
        "  %3 = sub(%2, %1) : f32[3]\n"
        "  %4 = constant() {value = 0} : int\n"
        "  %5 = gt(%3, %4) : b8[3]\n"
        "  %6 = constant() {value = -1.5} : float\n"
        "  %7 = where(%5, %3, %6) : f32[3]\n"
        "  %8 = mul(%7, %n) : f32[3]\n"
        "  %9 = constant() {value = 1} : int\n"
        "  %10 = add(%n, %9) : int\n"
        "  %11 = pow(%8, %0) : f32[3]\n"
        "  %12 = constant() {value = 7} : int\n"
        "  %13 = constant() {value = 2.0} : float\n"
        "  return %11, %10, %flag, %12, %13\n"
        "}\n"
    )


# --- spellings, attributes and defaults ----------------------------------------------------------


def one_op(target, *args, example_inputs=((2, 3, 4),), **kwargs):
    """The last statement a call lowers to; X and Y in `args` stand for the two inputs."""
    g = Graph()
    xs = [g.placeholder(f"x{i}", fresh(*s, seed=i)) for i, s in enumerate(example_inputs)]

    def sub(a):
        if type(a) in (tuple, list):
            return type(a)(sub(v) for v in a)
        return xs[0] if a is X else xs[1] if a is Y else a

    g.output([rec(g, target, *sub(args), **kwargs)])
    return body(g)[-2]


X, Y = object(), object()


@pytest.mark.parametrize(
    "target, args, kwargs, want",
    [
        (kiln.sum, (X, 1), {}, "sum(%x0) {dim = [1]}"),
        (kiln.Tensor.sum, (X,), {"dim": [1], "keepdim": False}, "sum(%x0) {dim = [1]}"),
        (kiln.sum, (X,), {}, "sum(%x0)"),
        (kiln.sum, (X, ()), {}, "sum(%x0)"),
        (kiln.mean, (X, (0, -1), True), {}, "mean(%x0) {dim = [0, -1], keepdim = true}"),
        (kiln.sum, (X, 1), {"dtype": kiln.float64}, "sum(%x0) {dim = [1], dtype = f64}"),
        (kiln.argmax, (X, -1), {}, "argmax(%x0) {dim = -1}"),
        (kiln.var, (X, 1), {}, "var(%x0) {dim = [1]}"),
        (kiln.var, (X, 1), {"correction": 0}, "var(%x0) {correction = 0, dim = [1]}"),
        (kiln.Tensor.var, (X, 1, False), {}, "var(%x0) {correction = 0, dim = [1]}"),
        (kiln.logsumexp, (X, -1), {}, "logsumexp(%x0) {dim = [-1]}"),
        (F.gelu, (X,), {}, "gelu(%x0)"),
        (F.gelu, (X,), {"approximate": "none"}, "gelu(%x0)"),
        (kiln.Tensor.float, (X,), {}, "cast(%x0) {dtype = f32}"),
        (kiln.Tensor.half, (X,), {}, "cast(%x0) {dtype = f16}"),
        (kiln.Tensor.to, (X, kiln.float16), {}, "cast(%x0) {dtype = f16}"),
        (kiln.Tensor.to, (X,), {"dtype": kiln.int32}, "cast(%x0) {dtype = i32}"),
        (kiln.Tensor.to, (X, "cpu", kiln.bool), {}, "cast(%x0) {dtype = b8}"),
        (kiln.Tensor.permute, (X, 2, 0, 1), {}, "permute(%x0) {dims = [2, 0, 1]}"),
        (kiln.permute, (X, (2, 0, 1)), {}, "permute(%x0) {dims = [2, 0, 1]}"),
        (kiln.Tensor.view, (X, (4, 6)), {}, "view(%x0) {shape = [4, 6]}"),
        (kiln.Tensor.view, (X, 4, -1), {}, "view(%x0) {shape = [4, -1]}"),
        (kiln.Tensor.flatten, (X, 1), {}, "reshape(%x0) {shape = [2, 12]}"),
        (kiln.squeeze, (X,), {}, "squeeze(%x0)"),
        (kiln.Tensor.squeeze, (X, -1), {}, "squeeze(%x0) {dim = [-1]}"),
        (kiln.unsqueeze, (X, -1), {}, "unsqueeze(%x0) {dim = -1}"),
        (kiln.select, (X, 1, -1), {}, "select(%x0) {dim = 1, index = -1}"),
        (kiln.narrow, (X, 2, 1, 2), {}, "slice(%x0) {dim = 2, end = 3, start = 1}"),
        (kiln.Tensor.swapaxes, (X, 0, 2), {}, "transpose(%x0) {dim0 = 0, dim1 = 2}"),
        (kiln.cat, ((X, X),), {}, "cat(%x0, %x0)"),
        (kiln.cat, ([X, X], -1), {}, "cat(%x0, %x0) {dim = -1}"),
        (operator.getitem, (X, 1), {}, "select(%x0) {dim = 0, index = 1}"),
        (operator.getitem, (X, (Ellipsis, 1)), {}, "select(%x0) {dim = 2, index = 1}"),
        (operator.getitem, (X, (slice(None), None)), {}, "unsqueeze(%x0) {dim = 1}"),
        (operator.getitem, (X, slice(-1, None)), {}, "slice(%x0) {start = -1}"),
    ],
)
def test_spellings_and_defaults(target, args, kwargs, want):
    assert one_op(target, *args, **kwargs).split(" : ")[0].split(" = ", 1)[1] == want


@pytest.mark.parametrize(
    "target, args",
    [
        (kiln.mul, (X, Y)), (kiln.Tensor.mul, (X, Y)), (operator.mul, (X, Y)),
        (kiln.Tensor.__mul__, (X, Y)), (kiln.multiply, (X, Y)), (kiln.Tensor.__rmul__, (Y, X)),
    ],
)  # fmt: skip
def test_function_method_and_operator_print_alike(target, args):
    line = one_op(target, *args, example_inputs=((2, 3), (3,)))
    assert line == "%0 = mul(%x0, %x1) : f32[2, 3]"


def test_library_ops_and_normalized_defaults():
    g = Graph("nn")
    x = g.placeholder("x", fresh(1, 3, 8, 8))
    w = g.placeholder("w", fresh(4, 3, 3, 3))
    c0 = rec(g, F.conv2d, x, w, stride=(1, 1), padding=0, dilation=1, groups=1)
    c1 = rec(g, kiln.conv2d, x, w, None, 2, (0, 1))
    c2 = rec(g, F.conv2d, x, w, padding="same")  # padding by name: no attribute for it
    seq = g.placeholder("seq", fresh(2, 4, 8))
    lw, lb = g.placeholder("lw", fresh(8)), g.placeholder("lb", fresh(8))
    ln = rec(g, F.layer_norm, seq, (8,), lw, lb, 1e-5)
    ln2 = rec(g, F.layer_norm, seq, [8], eps=1e-6)
    q = rec(g, kiln.Tensor.view, ln, 2, 4, 2, 4)
    att = rec(g, F.scaled_dot_product_attention, q, q, q, is_causal=True, scale=0.5)
    idx, emb = g.placeholder("idx", kiln.tensor([[1, 2]])), g.placeholder("emb", fresh(5, 8))
    e = rec(g, F.embedding, idx, emb, padding_idx=0)
    mm = rec(g, operator.matmul, ln, rec(g, kiln.Tensor.t, emb))
    g.output([c0, c1, c2, ln2, att, e, mm])
    assert body(g) == [
        "%0 = conv2d(%x, %w) : f32[1, 4, 6, 6]",
        "%1 = conv2d(%x, %w) {padding = [0, 1], stride = [2, 2]} : f32[1, 4, 3, 4]",
        "%2 = conv2d(%x, %w) {padding = [1, 1]} : f32[1, 4, 8, 8]",
        "%3 = layer_norm(%seq, %lw, %lb) {normalized_shape = [8]} : f32[2, 4, 8]",
        "%4 = layer_norm(%seq) {eps = 1e-06, normalized_shape = [8]} : f32[2, 4, 8]",
        "%5 = view(%3) {shape = [2, 4, 2, 4]} : f32[2, 4, 2, 4]",
        "%6 = scaled_dot_product_attention(%5, %5, %5) {is_causal = true, scale = 0.5} "
        ": f32[2, 4, 2, 4]",
        "%7 = embedding(%idx, %emb) {padding_idx = 0} : f32[1, 2, 8]",
        "%8 = transpose(%emb) {dim0 = 0, dim1 = 1} : f32[8, 5] strided [1, 8]",
        "%9 = matmul(%3, %8) : f32[2, 4, 5]",
        "return %0, %1, %2, %4, %6, %7, %9",
    ]


def test_arguments_an_op_cannot_express_fall_back_to_call():
    g = Graph()
    x, y = g.placeholder("x", fresh(3)), g.placeholder("y", fresh(3, seed=1))
    a = rec(g, kiln.add, x, y, alpha=2)  # x + 2 * y
    d = rec(g, kiln.div, x, y, rounding_mode="floor")
    r = rec(g, F.relu, x, inplace=False)
    t = rec(g, kiln.Tensor.t, x)  # t() of a 1-d tensor is not a transpose
    g.output([a, d, r, t])
    assert body(g) == [
        "%0 = constant() {value = 2} : int",
        "%1 = mul(%y, %0) : f32[3]",
        "%2 = add(%x, %1) : f32[3]",
        "%3 = floor_divide(%x, %y) : f32[3]",
        "%4 = relu(%x) : f32[3]",
        '%5 = call(%x) {target = "kiln.Tensor.t"} : f32[3]',
        "return %2, %3, %4, %5",
    ]


def test_inplace_ops_become_op_then_copy():
    g = Graph()
    x, y = g.placeholder("x", fresh(2, 3)), g.placeholder("y", fresh(3, seed=1))
    i = g.placeholder("i", kiln.tensor([1, 2]))
    a = g.call(operator.iadd, (x, y), {}, x.meta["example"])
    b = g.call(kiln.Tensor.mul_, (x, 2.0), {}, x.meta["example"])
    c = g.call(kiln.Tensor.copy_, (x, y), {}, x.meta["example"])
    d = g.call(operator.itruediv, (i, 2), {}, kiln.tensor([0.5, 1.0]))  # would promote: a call
    g.output([a, b, c, d])
    assert body(g) == [
        "%0 = add(%x, %y) : f32[2, 3]",
        "%1 = copy_(%x, %0) : f32[2, 3]",
        "%2 = constant() {value = 2.0} : float",
        "%3 = mul(%x, %2) : f32[2, 3]",
        "%4 = copy_(%x, %3) : f32[2, 3]",
        "%5 = copy_(%x, %y) : f32[2, 3]",
        '%6 = call(%i) {args = "($0, 2)", target = "operator.itruediv"} : f32[2]',
        "return %1, %4, %5, %6",
    ]


def test_types_strides_devices_and_names():
    g = Graph("0 weird-name")
    x = g.placeholder("x", fresh(4, 6))
    b = g.placeholder("mask", kiln.ones(3, dtype=kiln.bool))
    h = g.placeholder("h", kiln.ones(2, dtype=kiln.bfloat16))
    f = g.placeholder("scale", 0.5)
    none = g.placeholder("unused", None)  # no .kir type: not a parameter
    t = rec(g, kiln.Tensor.transpose, x, 0, 1)
    s = rec(g, operator.getitem, x, (slice(None), slice(None, None, 2)))
    g.output([t, s, b, h, f, none])
    text = check(g)
    assert text.splitlines()[0] == (
        "graph @_0_weird_name(%x: f32[4, 6], %mask: b8[3], %h: bf16[2], %scale: float) {"
    )
    assert body(g)[:2] == [
        "%0 = transpose(%x) {dim0 = 0, dim1 = 1} : f32[6, 4] strided [1, 6]",
        "%1 = slice(%x) {dim = 1, step = 2} : f32[4, 3] strided [6, 2]",
    ]


def test_symbol_names_follow_the_s_convention():
    g = Graph()
    x = g.placeholder("x", fresh(6, 4), sym_sizes=["batch", 4])
    y = g.placeholder("y", fresh(6, 5), sym_sizes=["s0", "seq"])
    g.output([rec(g, kiln.Tensor.sum, x), y])
    assert check(g).splitlines()[0] == "graph @graph(%x: f32[s1, 4], %y: f32[s0, s2]) {"


def test_every_golden_graph_also_runs_as_python():
    for make in (elementwise_chain, linear_gelu, softmax_graph, scalar_operands):
        g = make()
        inputs = [n.meta["example"] for n in g.inputs]
        got = g.compile_python()(*inputs)
        assert len(got) == len(g.outputs)


# --- the kiln._C._ir functions -------------------------------------------------------------------


def test_parse_and_print_normalizes_hand_written_text():
    text = (
        "graph @g(%a: f32[2,3]) {\n"
        "  %r = sum(%a) {keepdim = true, dim = [1]} : f32[2,1]\n"
        "  return %r\n}"
    )
    assert ir.parse_and_print(text) == (
        "graph @g(%a: f32[2, 3]) {\n"
        "  %0 = sum(%a) {dim = [1], keepdim = true} : f32[2, 1]\n"
        "  return %0\n"
        "}\n"
    )


def test_verify_reports_file_line_and_column():
    bad = (
        "graph @g(%x: f32[4], %y: f32[3]) {\n"
        "  %0 = add(%x, %y) : f32[4] loc(\"m.py\":9)\n"
        "  return %0\n"
        "}\n"
    )
    ir.parse_and_print(bad)  # well formed, but wrong
    with pytest.raises(ValueError) as info:
        ir.verify(bad, "model.kir")
    assert str(info.value) == (
        "model.kir:2:3: error: %0 = add: operand shapes do not broadcast: 4 vs 3 in dim -1 "
        "(from m.py:9)"
    )
    with pytest.raises(ValueError, match=r"^<kir>:1:14: error: expected a type"):
        ir.verify("graph @g(%x: 3) {\n  return %x\n}\n")
    with pytest.raises(ValueError, match=r"^x.kir:2:3: error: unknown op 'frobnicate'"):
        ir.parse_and_print("graph @g() {\n  frobnicate()\n  return\n}\n", "x.kir")
    with pytest.raises(ValueError, match=r"^<kir>:2:3: error: %0 = sym_size: dim 1 is out of"):
        ir.verify("graph @g(%x: f32[4]) {\n  %0 = sym_size(%x) {dim = 1} : int\n  return %0\n}\n")


def test_canonical_sym_int():
    assert ir.canonical_sym_int("s0 + s0*2") == "s0*3"
    assert ir.canonical_sym_int("(s1) floordiv (2) + 0") == "s1 floordiv 2"
    assert ir.canonical_sym_int("(4) * (-3)") == "-12"
    with pytest.raises(ValueError, match="1:5: error"):
        ir.canonical_sym_int("s0 +")

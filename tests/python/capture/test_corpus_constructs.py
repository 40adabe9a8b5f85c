"""Capture corpus, constructs captured whole (1/3): tensor operators, indexing, in-place
updates, tensor methods, kiln and F functions, shape/dtype logic and Python constants.

Each program is registered with the inputs it runs on and the number of ops its single graph
must hold (Python-level logic folds away; tensor ops are recorded). `Corpus.run` checks, with
fullgraph=False and fullgraph=True: one graph, no break, results and mutated arguments equal to
eager on the first and on the cached second call. Parts 2/3 and 3/3 are
test_corpus_constructs_python.py and test_corpus_constructs_modules.py.
"""

import math

import pytest
from corpus_util import Corpus, fresh_capture, run_case  # noqa: F401 - autouse fixture

import kiln
import kiln.nn.functional as F

corpus = Corpus()
case = corpus.case


def r(*shape):
    """A random float32 tensor (Corpus.run seeds the generator first)."""
    return kiln.randn(*shape)


def x34():
    return (r(3, 4),)


def x34_y34():
    return (r(3, 4), r(3, 4))


# ---------------------------------------------------------------------------------------------
# Operators and indexing
# ---------------------------------------------------------------------------------------------
@case(x34_y34, ops=10)
def arith_binary(x, y):
    return (x + y) * 2 - y / 3 + x**2 - (x // 1.5) + (y % 0.7)


@case(x34, ops=5)
def arith_reflected(x):
    return 2 - x, 1 / (x.abs() + 1), 3.0 * x


@case(lambda: (r(3, 4), r(4, 5)), ops=1)
def matmul_operator(x, w):
    return x @ w


@case(x34_y34, ops=9)
def compare_and_logic(x, y):
    return ((x > 0) & (y < 0)) | ~(x == y), (x >= y) ^ (x != 0)


@case(x34, ops=3)
def unary_ops(x):
    return -x, +x, abs(x)


@case(lambda: (kiln.arange(12).reshape(3, 4), kiln.arange(1, 5)), ops=5)
def int_tensor_arith(a, b):
    return a // b, a % b, a * b - 1, a & 5


@case(x34_y34, ops=2)
def inplace_iadd_on_argument(x, y):
    x += y
    x *= 2
    return x


@case(x34, ops=4)
def inplace_on_local(x):
    z = x.clone()
    z += 1
    z.mul_(2)
    z.clamp_(max=3.0)
    return z


@case(x34_y34, ops=4)
def setitem_on_argument(x, y):
    x[0] = 0.0
    x[:, 1] = y[:, 1]
    return x.sum()


@case(x34, ops=3)
def setitem_with_mask(x):
    z = x.clone()
    z[z < 0] = 0.0
    return z


@case(lambda: (r(2, 3, 4), r(2, 3, 4)), ops=3)
def setitem_with_ellipsis(x, y):
    x[..., 0] = y[..., 1] * 2
    return x


@case(x34, ops=2)
def inplace_method_returns_self(x):
    y = x.add_(1).relu_()
    return y, y is x


@case(x34, ops=0)
def argument_returned_unchanged(x):
    return x, x.shape, x.dtype


@case(lambda: (r(4, 5, 6),), ops=6)
def getitem_variety(x):
    return x[0], x[:, 1:3], x[..., ::2], x[None, 1], x[-1, :, 2], x[1:, None, :, -2]


@case(lambda: (r(4, 6), kiln.tensor([2, 0, 3])), ops=2)
def getitem_with_index_tensor(x, idx):
    return x[idx], x[:, idx]


# ---------------------------------------------------------------------------------------------
# Tensor methods, kiln functions, F functions
# ---------------------------------------------------------------------------------------------
@case(x34, ops=6)
def tensor_method_chain(x):
    return x.exp().log1p().clamp(min=0.1).sqrt().mean(dim=-1, keepdim=True).neg()


@case(lambda: (r(2, 3, 4),), ops=9)
def view_ops(x):
    a = x.view(6, 4).t()
    b = x.reshape(2, -1).permute(1, 0).contiguous()
    c = x.transpose(1, 2).flatten(1).unsqueeze(0).squeeze(0)
    return a, b, c


@case(x34_y34, ops=8)
def kiln_functions(x, y):
    m = kiln.maximum(x, y)
    w = kiln.where(x > y, x, kiln.zeros_like(y))
    return kiln.matmul(m, w.t()), kiln.softmax(w, dim=1), kiln.exp(m)


@case(lambda: (r(2, 5, 8), r(16, 8), r(16)), ops=8)
def functional_ops(x, w, b):
    h = F.linear(x, w, b)
    h = F.gelu(h, approximate="tanh") + F.silu(h) + F.relu(h)
    h = F.layer_norm(h, (16,))
    return F.softmax(h, dim=-1)


@case(x34, ops=6)
def dtype_conversions(x):
    return x.to(kiln.float64), x.double(), x.long(), (x > 0).float(), x.to(dtype=kiln.float16)


@case(lambda: (kiln.arange(6).reshape(2, 3), r(2, 3).double()), ops=4)
def dtype_promotion(a, y):
    return a + 0.5, a * y, a.to(y.dtype), a.type_as(y), (a / 2).dtype


@case(x34, ops=4)
def factory_from_shapes(x):
    return x + kiln.zeros(x.shape), kiln.ones(x.shape[1]) * 0.5


@case(x34, ops=4)
def arange_and_full(x):
    n = x.shape[1]
    return x * kiln.arange(n), kiln.full((2, n), 1.5), kiln.ones(x.size(0), 1, dtype=kiln.int64)


@case(x34, ops=11)
def namedtuple_results(x):
    r1 = x.max(dim=1)
    values, indices = x.min(dim=0)
    s = x.sort(dim=1, descending=True)
    return r1.values + values.sum(), r1.indices, indices, s.values, s.indices


@case(lambda: (r(3, 6),), ops=10)
def split_and_chunk_unpacking(x):
    a, b, c = x.split(2, dim=1)
    d, e = x.chunk(2, dim=1)
    return a * b + c, d - e


@case(x34, ops=5)
def cat_of_list_built_in_loop(x):
    parts = []
    for i in range(3):
        parts.append(x * i)
    return kiln.cat(parts, dim=0), kiln.stack(parts)


@case(lambda: (r(2, 3), r(3, 4)), ops=1)
def einsum_call(a, b):
    return kiln.einsum("ij,jk->ik", a, b)


@case(x34, ops=2)
def transpose_properties(x):
    return x.T, x.mT


# ---------------------------------------------------------------------------------------------
# Shapes, dtypes and metadata in Python logic
# ---------------------------------------------------------------------------------------------
@case(lambda: (r(2, 3, 4),), ops=3)
def shape_logic(x):
    if x.dim() == 3 and x.ndim == 3:
        x = x.view(x.shape[0], -1)
    return x * x.size(-1), x.reshape(x.size(1), x.size(0)), x.numel()


@case(lambda: (r(2, 3, 4),), ops=2)
def shape_unpacking(x):
    B, T, C = x.shape
    return x.transpose(1, 2).reshape(B * C, T), x.new_zeros(B, T).shape


@case(x34, ops=1)
def dtype_branch(x):
    if x.dtype == kiln.float32 and x.is_floating_point():
        return x * 2
    return x - 1


@case(x34, ops=1)
def assert_on_shapes(x):
    assert x.dim() == 2, "expects a matrix"
    assert x.shape[-1] % 2 == 0
    return x.sum(dim=0)


@case(x34, ops=1)
def shape_compared_with_tuple(x):
    if x.shape == (3, 4) and tuple(x.shape) + (1,) == (3, 4, 1):
        return x.unsqueeze(-1)
    return x


@case(x34, ops=1)
def chained_comparison(x):
    if 0 < x.dim() <= 2 < x.shape[1]:
        return x + 1
    return x


@case(x34, ops=1)
def walrus_operator(x):
    if (n := x.shape[0]) > 2:
        return x * n
    return x


@case(x34, ops=2)
def ternary_expressions(x):
    scale = 0.5 if x.shape[0] > 2 else 2.0
    act = F.relu if x.dtype == kiln.float64 else F.sigmoid
    return act(x * scale)


@case(x34, ops=1)
def grad_mode_query(x):
    return x * (2 if kiln.is_grad_enabled() else 3)


# ---------------------------------------------------------------------------------------------
# Python constants and containers
# ---------------------------------------------------------------------------------------------
@case(x34, ops=3)
def numeric_constants(x):
    d = 4
    scale = 1.0 / math.sqrt(d)
    big, flag = 10**3, True
    return x * scale + big * int(flag) - float(d) / 3


@case(x34, ops=1)
def string_constants(x):
    mode = "mean"
    name = "Layer_Norm".lower().replace("_", "")
    if mode == "mean" and name.startswith("layer") and "norm" in name:
        return x.mean(dim=1)
    return x.sum(dim=1)


@case(x34, ops=3)
def container_constants(x):
    cfg = {"scale": 2, "dims": (0, 1), "shift": [1.0, 2.0]}
    y = x * cfg["scale"] + cfg.get("shift")[1]
    return y.sum(dim=cfg["dims"][1])


@case(lambda: (r(4, 6),), ops=2)
def slice_objects(x):
    s = slice(1, 3)
    t = slice(None, None, 2)
    return x[:, s], x[t]


@case(x34, ops=4)
def range_constants(x):
    out = x
    for i in range(1, 8, 2):
        out = out + i
    return out, len(range(3, 10)), list(range(3))


@case(x34, ops=2)
def none_constant(x):
    bias = None
    y = x * 2
    if bias is not None:
        y = y + bias
    return y, bias, x.sum() if bias is None else None


SCALE = 0.25
TABLE = {"relu": F.relu, "tanh": kiln.tanh}


@case(x34, ops=4)
def global_values(x):
    return TABLE["relu"](x) * SCALE + TABLE["tanh"](x)


@case(x34, ops=2)
def fstring_of_constants(x):
    names = {f"w{i}": i + 1 for i in range(2)}
    key = f"w{len(names) - 1}"
    return x * names[key] + names[f"{'w'}{0:d}"], f"{key}:{3.5:.1f}"


@case(x34, ops=1)
def string_formatting(x):
    label = "{}-{}".format("conv", 2) + "_%d" % 3  # noqa: UP031 - the construct under test
    return x * len(label), label, "%s=%.2f" % ("a", 0.5)  # noqa: UP031


@case(lambda: (r(3, 4), 3, 0.5, True), ops=3)
def python_scalar_arguments(x, n, eps, flag):
    y = x * n + eps
    return (y.relu() if flag else y), n + 1, eps * 2


@case(x34, ops=1)
def membership_tests(x):
    dims = (0, 1)
    opts = {"a": 1}
    return x.sum(dim=0 if 1 in dims and "a" in opts and "b" not in opts else 1)


@case(x34, ops=1)
def boolean_operators_on_python_values(x):
    a, b = 0, 3
    c = a or b
    d = a and b
    return x * (c + d), not a, b and "yes"


@pytest.mark.parametrize("fullgraph", [False, True], ids=["graph", "fullgraph"])
@pytest.mark.parametrize("name", corpus.names())
def test_construct(name, fullgraph):
    corpus.run(name, fullgraph)


def _perturbing(graph, example_inputs):
    """A wrong backend: every tensor output is off by one."""
    fn = graph.compile_python()
    return lambda *a: tuple(o + 1 if isinstance(o, kiln.Tensor) else o for o in fn(*a))


def _on_copies(graph, example_inputs):
    """A wrong backend: runs the graph on copies, so in-place updates of inputs are lost."""
    fn = graph.compile_python()
    return lambda *a: fn(*[t.clone() if isinstance(t, kiln.Tensor) else t for t in a])


def test_run_case_detects_wrong_results_and_lost_mutations():
    """The harness itself can fail: wrong values, lost in-place updates, unexpected counts."""
    with pytest.raises(AssertionError, match="call 1: result"):
        run_case(arith_binary, r(3, 4), r(3, 4), backend=_perturbing)
    with pytest.raises(AssertionError, match="args after the call"):
        run_case(inplace_iadd_on_argument, r(3, 4), r(3, 4), backend=_on_copies)
    with pytest.raises(AssertionError, match="graph count"):
        run_case(arith_binary, r(3, 4), r(3, 4), expect_graphs=2)
    with pytest.raises(AssertionError, match="break count"):
        run_case(_breaks_once, r(3, 4), expect_breaks=0)
    info = run_case(_breaks_once, r(3, 4), expect_graphs=2, expect_breaks=1)
    assert info.break_reasons == ["print() is a side effect"]


def test_python_backend_wrapper_is_not_captured():
    """A callable backend's own Python code runs with the frame hook off (one graph only)."""
    wrap = lambda graph, example_inputs: (lambda *a: graph.compile_python()(*a))  # noqa: E731
    info = run_case(arith_binary, r(3, 4), r(3, 4), backend=wrap, expect_graphs=1,
                    expect_breaks=0)
    assert info.op_counts == [10]


def _breaks_once(x):
    y = x + 1
    print(end="")
    return y * 2


def test_corpus_size():
    """The constructs half of the corpus holds at least 70 programs."""
    import test_corpus_constructs_modules
    import test_corpus_constructs_python

    total = sum(len(m.corpus.cases) for m in (test_corpus_constructs_modules,
                                               test_corpus_constructs_python)) + len(corpus.cases)
    assert total >= 70

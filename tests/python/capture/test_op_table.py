"""Every op of the op table (ir/ops.def KILN_SPELLING rows) compiled against eager kiln.

Each row's op is called through its spellings, compiled alone and in fused chains, strictly (a
decline fails the test), over the dtypes eager accepts, broadcast and transposed operands,
zero-size and 0-d tensors and a symbolic size; results equal eager's within per-dtype
tolerances and no node runs eagerly. A dtype eager rejects must be rejected compiled too (the
node runs eagerly and raises eager's error). The sample calls below name every table op: a row
added to ops.def without a sample here fails `test_every_table_op_has_a_sample`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import TOL, assert_same, rand, run_compiled

import kiln
import kiln.nn.functional as F
from kiln._C import _ir
from kiln._capture import lowerings, op_table
from kiln._capture.backend_compiled import CpuBackend

FLOATS = [kiln.float32, kiln.float64, kiln.float16, kiln.bfloat16]
INTS = [kiln.int64, kiln.int32, kiln.uint8]
ALL = FLOATS + INTS + [kiln.bool]


def unit(x):
    """Values in (-1, 1) (the inverse trigonometric functions' domain)."""
    return x.tanh() * 0.9 if x.is_floating_point() else x


def positive(x):
    return x.abs() + 0.5 if x.is_floating_point() else x


# op keyword -> (call on one or two tensors, operand count, dtypes to try)
UNARY_FLOAT_MATH = {
    "exp": lambda x: x.exp(), "log": lambda x: positive(x).log(),
    "sqrt": lambda x: positive(x).sqrt(), "rsqrt": lambda x: positive(x).rsqrt(),
    "tanh": lambda x: x.tanh(), "sigmoid": lambda x: x.sigmoid(), "erf": lambda x: kiln.erf(x),
    "erfc": lambda x: x.erfc(),
    "sin": lambda x: x.sin(), "cos": lambda x: kiln.cos(x), "tan": lambda x: unit(x).tan(),
    "asin": lambda x: unit(x).asin(), "acos": lambda x: kiln.arccos(unit(x)),
    "atan": lambda x: x.atan(), "sinh": lambda x: x.sinh(), "cosh": lambda x: x.cosh(),
    "asinh": lambda x: x.asinh(), "acosh": lambda x: (positive(x) + 1).acosh(),
    "atanh": lambda x: unit(x).atanh(), "log1p": lambda x: positive(x).log1p(),
    "expm1": lambda x: x.expm1(), "exp2": lambda x: x.exp2(), "log2": lambda x: positive(x).log2(),
    "log10": lambda x: positive(x).log10(), "reciprocal": lambda x: positive(x).reciprocal(),
}  # fmt: skip
UNARY_ANY = {
    "neg": lambda x: -x, "abs": lambda x: abs(x), "floor": lambda x: x.floor(),
    "ceil": lambda x: x.ceil(), "trunc": lambda x: x.trunc(), "frac": lambda x: x.frac(),
    "sign": lambda x: x.sign(), "round": lambda x: x.round(),
    "isnan": lambda x: x.isnan(), "isinf": lambda x: x.isinf(),
    "isfinite": lambda x: x.isfinite(), "isposinf": lambda x: x.isposinf(),
    "isneginf": lambda x: x.isneginf(), "signbit": lambda x: x.signbit(),
    "logical_not": lambda x: x.logical_not(), "bitwise_not": lambda x: ~x,
    "relu": lambda x: F.relu(x), "gelu": lambda x: F.gelu(x, approximate="tanh"),
    "silu": lambda x: F.silu(x), "softplus": lambda x: F.softplus(x, beta=2, threshold=3),
    "mish": lambda x: F.mish(x), "elu": lambda x: F.elu(x, alpha=0.7),
    "celu": lambda x: F.celu(x, alpha=1.5), "leaky_relu": lambda x: F.leaky_relu(x, 0.2),
    "hardtanh": lambda x: F.hardtanh(x, -1.5, 0.5), "hardsigmoid": lambda x: F.hardsigmoid(x),
    "hardswish": lambda x: F.hardswish(x), "log_sigmoid": lambda x: F.logsigmoid(x),
    "softsign": lambda x: F.softsign(x), "tanhshrink": lambda x: F.tanhshrink(x),
    "hardshrink": lambda x: F.hardshrink(x, 0.7), "softshrink": lambda x: F.softshrink(x, 0.3),
    "threshold": lambda x: F.threshold(x, 0.5, -2.0),
    "nan_to_num": lambda x: (x / x.abs().round()).nan_to_num(posinf=7.0),
    "clamp": lambda x: x.clamp(min=-1, max=1),
    "masked_fill": lambda x: x.masked_fill(x > 0.5, 2.5), "flip": lambda x: x.flip(-1),
    "roll": lambda x: x.roll(3),
}  # fmt: skip
BINARY = {
    "add": lambda a, b: a + b, "sub": lambda a, b: kiln.sub(a, b), "mul": lambda a, b: a * b,
    "div": lambda a, b: a / positive(b), "pow": lambda a, b: positive(a) ** b,
    "maximum": lambda a, b: kiln.maximum(a, b), "minimum": lambda a, b: a.minimum(b),
    "fmax": lambda a, b: kiln.fmax(a, b), "fmin": lambda a, b: kiln.fmin(a, b),
    "floor_divide": lambda a, b: a // (b.abs() + 1), "remainder": lambda a, b: a % (b.abs() + 1),
    "fmod": lambda a, b: kiln.fmod(a, b.abs() + 1), "atan2": lambda a, b: kiln.atan2(a, b),
    "hypot": lambda a, b: kiln.hypot(a, b), "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
    "ge": lambda a, b: a >= b, "logical_and": lambda a, b: kiln.logical_and(a, b),
    "logical_or": lambda a, b: a.logical_or(b), "logical_xor": lambda a, b: a.logical_xor(b),
    "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b, "where": lambda a, b: kiln.where(a > b, a, b),
    # counts of every sign and size: torch's rules outside [0, bits) included
    "bitwise_left_shift": lambda a, b: a << b, "bitwise_right_shift": lambda a, b: a >> b,
    "lerp": lambda a, b: kiln.lerp(a, b, 0.3),
    "mse_loss": lambda a, b: F.mse_loss(a, b.expand_as(a)),
    "l1_loss": lambda a, b: F.l1_loss(a, b.expand_as(a), reduction="sum"),
}  # fmt: skip
# Products of a (m, k) and a (k,) operand: library calls inside the compiled program.
PRODUCTS = {
    "matmul": lambda a, b: a.matmul(b) + kiln.matmul(b, a.t()),
    "linear": lambda a, b: F.linear(a, b.expand(4, b.shape[0]), b[:4]),
}  # fmt: skip
def _spd(x):
    """v v^T + (n + 1) I for v = x flattened: symmetric positive definite for any x."""
    v = x.reshape(-1, 1)
    return v @ v.mT + (v.shape[0] + 1) * kiln.eye(v.shape[0], dtype=x.dtype)


REDUCTIONS = {
    "sum": lambda x: x.sum(-1), "prod": lambda x: x.prod(0), "mean": lambda x: x.mean((0,)),
    "amax": lambda x: x.amax(-1, keepdim=True), "amin": lambda x: x.amin(),
    "detach": lambda x: x.detach() * 2,
    "all": lambda x: x.all(-1), "any": lambda x: kiln.any(x, 0),
    "argmax": lambda x: x.argmax(-1), "argmin": lambda x: x.argmin(0, keepdim=True),
    "logsumexp": lambda x: x.logsumexp(-1), "norm": lambda x: x.norm(dim=-1),
    "rms_norm": lambda x: F.rms_norm(x, (x.shape[-1],)),
    "layer_norm": lambda x: F.layer_norm(x, (x.shape[-1],), x[0], None, 1e-3),
    "softmax": lambda x: F.softmax(x, -1),
    "log_softmax": lambda x: x.log_softmax(0),
    "tril": lambda x: x.tril(1), "triu": lambda x: kiln.triu(x, -1),
    "repeat": lambda x: x.repeat(2, 1, 3), "pad": lambda x: F.pad(x, (1, -2, 2, 0), value=1.5),
    "one_hot": lambda x: F.one_hot(x.abs().long().clamp(max=4), 5),
    # positions computed in the graph, different per element, along either dim
    "gather": lambda x: x.gather(-1, (x.abs() * 5).long() % 3),
    "index_select": lambda x: x.index_select(-1, (x[0].abs() * 5).long() % 3).index_select(
        0, x[:, 0].abs().long() % 1),
    "cross_entropy": lambda x: F.cross_entropy(x, (x[:, 0].abs() * 7).long() % 3,
                                               label_smoothing=0.1),
    "nll_loss": lambda x: F.nll_loss(x, (x[:, 1].abs() * 7).long() % 3, reduction="sum"),
    "cumsum": lambda x: x.cumsum(-1) * 2, "cumprod": lambda x: kiln.cumprod(x, 0),
    "argsort": lambda x: x.argsort(-1, descending=True) + x.argsort(0),
    "scatter_add": lambda x: x.scatter_add(1, (x.abs() * 5).long() % 3, x),
    "scatter": lambda x: x.scatter(1, (x.abs() * 5).long() % 3, x * 2),
    "index_add": lambda x: x.index_add(1, (x[0].abs() * 5).long() % 3, x, alpha=2),
    "logcumsumexp": lambda x: x.logcumsumexp(-1),
    # the LAPACK-backed ops on a symmetric positive-definite matrix made from any x
    "linalg_solve": lambda x: kiln._linalg_solve(_spd(x), x.reshape(-1, 1) * 2),
    "linalg_solve_triangular": lambda x: kiln._linalg_solve_triangular(
        _spd(x), x.reshape(-1, 1), upper=True),
    "linalg_cholesky": lambda x: kiln._linalg_cholesky(_spd(x)),
    "linalg_logabsdet": lambda x: kiln._linalg_logabsdet(_spd(x)),
    "linalg_det_sign": lambda x: kiln._linalg_det_sign(_spd(x) - 2),
    # eigenvalues, and the squared rows of the eigenvectors (ones, whatever their signs)
    "linalg_eigh_packed": lambda x: (kiln._linalg_eigh_packed(_spd(x)) ** 2).sum(-1),
}  # fmt: skip
SAMPLES = {**UNARY_FLOAT_MATH, **UNARY_ANY, **BINARY, **REDUCTIONS, **PRODUCTS}


def _eager_accepts(fn, *args) -> bool:
    try:
        with kiln.no_grad():
            fn(*args)
        return True
    except (RuntimeError, TypeError, ValueError, NotImplementedError, ZeroDivisionError):
        return False


def _inputs(shape, dtype, seed=0):
    x = rand(*shape, dtype=kiln.float64, seed=seed) * 3
    if dtype == kiln.bool:
        return x > 0
    if dtype in INTS:
        return (x.abs() if dtype == kiln.uint8 else x).round().to(dtype)
    return x.to(dtype)


def test_every_spelling_names_a_callable():
    lowerings._table()
    assert lowerings.UNRESOLVED == []


def test_every_table_op_has_a_sample():
    ops = {row["op"] for row in _ir.op_table()}
    assert ops - set(SAMPLES) == set()


def test_schema_signatures_come_from_the_table():
    (clamp,) = [r for r in _ir.op_table() if r["schema"].startswith("clamp(")]
    sig, types = op_table.signature(clamp["args"])
    assert list(sig.parameters) == ["input", "min", "max"]
    assert sig.parameters["min"].default is None and types["min"] == "Scalar?"
    (total,) = [r for r in _ir.op_table() if r["schema"].startswith("sum(")]
    sig, types = op_table.signature(total["args"])
    assert types["dim"] == "int[1]?" and sig.parameters["keepdim"].default is False
    assert sig.parameters["dtype"].kind is sig.parameters["dtype"].KEYWORD_ONLY
    (roll,) = [r for r in _ir.op_table() if r["schema"].startswith("roll(")]
    assert op_table.signature(roll["args"])[0].parameters["dims"].default == []
    (relu6,) = [r for r in _ir.op_table() if r["schema"].startswith("relu6(")]
    assert relu6["fixed_values"] == {"min_val": 0.0, "max_val": 6.0}


@pytest.mark.parametrize("op", sorted(SAMPLES))
@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_op_alone(op, dtype):
    fn = SAMPLES[op]
    binary = op in BINARY or op in PRODUCTS
    args = (_inputs((3, 17), dtype), _inputs((17,), dtype, seed=1)) if binary else (
        _inputs((3, 17), dtype),)
    if not _eager_accepts(fn, *args):
        # Eager rejects the dtype: the compiled function must raise too (never a result).
        kiln.compiler.reset()
        with pytest.raises((RuntimeError, TypeError, ValueError, NotImplementedError)):
            with kiln.no_grad():
                kiln.compile(fn)(*args)
        return
    run_compiled(fn, *args)


@pytest.mark.parametrize("op", sorted(PRODUCTS))
def test_product_layouts(op):
    """Transposed and broadcast (stride-0) operands, zero-size ones, and a symbolic size."""
    fn = PRODUCTS[op]
    for args in [(rand(17, 6).t(), rand(17)), (rand(6, 1).expand(6, 17), rand(34)[::2]),
                 (rand(0, 5), rand(5))]:
        run_compiled(fn, *args)
    backend = run_compiled(fn, rand(5, 9), rand(9), dynamic=True, calls=[(rand(7, 9), rand(9))])
    assert all(r.eager_nodes == 0 for r in backend.reports)


def test_product_of_reshapes_of_a_transposed_argument():
    """A GEMM operand that is a reshape of a transposed (non-contiguous) argument: realized in
    its own shape, not handed to the library as a view its strides cannot give."""
    x = rand(17, 3).t()
    run_compiled(lambda x: x.reshape(-1, 1) @ x.reshape(1, -1), x)
    run_compiled(lambda x: x.reshape(3, 17).mT @ x.reshape(3, 17), x)


def test_keyword_spellings_of_reshape_view_and_expand():
    """x.reshape(shape=...) (MAE's patchify), x.view(size=...), x.expand(size=...) compile
    (strict backend: an eager node raises)."""
    x = rand(4, 6)
    run_compiled(lambda x: x.reshape(shape=(2, 12)) * 2, x)
    run_compiled(lambda x: x.view(size=(3, 8)) + 1, x)
    run_compiled(lambda x: x[:1].expand(size=(5, 6)) - x[1], x)


@pytest.mark.parametrize("op", sorted(set(SAMPLES) - set(PRODUCTS)))
def test_op_layouts(op):
    """Transposed, broadcast, zero-size and 0-d operands, and a symbolic size."""
    fn = SAMPLES[op]
    binary = op in BINARY
    x = rand(17, 3) * 3
    cases = [(x.t(), rand(3, 1, seed=2) * 3) if binary else (x.t(),)]
    if op not in REDUCTIONS or op in ("sum", "amax", "logsumexp", "softmax", "tril", "triu",
                                                  "repeat", "pad", "one_hot", "cumsum",
                                                  "cumprod", "argsort"):
        cases.append((rand(0, 5), rand(5)) if binary else (rand(0, 5),))
    if op not in REDUCTIONS:
        cases.append((kiln.tensor(0.7), kiln.tensor(-1.3)) if binary else (kiln.tensor(0.7),))
    calls = [(rand(4, 9, seed=3) * 2, rand(9, seed=4)) if binary else (rand(4, 9, seed=3) * 2,)]
    first = (rand(5, 9) * 2, rand(9, seed=5)) if binary else (rand(5, 9) * 2,)
    if op.startswith("bitwise"):  # integer operands only
        cases, calls, first = (
            [tuple(a.round().long() for a in args) for args in cases],
            [tuple(a.round().long() for a in args) for args in calls],
            tuple(a.round().long() for a in first))
    for args in cases:
        run_compiled(fn, *args)
    backend = run_compiled(fn, *first, dynamic=True, calls=calls)
    assert all(r.eager_nodes == 0 for r in backend.reports)


@pytest.mark.parametrize("seed", range(6))
def test_random_fused_chains(seed):
    """Random chains of unary ops and binary ops with a second input compile into one part of
    one graph and equal eager."""
    g = np.random.default_rng(seed)
    names = [n for n in sorted({**UNARY_FLOAT_MATH, **UNARY_ANY, **BINARY}) if n not in (
        "bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
        "bitwise_right_shift", "logical_not", "logical_and",
        "logical_or", "logical_xor", "isnan", "isinf", "isfinite", "isposinf", "isneginf",
        "signbit", "eq", "ne", "lt", "le", "gt", "ge")]  # fmt: skip
    chain = [str(c) for c in g.choice(names, size=6)]

    def fn(x, y):
        for name in chain:
            x = BINARY[name](x, y) if name in BINARY else SAMPLES[name](x)
            x = x.clamp(-50, 50)  # keeps the chain's values finite
        return x

    backend = run_compiled(fn, rand(6, 13, seed=seed), rand(13, seed=seed + 1), tol=(1e-4, 1e-4))
    (report,) = backend.reports
    assert len(report.parts) == 1 and report.eager_nodes == 0, chain


def test_issue_example_compiles_to_one_part():
    backend = run_compiled(lambda x: (x.sin() * 2 + x.cos()).relu().sum(-1), rand(8, 16))
    (report,) = backend.reports
    assert len(report.parts) == 1 and report.eager_nodes == 0


def test_math_accuracy_on_wide_ranges():
    """The vectorized float32 math stays within a few ulp of float64 over wide arguments."""
    x = kiln.linspace(-200.0, 200.0, 40001)
    for name, ref in [("sin", np.sin), ("cos", np.cos), ("atan", np.arctan),
                      ("expm1", np.expm1), ("asinh", np.arcsinh)]:  # fmt: skip
        kiln.compiler.reset()
        out = kiln.compile(SAMPLES[name], backend=CpuBackend(fallback=False))(x).numpy()
        with np.errstate(over="ignore"):  # expm1 overflows float32 like the kernel
            want = ref(x.double().numpy()).astype(np.float32)
        np.testing.assert_allclose(out, want, rtol=4e-6, atol=4e-7, err_msg=name)


def test_special_values():
    x = kiln.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1.5, -2.5, 2.5, 1e30])
    for name in ("sign", "round", "signbit", "isnan", "isinf", "isfinite", "nan_to_num", "clamp",
                 "hardtanh", "softshrink", "threshold", "relu", "floor", "ceil", "trunc"):
        run_compiled(SAMPLES[name], x)
    ref = kiln.round(kiln.tensor([0.125, 1.25, -2.675]), decimals=2)
    strict = CpuBackend(fallback=False)  # a decline raises: the compiled kernel is what runs
    out = kiln.compile(lambda t: t.round(decimals=2), backend=strict)(
        kiln.tensor([0.125, 1.25, -2.675]))
    assert_same(out, ref, TOL[kiln.float32])


@pytest.mark.parametrize("p", [2, 1, 0, 3, 0.5, math.inf, -math.inf, "fro"])
def test_norm_orders(p):
    x = rand(4, 9) * 3
    x[0, 2] = 0.0
    backend = run_compiled(lambda t: t.norm(p=p) + kiln.norm(t, p, dim=(0,), keepdim=True), x)
    assert backend.reports[0].eager_nodes == 0


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_and_rms_norm(reduction):
    x, t, w = rand(6, 10), rand(6, 10, seed=1), rand(10, seed=2)
    for fn in (lambda a, b, c: F.mse_loss(a, b, reduction=reduction),
               lambda a, b, c: F.l1_loss(a, b, reduction=reduction),
               lambda a, b, c: F.rms_norm(a, (10,), c, eps=1e-5) + F.rms_norm(a.t(), (6,)).t()):
        backend = run_compiled(fn, x, t, w)
        assert backend.reports[0].eager_nodes == 0
    backend = run_compiled(lambda a, b: F.mse_loss(a, b, reduction=reduction),
                           rand(4, 3, dtype=kiln.float16), rand(4, 3, dtype=kiln.float16))
    assert backend.reports[0].eager_nodes == 0


def _bitwise_like_eager(fn, *args):
    """Compiled (strictly: a decline raises) equals eager, signs of zeros and NaN positions
    included."""
    kiln.compiler.reset()
    out, ref = kiln.compile(fn, backend=CpuBackend(fallback=False))(*args), fn(*args)
    o, r = out.double().numpy(), ref.double().numpy()
    assert out.dtype == ref.dtype
    np.testing.assert_array_equal(np.signbit(o), np.signbit(r))
    np.testing.assert_allclose(o, r, rtol=3e-6, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [kiln.float32, kiln.bfloat16, kiln.float16], ids=str)
def test_edge_values_of_the_vectorized_math(dtype):
    big = [1e9, 3e9, 1e20, -1e30, 1e8, 2.0**30, -0.0, 0.0, 123456.7, math.inf, math.nan, 0.5]
    x = kiln.tensor(big * 2).to(dtype)
    _bitwise_like_eager(lambda t: t.sin(), x)
    _bitwise_like_eager(lambda t: t.cos(), x)
    y = kiln.tensor([-math.inf, -math.inf, -3.5, -0.0, math.inf, 0.0, -0.0, 1.0] * 2).to(dtype)
    z = kiln.tensor([math.inf, -math.inf, -math.inf, -2.0, math.inf, -0.0, 0.0, 0.0] * 2).to(dtype)
    _bitwise_like_eager(lambda a, b: kiln.atan2(a, b), y, z)
    _bitwise_like_eager(lambda t: t.asin() + t.acos(), kiln.tensor([-1.0, 1.0, 0.5, -0.0] * 4).to(
        dtype))
    _bitwise_like_eager(lambda a, b: kiln.hypot(a, b),
                        kiln.tensor([math.inf, math.nan, 3.0] * 3).to(dtype),
                        kiln.tensor([math.nan, -math.inf, 4.0] * 3).to(dtype))


def test_integer_edges():
    a = kiln.tensor([1e200, 1e-200, 0.0, -3.0], dtype=kiln.float64)
    _bitwise_like_eager(lambda t: kiln.hypot(t, t), a)
    u = kiln.tensor([7, 7, 3, 2], dtype=kiln.uint8)
    _bitwise_like_eager(lambda b, e: b ** e, u, kiln.tensor([128, 255, 200, 9], dtype=kiln.uint8))
    empty = kiln.zeros(3, 0, dtype=kiln.uint8)
    _bitwise_like_eager(lambda t: t.all(1) + t.all() + t.any(1), empty)


def test_max_and_min_of_every_element_are_reductions():
    """x.max() / kiln.min(x) with no dim reduce everything; the binary and dim forms (maximum,
    (values, indices)) keep their own meaning."""
    x, y = rand(4, 9), rand(9, seed=1)
    backend = run_compiled(lambda a, b: a.abs().max() + kiln.min(a) + kiln.max(a, b).sum(), x, y)
    assert backend.reports[0].eager_nodes == 0
    out = kiln.compile(lambda a: a.max(1))(x)  # (values, indices), as a named tuple
    assert kiln.equal(out.values, x.max(1).values) and kiln.equal(out.indices, x.max(1).indices)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_max_and_min_along_a_dim_give_values_and_indices(dtype):
    """max(x, dim) / min(x, dim) are an amax and an argmax node fused into one kernel: through
    [0]/[1], unpacking and .values/.indices, with keepdim; ties give the first position and NaN
    wins, as in eager."""
    x = _inputs((4, 9), dtype)
    if dtype.is_floating_point:
        x[1, 3], x[2, 0] = float("nan"), float("inf")
    x[3, :] = x[3, 0]  # a row of ties
    cases = [lambda x: x.max(-1)[0] * 2 if x.dtype != kiln.bool else x.max(-1)[0],
             lambda x: x.max(dim=1).indices + 1,
             lambda x: tuple(kiln.min(x, 0, keepdim=True)),
             lambda x: (lambda v, i: (v, i * 2))(*x.min(1))]
    for fn in cases:
        backend = run_compiled(fn, x)
        (report,) = backend.reports
        assert report.eager_nodes == 0 and report.infos[0]["kernels"] == 1

"""Binary and unary arithmetic (add ... pow, neg/abs/sign ...), compared with PyTorch."""

import math
import operator

import pytest
import torch
from conftest import DTYPES, FLOAT_DTYPES, INT_DTYPES, assert_close, make, to_kiln

import kiln


def mirror(kfn, tfn, kargs, targs):
    """kfn(*kargs) must match tfn(*targs), or raise the same exception type torch raises."""
    try:
        expected = tfn(*targs)
    except Exception as e:  # torch rejects the input: kiln must too, with the same type
        with pytest.raises(type(e)):
            kfn(*kargs)
        return None
    got = kfn(*kargs)
    assert_close(got, expected)
    return got


def nonzero_pair(shape, dtype, seed):
    """A divisor without zeros (integer division by zero raises)."""
    t, _ = make(shape, dtype, seed=seed)
    if dtype != "bool":
        t = torch.where(t == 0, torch.ones_like(t), t)
    return t, to_kiln(t)


def special_floats(dtype):
    vals = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 7.0,
            -7.0, 1e-3, 3.75]
    t = torch.tensor(vals, dtype=getattr(torch, dtype))
    return t, to_kiln(t)


BINARY = {
    "add": (kiln.add, torch.add),
    "sub": (kiln.sub, torch.sub),
    "mul": (kiln.mul, torch.mul),
    "div": (kiln.div, torch.div),
    "true_divide": (kiln.true_divide, torch.true_divide),
    "floor_divide": (kiln.floor_divide, torch.floor_divide),
    "div_trunc": (lambda a, b: kiln.div(a, b, rounding_mode="trunc"),
                  lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    "div_floor": (lambda a, b: kiln.div(a, b, rounding_mode="floor"),
                  lambda a, b: torch.div(a, b, rounding_mode="floor")),
    "remainder": (kiln.remainder, torch.remainder),
    "fmod": (kiln.fmod, torch.fmod),
    "pow": (kiln.pow, torch.pow),
    "float_power": (kiln.float_power, torch.float_power),
    "atan2": (kiln.atan2, torch.atan2),
    "hypot": (kiln.hypot, torch.hypot),
    "maximum": (kiln.maximum, torch.maximum),
    "minimum": (kiln.minimum, torch.minimum),
    "fmax": (kiln.fmax, torch.fmax),
    "fmin": (kiln.fmin, torch.fmin),
}
DIVISIONS = {"floor_divide", "div_trunc", "div_floor", "remainder", "fmod"}


def binary_inputs(op, dtype, a_shape=(3, 4), b_shape=(4,)):
    ta, ka = make(a_shape, dtype, seed=1)
    if op in DIVISIONS:
        tb, kb = nonzero_pair(b_shape, dtype, seed=2)
    elif op in ("pow", "float_power") and dtype in INT_DTYPES:
        tb = torch.randint(0, 4, b_shape, generator=torch.Generator().manual_seed(2))
        tb = tb.to(getattr(torch, dtype))
        kb = to_kiln(tb)
    else:
        tb, kb = make(b_shape, dtype, seed=2)
    return ta, ka, tb, kb


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", BINARY)
def test_binary_matches_torch(op, dtype):
    kfn, tfn = BINARY[op]
    ta, ka, tb, kb = binary_inputs(op, dtype)
    mirror(kfn, tfn, (ka, kb), (ta, tb))


@pytest.mark.parametrize("op", BINARY)
def test_binary_non_contiguous_zero_size_and_0d(op):
    kfn, tfn = BINARY[op]
    ta, ka, tb, kb = binary_inputs(op, "float32", (4, 3), (3, 4))
    mirror(kfn, tfn, (ka.t(), kb), (ta.t(), tb))
    # Stepped slices on both sides (strides 2 in the last dim).
    mirror(kfn, tfn, (ka.t()._slice(1, 0, None, 2), kb._slice(1, 1, None, 2)),
           (ta.t()[:, ::2], tb[:, 1::2]))
    tz, kz = make((0, 3), "float32")
    mirror(kfn, tfn, (kz, kb.select(0, 0)), (tz, tb[0]))
    t0, k0 = make((), "float32", seed=5)
    mirror(kfn, tfn, (k0, kb), (t0, tb))
    mirror(kfn, tfn, (k0, k0), (t0, t0))


@pytest.mark.parametrize(
    "pair",
    [("int32", "float32"), ("int64", "int8"), ("uint8", "int8"), ("bool", "int16"),
     ("float16", "bfloat16"), ("float32", "float64"), ("bool", "float16"), ("int64", "float16")],
)
@pytest.mark.parametrize("op", BINARY)
def test_binary_mixed_dtypes_promote_like_torch(op, pair):
    kfn, tfn = BINARY[op]
    ta, ka, _, _ = binary_inputs(op, pair[0])
    _, _, tb, kb = binary_inputs(op, pair[1])
    mirror(kfn, tfn, (ka, kb), (ta, tb))
    mirror(kfn, tfn, (kb, ka), (tb, ta))


OPERATORS = {
    "+": (lambda a, b: a + b),
    "-": (lambda a, b: a - b),
    "*": (lambda a, b: a * b),
    "/": (lambda a, b: a / b),
    "//": (lambda a, b: a // b),
    "%": (lambda a, b: a % b),
    "**": (lambda a, b: a**b),
}


@pytest.mark.parametrize("scalar", [3, 2.5, -2, True, -0.5])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "uint8", "bool"])
@pytest.mark.parametrize("op", OPERATORS)
def test_operators_with_python_scalars(op, dtype, scalar):
    f = OPERATORS[op]
    tt, kt = nonzero_pair((5,), dtype, seed=3)
    mirror(f, f, (kt, scalar), (tt, scalar))
    mirror(f, f, (scalar, kt), (scalar, tt))


@pytest.mark.parametrize("op", OPERATORS)
def test_inplace_operators_and_methods(op):
    f = OPERATORS[op]
    names = {"+": "add_", "-": "sub_", "*": "mul_", "/": "div_", "//": "floor_divide_",
             "%": "remainder_", "**": "pow_"}
    for dtype in ["float32", "int64", "float16"]:
        ta, ka = make((3, 4), dtype, seed=1)
        tb, kb = nonzero_pair((4,), dtype, seed=2)
        if op == "**":
            tb, kb = tb.abs(), kb.abs()
        expected = f(ta, tb) if op != "/" or dtype != "int64" else None
        before = ka
        if expected is None:
            with pytest.raises(RuntimeError, match="can't be cast"):
                getattr(ka, names[op])(kb)
            continue
        iop = {"+": operator.iadd, "-": operator.isub, "*": operator.imul,
               "/": operator.itruediv, "//": operator.ifloordiv, "%": operator.imod,
               "**": operator.ipow}[op]
        assert iop(ka, kb) is before
        assert_close(ka, expected)
        ta, ka = make((3, 4), dtype, seed=1)
        out = getattr(ka, names[op])(kb)
        assert out is ka
        assert_close(ka, expected)


def test_inplace_into_a_view_writes_the_base():
    tt, kt = make((3, 4), "float32")
    kt.t().mul_(2)
    tt.t().mul_(2)
    assert_close(kt, tt)
    kv = kt.select(1, 2)
    kv += 1
    tt.select(1, 2).add_(1)
    assert_close(kt, tt)


def test_inplace_shape_and_cast_errors():
    _, a = make((4,), "float32")
    _, b = make((3, 4), "float32")
    with pytest.raises(RuntimeError, match=r"add_: output with shape \[4\] doesn't match"):
        a.add_(b)
    _, i = make((4,), "int32")
    with pytest.raises(RuntimeError, match="result type float32 can't be cast.*int32"):
        i.mul_(1.5)
    _, bb = make((4,), "bool")
    with pytest.raises(RuntimeError, match="can't be cast"):
        bb.add_(1)


@pytest.mark.parametrize("alpha", [2, -1, 0.5, 1])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bfloat16", "float64"])
def test_add_sub_alpha(dtype, alpha):
    ta, ka = make((3, 4), dtype, seed=1)
    tb, kb = make((4,), dtype, seed=2)
    for kfn, tfn in [(kiln.add, torch.add), (kiln.sub, torch.sub), (kiln.rsub, torch.rsub)]:
        mirror(lambda a, b: kfn(a, b, alpha=alpha), lambda a, b: tfn(a, b, alpha=alpha),
               (ka, kb), (ta, tb))
    mirror(lambda a, b: a.add(b, alpha=alpha), lambda a, b: a.add(b, alpha=alpha),
           (ka, kb), (ta, tb))
    mirror(lambda a, b: kiln.add(a, 3, alpha=alpha), lambda a, b: torch.add(a, 3, alpha=alpha),
           (ka, kb), (ta, tb))
    ka2 = ka.clone()
    if dtype == "int64" and isinstance(alpha, float):
        with pytest.raises(RuntimeError, match="alpha must not be a floating point"):
            ka2.sub_(kb, alpha=alpha)
        return
    ka2.sub_(kb, alpha=alpha)
    assert_close(ka2, ta.sub(tb, alpha=alpha))


def test_bool_arithmetic_rules():
    ta, ka = make((6,), "bool", seed=1)
    tb, kb = make((6,), "bool", seed=2)
    assert_close(ka + kb, ta + tb)
    assert_close(ka * kb, ta * tb)
    with pytest.raises(RuntimeError, match="bool tensor is not supported"):
        ka - kb
    with pytest.raises(RuntimeError, match="negation, the `-` operator, on a bool tensor"):
        kiln.neg(ka)
    assert_close(ka / kb, ta / tb)


def test_integer_division_by_zero_raises():
    _, a = make((4,), "int32")
    zero = kiln.from_numpy(__import__("numpy").array([1, 0, 2, 3], dtype="int32"))
    for f in [lambda: a // zero, lambda: a % zero, lambda: kiln.fmod(a, zero),
              lambda: kiln.div(a, zero, rounding_mode="trunc"), lambda: a // 0,
              lambda: kiln.div(a, 0, rounding_mode="floor")]:
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            f()
    # Float division by zero is IEEE: inf / nan, like torch.
    tf, kf = make((4,), "float32")
    assert_close(kf / 0, tf / 0)
    assert_close(kf // 0.0, tf // 0.0)
    assert_close(kf % 0.0, tf % 0.0)


def test_integer_minimum_divided_by_minus_one_wraps():
    for dtype in ["int8", "int16", "int32", "int64"]:
        info = torch.iinfo(getattr(torch, dtype))
        t = torch.tensor([info.min, info.max, -7, 7], dtype=getattr(torch, dtype))
        m = torch.full((4,), -1, dtype=getattr(torch, dtype))
        k, km = to_kiln(t), to_kiln(m)
        assert_close(k // km, torch.floor_divide(t, m))
        assert_close(k % km, t % m)
        assert_close(kiln.fmod(k, km), torch.fmod(t, m))
        # torch itself traps (SIGFPE) on trunc-dividing the minimum by -1; the quotient is exact,
        # so floor division is the oracle.
        assert_close(kiln.div(k, km, rounding_mode="trunc"), torch.floor_divide(t, m))


def test_div_rounding_mode_errors_and_kwargs():
    ta, ka = make((3,), "float32")
    with pytest.raises(ValueError, match="rounding_mode.*'round'"):
        kiln.div(ka, 2, rounding_mode="round")
    assert_close(ka.div(2, rounding_mode="floor"), ta.div(2, rounding_mode="floor"))
    assert_close(kiln.divide(ka, 2, rounding_mode=None), torch.divide(ta, 2))
    k2 = ka.clone()
    k2.div_(2, rounding_mode="trunc")
    assert_close(k2, ta.div(2, rounding_mode="trunc"))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_division_family_special_values(dtype):
    ta, ka = special_floats(dtype)
    tb, kb = ta.flip(0), to_kiln(ta.flip(0))
    for name in ["div", "floor_divide", "div_trunc", "div_floor", "remainder", "fmod", "pow",
                 "atan2", "hypot", "maximum", "minimum", "fmax", "fmin"]:
        kfn, tfn = BINARY[name]
        mirror(kfn, tfn, (ka, kb), (ta, tb))


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 0.5, -0.5, -1, -2, 1.7, -3, 10])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int32", "int8",
                                   "uint8", "bool"])
def test_pow_scalar_exponent(dtype, exponent):
    tt, kt = make((7,), dtype, seed=4)
    mirror(lambda a: a**exponent, lambda a: a**exponent, (kt,), (tt,))
    mirror(lambda a: kiln.pow(a, exponent), lambda a: torch.pow(a, exponent), (kt,), (tt,))


def test_pow_rules():
    ti, ki = make((5,), "int64")
    with pytest.raises(RuntimeError, match="negative integer powers"):
        ki**-1
    with pytest.raises(RuntimeError, match="negative integer powers"):
        kiln.pow(ki, -2)
    # Tensor exponents may be negative: 1 / a truncated, as torch computes it.
    base = torch.tensor([1, -1, 2, -2, 0, 5, -1], dtype=torch.int32)
    exp = torch.tensor([-1, -3, -2, 3, 2, 0, -4], dtype=torch.int32)
    assert_close(to_kiln(base) ** to_kiln(exp), base**exp)
    # Number ** tensor (reflected) and kiln.pow(number, tensor).
    tf, kf = make((5,), "float32")
    for base_scalar in [2, 2.5, -1.5]:
        assert_close(base_scalar**kf, base_scalar**tf)
        assert_close(kiln.pow(base_scalar, kf), torch.pow(base_scalar, tf))
        assert_close(base_scalar**ki.abs(), base_scalar**ti.abs())
    tb, kb = make((2,), "bool")
    with pytest.raises(NotImplementedError, match="pow: not implemented for dtype bool"):
        kb**kb
    # x ** 0 and x ** 1 need no kernel, so torch (and kiln) allow them for bool too.
    assert_close(kb**True, tb**True)
    assert_close(kb**False, tb**False)
    # Large integer powers wrap like torch's.
    big = torch.tensor([3, 7, -5], dtype=torch.int64)
    assert_close(to_kiln(big) ** 41, big**41)
    assert_close(to_kiln(big.to(torch.int8)) ** 9, big.to(torch.int8) ** 9)


def test_pow_inplace_and_keyword():
    tt, kt = make((4,), "float32", seed=2)
    assert_close(kt.pow(exponent=2), tt.pow(exponent=2))
    assert_close(kiln.pow(kt, exponent=3), torch.pow(tt, exponent=3))
    k2 = kt.clone()
    k2 **= 2
    assert_close(k2, tt**2)


def test_integer_overflow_wraps_like_torch():
    t = torch.tensor([127, -128, 100], dtype=torch.int8)
    k = to_kiln(t)
    assert_close(k + k, t + t)
    assert_close(k * k, t * t)
    assert_close(k - 100, t - 100)
    big = torch.tensor([2**62, -(2**63)], dtype=torch.int64)
    kb = to_kiln(big)
    assert_close(kb + kb, big + big)
    assert_close(kb * 3, big * 3)
    assert_close(-kb, -big)
    assert_close(kiln.abs(kb), torch.abs(big))


UNARY = ["neg", "negative", "abs", "absolute", "sign", "sgn", "reciprocal", "square", "positive"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", UNARY)
def test_unary_arith_matches_torch(name, dtype):
    tt, kt = make((3, 5), dtype)
    kfn, tfn = getattr(kiln, name), getattr(torch, name)
    mirror(kfn, tfn, (kt,), (tt,))
    mirror(kfn, tfn, (kt.t(),), (tt.t(),))
    mirror(lambda a: getattr(a, name)(), lambda a: getattr(a, name)(), (kt,), (tt,))
    if dtype in FLOAT_DTYPES:
        ts, ks = special_floats(dtype)
        mirror(kfn, tfn, (ks,), (ts,))


@pytest.mark.parametrize("name", ["neg", "abs", "sign", "reciprocal", "square"])
@pytest.mark.parametrize("dtype", ["float32", "int16", "bool"])
def test_unary_arith_inplace(name, dtype):
    tt, kt = make((3, 5), dtype)
    try:
        expected = getattr(tt.clone(), name + "_")()
    except Exception as e:
        with pytest.raises(type(e)):
            getattr(kt, name + "_")()
        return
    out = getattr(kt, name + "_")()
    assert out is kt
    assert_close(kt, expected)


def test_unary_operators():
    tt, kt = make((2, 3), "float32")
    assert_close(-kt, -tt)
    assert_close(+kt, +tt)
    assert_close(abs(kt), abs(tt))
    ti, ki = make((2, 3), "int8")
    assert_close(abs(ki), abs(ti))
    with pytest.raises(NotImplementedError, match="abs: not implemented for dtype bool"):
        abs(make((2,), "bool")[1])


def test_out_argument():
    ta, ka = make((3, 4), "float32", seed=1)
    tb, kb = make((4,), "float32", seed=2)
    out = kiln.from_numpy(__import__("numpy").zeros((3, 4), "float64"))
    r = kiln.add(ka, kb, out=out)
    assert r is out and out.dtype == kiln.float64
    assert_close(out, (ta + tb).double())
    r = kiln.exp(ka, out=out)
    # computed in float32 (within an ulp of torch's float32 exp), then written into float64
    assert_close(out, ta.exp().double(), rtol=2e-7, atol=0)
    with pytest.raises(RuntimeError, match="out= tensor has shape"):
        kiln.mul(ka, kb, out=kb)
    iout = kiln.from_numpy(__import__("numpy").zeros((3, 4), "int32"))
    with pytest.raises(RuntimeError, match="can't be cast"):
        kiln.div(ka, kb, out=iout)


def test_unsupported_operands_are_type_errors():
    _, ka = make((3,), "float32")
    with pytest.raises(TypeError):
        ka + "x"
    with pytest.raises(TypeError):
        ka * [1, 2]
    expected = r"add\(\): argument 'other' \(position 2\) must be Tensor, not str"
    with pytest.raises(TypeError, match=expected):
        kiln.add(ka, "x")
    assert (ka == None) is False  # noqa: E711 - tensor == None is False, like torch
    assert (ka != None) is True  # noqa: E711


def test_numpy_scalars_act_as_numbers():
    import numpy as np

    tt, kt = make((4,), "float16")
    assert_close(kt * np.float32(2.5), tt * 2.5)
    assert_close(kt + np.int64(3), tt + 3)


def test_broadcast_error_names_op_and_shapes():
    _, a = make((2, 3), "float32")
    _, b = make((4,), "float32")
    for f in [kiln.mul, kiln.pow, kiln.maximum, kiln.remainder, kiln.atan2]:
        with pytest.raises(RuntimeError, match=r"\[2, 3\] and \[4\]"):
            f(a, b)


def test_large_tensors_run_in_parallel_and_match():
    ta, ka = make((300, 257), "float32", seed=1)
    tb, kb = make((257,), "float32", seed=2)
    assert_close(ka * kb - ka / 3.0, ta * tb - ta / 3.0)
    assert_close(ka.t() ** 2, ta.t() ** 2)
    assert_close(kiln.remainder(ka, 1.25), torch.remainder(ta, 1.25))
    assert math.isfinite(float(kiln.hypot(ka, kb).numpy().sum()))

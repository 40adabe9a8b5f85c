"""Unary math, rounding, classification, nan_to_num, clamp, where and lerp vs PyTorch."""

import numpy as np
import pytest
import torch
from conftest import DTYPES, FLOAT_DTYPES, INT_DTYPES, assert_close, make, to_kiln

import kiln


def mirror(kfn, tfn, kargs, targs, **tol):
    """kfn(*kargs) must match tfn(*targs), or raise the same exception type torch raises."""
    try:
        expected = tfn(*targs)
    except Exception as e:
        with pytest.raises(type(e)):
            kfn(*kargs)
        return None
    got = kfn(*kargs)
    assert_close(got, expected, **tol)
    return got


def specials(dtype):
    vals = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5,
            0.999, -1.0, 1.0, 3.0, 1e-4, 40.0, -40.0]
    t = torch.tensor(vals, dtype=getattr(torch, dtype))
    return t, to_kiln(t)


FLOAT_FUNCS = ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin",
               "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh",
               "atanh", "sigmoid", "erf", "erfc", "arcsin", "arccos", "arctan", "arcsinh",
               "arccosh", "arctanh"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", FLOAT_FUNCS)
def test_float_functions_match_torch(name, dtype):
    # Values in (-1.5, 1.5) cover every function's interesting range without overflow; the
    # acosh/log domains see NaNs on both sides, which assert_close treats as equal.
    tt, kt = make((3, 5), dtype, low=-1.5, high=1.5)
    kfn, tfn = getattr(kiln, name), getattr(torch, name)
    mirror(kfn, tfn, (kt,), (tt,))
    mirror(kfn, tfn, (kt.t(),), (tt.t(),))
    mirror(lambda a: getattr(a, name)(), lambda a: getattr(a, name)(), (kt,), (tt,))
    if dtype in FLOAT_DTYPES:
        ts, ks = specials(dtype)
        mirror(kfn, tfn, (ks,), (ts,))


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sigmoid", "tanh", "erf"])
def test_float_functions_inplace_zero_size_0d_and_large(name):
    tt, kt = make((4, 6), "float32", low=0.1, high=2.0)
    k = kt.clone()
    assert getattr(k, name + "_")() is k
    assert_close(k, getattr(tt, name)())
    _, ki = make((4,), "int64")
    with pytest.raises(RuntimeError, match="can't be cast"):
        getattr(ki, name + "_")()
    tz, kz = make((0, 3), "float64")
    assert_close(getattr(kiln, name)(kz), getattr(torch, name)(tz))
    t0, k0 = make((), "bfloat16")
    mirror(getattr(kiln, name), getattr(torch, name), (k0,), (t0,))
    tl, kl = make((257, 301), "float16", low=0.1, high=2.0)
    assert_close(getattr(kiln, name)(kl.t()), getattr(torch, name)(tl.t()))


def test_integer_inputs_follow_the_default_dtype():
    ti, ki = make((5,), "int32")
    kiln.set_default_dtype(kiln.float64)
    torch.set_default_dtype(torch.float64)
    try:
        assert_close(kiln.exp(ki), torch.exp(ti))
        assert_close(ki / 2, ti / 2)
        assert_close(kiln.sigmoid(ki), torch.sigmoid(ti))
    finally:
        kiln.set_default_dtype(kiln.float32)
        torch.set_default_dtype(torch.float32)


ROUNDING = ["floor", "ceil", "trunc", "fix", "round", "frac"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ROUNDING)
def test_rounding_matches_torch(name, dtype):
    tt, kt = make((3, 5), dtype, low=-4, high=4)
    kfn, tfn = getattr(kiln, name), getattr(torch, name)
    mirror(kfn, tfn, (kt,), (tt,))
    mirror(kfn, tfn, (kt.t(),), (tt.t(),))
    if dtype in FLOAT_DTYPES:
        ts, ks = specials(dtype)
        mirror(kfn, tfn, (ks,), (ts,))
        k, t = kt.clone(), tt.clone()
        getattr(k, name + "_")()
        getattr(t, name + "_")()
        assert_close(k, t)


@pytest.mark.parametrize("decimals", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_decimals(dtype, decimals):
    tt, kt = make((4, 5), dtype, low=-300, high=300)
    mirror(lambda a: kiln.round(a, decimals=decimals), lambda a: torch.round(a, decimals=decimals),
           (kt,), (tt,))
    mirror(lambda a: a.round(decimals=decimals), lambda a: a.round(decimals=decimals),
           (kt,), (tt,))


def test_round_half_to_even():
    t = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 0.125, 0.375])
    k = to_kiln(t)
    assert_close(kiln.round(k), torch.round(t))
    assert_close(kiln.round(k, decimals=2), torch.round(t, decimals=2))


CLASSIFY = ["isnan", "isinf", "isfinite", "isposinf", "isneginf", "signbit"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", CLASSIFY)
def test_classification(name, dtype):
    if dtype in FLOAT_DTYPES:
        tt, kt = specials(dtype)
    else:
        tt, kt = make((9,), dtype)
    mirror(getattr(kiln, name), getattr(torch, name), (kt,), (tt,))
    mirror(lambda a: getattr(a, name)(), lambda a: getattr(a, name)(), (kt,), (tt,))
    tz, kz = make((2, 0), dtype)
    mirror(getattr(kiln, name), getattr(torch, name), (kz,), (tz,))


@pytest.mark.parametrize("kwargs", [{}, {"nan": 1.5}, {"posinf": 7.0, "neginf": -8.0},
                                    {"nan": -1.0, "posinf": 1e30}])
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_to_num(dtype, kwargs):
    tt, kt = specials(dtype) if dtype in FLOAT_DTYPES else make((6,), dtype)
    mirror(lambda a: kiln.nan_to_num(a, **kwargs), lambda a: torch.nan_to_num(a, **kwargs),
           (kt,), (tt,))
    mirror(lambda a: a.nan_to_num(**kwargs), lambda a: a.nan_to_num(**kwargs), (kt,), (tt,))
    k, t = kt.clone(), tt.clone()
    k.nan_to_num_(**kwargs)
    t.nan_to_num_(**kwargs)
    assert_close(k, t)


CLAMP_BOUNDS = [(-1, 1), (0.5, None), (None, 2), (-1.5, 1.5), (2, -2), (True, None)]


@pytest.mark.parametrize("bounds", CLAMP_BOUNDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_clamp_scalar_bounds(dtype, bounds):
    lo, hi = bounds
    tt, kt = make((3, 5), dtype)
    if dtype in FLOAT_DTYPES:
        tt[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
        kt = to_kiln(tt)
    for kfn, tfn in [(kiln.clamp, torch.clamp), (kiln.clip, torch.clip)]:
        mirror(lambda a: kfn(a, lo, hi), lambda a: tfn(a, lo, hi), (kt,), (tt,))
        mirror(lambda a: kfn(a.t(), min=lo, max=hi), lambda a: tfn(a.t(), min=lo, max=hi),
               (kt,), (tt,))
    mirror(lambda a: a.clamp(min=lo, max=hi), lambda a: a.clamp(min=lo, max=hi), (kt,), (tt,))
    k, t = kt.clone(), tt.clone()
    mirror(lambda a: a.clamp_(lo, hi), lambda a: a.clamp_(lo, hi), (k,), (t,))
    if lo is not None:
        mirror(lambda a: kiln.clamp_min(a, lo), lambda a: torch.clamp_min(a, lo), (kt,), (tt,))
    if hi is not None:
        mirror(lambda a: a.clamp_max(hi), lambda a: a.clamp_max(hi), (kt,), (tt,))


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8", "float64"])
def test_clamp_tensor_bounds_broadcast_and_promote(dtype):
    tt, kt = make((3, 4), dtype)
    tlo, klo = make((4,), "float32", seed=5, low=-3, high=0)
    thi, khi = make((3, 1), dtype, seed=6, low=0, high=3)
    mirror(kiln.clamp, torch.clamp, (kt, klo, khi), (tt, tlo, thi))
    mirror(lambda a, b: kiln.clamp(a, min=b), lambda a, b: torch.clamp(a, min=b), (kt, klo),
           (tt, tlo))
    mirror(lambda a, b: kiln.clamp(a, max=b), lambda a, b: torch.clamp(a, max=b), (kt, khi),
           (tt, thi))
    mirror(lambda a, b: a.clamp_max(b), lambda a, b: a.clamp_max(b), (kt, khi), (tt, thi))
    t0, k0 = make((), dtype, seed=7)
    mirror(kiln.clamp, torch.clamp, (kt, k0, None), (tt, t0, None))
    mirror(kiln.clamp, torch.clamp, (k0, klo, khi), (t0, tlo, thi))


def test_clamp_nan_bounds_and_errors():
    tt, kt = make((6,), "float32")
    tn = torch.tensor([float("nan"), 0.0, 1.0, float("nan"), -1.0, 2.0])
    assert_close(kiln.clamp(kt, min=to_kiln(tn)), torch.clamp(tt, min=tn))
    assert_close(kiln.clamp(kt, max=float("nan")), torch.clamp(tt, max=float("nan")))
    with pytest.raises(RuntimeError, match="at least one of 'min' or 'max' must not be None"):
        kiln.clamp(kt)
    _, ki8 = make((3,), "int8")
    with pytest.raises(RuntimeError, match="cannot be converted to type int8"):
        kiln.clamp(ki8, min=-1000)
    with pytest.raises(NotImplementedError, match="clamp: not implemented for dtype bool"):
        kiln.clamp(make((3,), "bool")[1], True)
    _, kf = make((3,), "int64")
    with pytest.raises(RuntimeError, match="can't be cast"):
        kf.clamp_(min=0.5)


@pytest.mark.parametrize("pair", [(d, d) for d in DTYPES] + [("int32", "float32"),
                                                               ("uint8", "int8"),
                                                               ("float16", "bfloat16"),
                                                               ("bool", "int64")])
def test_where_tensors(pair):
    tc, kc = make((3, 1), "bool", seed=3)
    ta, ka = make((3, 4), pair[0], seed=1)
    tb, kb = make((4,), pair[1], seed=2)
    mirror(kiln.where, torch.where, (kc, ka, kb), (tc, ta, tb))
    mirror(kiln.where, torch.where, (kc.t(), ka.t(), kb), (tc.t(), ta.t(), tb))
    mirror(lambda c, a, b: a.where(c, b), lambda c, a, b: a.where(c, b), (kc, ka, kb),
           (tc, ta, tb))


@pytest.mark.parametrize("scalars", [(1, 2), (1.5, 0), (True, False), (2, 2.5)])
@pytest.mark.parametrize("dtype", ["float32", "int16", "bool", "bfloat16"])
def test_where_scalars(dtype, scalars):
    x, y = scalars
    tc, kc = make((2, 3), "bool", seed=3)
    ta, ka = make((2, 3), dtype, seed=1)
    mirror(kiln.where, torch.where, (kc, x, y), (tc, x, y))
    mirror(kiln.where, torch.where, (kc, ka, y), (tc, ta, y))
    mirror(kiln.where, torch.where, (kc, x, ka), (tc, x, ta))


def test_where_condition_rules_and_zero_size():
    tt, kt = make((3,), "float32")
    with pytest.raises(RuntimeError, match="where: expected condition to be a boolean tensor.*"
                                           "float32"):
        kiln.where(kt, kt, kt)
    tz, kz = make((0, 3), "float32")
    assert_close(kiln.where(kz > 0, kz, 1.0), torch.where(tz > 0, tz, 1.0))
    with pytest.raises(RuntimeError, match=r"where: shapes \[2\] and \[3\]"):
        kiln.where(make((2,), "bool")[1], kt, kt)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lerp(dtype):
    ta, ka = make((3, 4), dtype, seed=1)
    tb, kb = make((4,), dtype, seed=2)
    tw, kw = make((3, 1), dtype, seed=3, low=-0.5, high=1.5)
    for w in [0.25, 0.75, -1.0, 2]:
        mirror(kiln.lerp, torch.lerp, (ka, kb, w), (ta, tb, w))
    mirror(kiln.lerp, torch.lerp, (ka, kb, kw), (ta, tb, tw))
    mirror(lambda a, b, w: a.lerp(b, w), lambda a, b, w: a.lerp(b, w), (ka.t(), kb.narrow(0, 0, 3),
           kw.t()), (ta.t(), tb[:3], tw.t()))
    if dtype in FLOAT_DTYPES:
        k, t = ka.clone(), ta.clone()
        k.lerp_(kb, 0.3)
        t.lerp_(tb, 0.3)
        assert_close(k, t)


def test_lerp_dtype_errors():
    _, a = make((3,), "float32")
    _, b = make((3,), "float64")
    with pytest.raises(RuntimeError, match="lerp: expected dtype float32 for `end` but got .*"
                                           "float64"):
        kiln.lerp(a, b, 0.5)
    with pytest.raises(RuntimeError, match="for `weight`"):
        kiln.lerp(a, a, b)
    with pytest.raises(NotImplementedError, match="lerp: not implemented for dtype int64"):
        kiln.lerp(make((2,), "int64")[1], make((2,), "int64")[1], 0.5)


def test_int_inputs_reject_float_only_ops():
    _, ki = make((3,), "int32")
    with pytest.raises(NotImplementedError, match="frac: not implemented for dtype int32"):
        kiln.frac(ki)
    with pytest.raises(NotImplementedError, match="floor: not implemented for dtype bool"):
        kiln.floor(make((3,), "bool")[1])
    for d in INT_DTYPES:
        tt, kt = make((4,), d)
        assert_close(kiln.floor(kt), torch.floor(tt))


def test_where_with_only_a_condition_is_nonzero():
    tt, kt = make((3, 4), "float32")
    got, expected = kiln.where(kt > 0), torch.where(tt > 0)
    assert len(got) == len(expected) == 2
    for g, e in zip(got, expected, strict=True):
        assert_close(g, e)
    with pytest.raises(TypeError, match="where\\(\\) received an invalid combination"):
        kiln.where(kt > 0, kt)


@pytest.mark.parametrize("name", ["exp", "sigmoid", "erf", "tanh"])
def test_vectorized_float32_math_keeps_relative_accuracy(name):
    # The float32 kernels run branch-free polynomials (fast_math_impl.h): near zero and at the
    # range ends they must stay within a few float32 ulp of the exact value, as torch's do.
    rng = np.random.default_rng(3)
    x = np.concatenate(
        [
            rng.standard_normal(20000) * 5,
            rng.standard_normal(2000) * 1e-5,
            [0.0, -0.0, 1e-30, -1e-30, 80.0, -80.0, 88.7, -87.3, 0.999, 1.0, 1.001],
        ]
    ).astype(np.float32)
    ours = getattr(kiln, name)(kiln.tensor(x)).numpy().astype(np.float64)
    exact = getattr(torch, name)(torch.tensor(x.astype(np.float64))).numpy()
    finite = np.isfinite(exact) & (np.abs(exact) > 1e-37)
    rel = np.abs(ours - exact)[finite] / np.abs(exact)[finite]
    assert rel.max() < 5e-7, f"{name}: max relative error {rel.max():.2e}"
    special = np.array([np.inf, -np.inf, np.nan, 100.0, -110.0], dtype=np.float32)
    np.testing.assert_array_equal(
        getattr(kiln, name)(kiln.tensor(special)).numpy(),
        getattr(torch, name)(torch.tensor(special)).numpy(),
    )


def test_float32_expm1_and_elu_are_accurate_across_the_polynomial_switch():
    """expm1 in float32 is a polynomial below |x| = 0.5 and exp(x) - 1 above (vectorized):
    within 2 float32 ulp of float64's expm1 on both sides of the switch, tiny and huge values
    included, and ELU's negative side with it."""
    x = np.concatenate([np.linspace(-2, 2, 40001), [-0.5, 0.5, -0.4999999, 0.4999999, 1e-30,
                                                   -1e-30, 0.0, -0.0, 80.0, -90.0]])
    x32 = x.astype(np.float32)
    want = np.expm1(x32.astype(np.float64))
    got = kiln.expm1(kiln.from_numpy(x32)).numpy().astype(np.float64)
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(got - want) <= 2 * ulp + 1e-45)
    assert np.array_equal(np.signbit(got), np.signbit(want))  # -0.0 stays -0.0
    elu = kiln.nn.functional.elu(kiln.from_numpy(x32), alpha=1.5).numpy().astype(np.float64)
    want_elu = np.where(x32 > 0, x32, 1.5 * want)
    elu_ulp = np.spacing(np.abs(want_elu).astype(np.float32)).astype(np.float64)
    assert np.all(np.abs(elu - want_elu) <= 4 * elu_ulp + 1e-45)

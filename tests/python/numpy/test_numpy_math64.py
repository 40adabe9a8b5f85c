"""float64 exp and log in compiled kernels (codegen/cpu/emit_math64.cc) against NumPy's:
within one ulp everywhere, and exactly NumPy's at the special values (zeros, infinities, NaN,
subnormal results and arguments, the overflow and underflow edges)."""

import numpy as np
import pytest

import kiln

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

SPECIAL_EXP = [0.0, -0.0, np.inf, -np.inf, np.nan, 709.78, 709.79, 710.0, -708.4, -720.0,
               -745.13, -745.14, -746.0, 1e-300, 5e-324, -1e-20, 1.0, -1.0, 0.5 * np.log(2)]
SPECIAL_LOG = [0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 5e-324, 1e-310, 2.2250738585072014e-308,
               1.0, 2.0, 0.5, np.sqrt(0.5), np.sqrt(2.0), 1.7976931348623157e308, 1 - 1e-16]


def _ulps(got, want):
    return np.abs(got.view(np.int64) - want.view(np.int64))


def _check(fn, x):
    want = fn(x)
    report = kiln.explain(lambda a: fn(a))(x)
    assert [c.report.eager_nodes for c in report.captures] == [0]  # the compiled kernel ran
    got = report.result
    assert got.dtype == np.float64
    finite = np.isfinite(want)
    assert _ulps(got[finite], want[finite]).max(initial=0) <= 1
    np.testing.assert_array_equal(got[~finite], want[~finite])


@pytest.mark.parametrize("shape", [(4099,), (3, 37)])  # vector bodies and scalar tails
def test_exp_within_one_ulp(shape):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-750, 720, 20000), rng.uniform(-1, 1, 20000),
                        SPECIAL_EXP])
    _check(np.exp, x)
    _check(np.exp, rng.uniform(-30, 30, shape))


def test_exp_special_values_are_numpys():
    x = np.array(SPECIAL_EXP)
    got = kiln.compile(lambda a: np.exp(a))(x)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(np.exp(x)))
    finite = np.isfinite(np.exp(x))
    assert _ulps(got[finite], np.exp(x)[finite]).max() <= 1
    assert got[2] == np.inf and got[3] == 0.0 and got[7] == np.inf and got[12] == 0.0


def test_log_within_one_ulp():
    rng = np.random.default_rng(1)
    x = np.concatenate([np.exp(rng.uniform(-745, 709, 20000)), rng.uniform(0, 3, 20000),
                        SPECIAL_LOG])
    _check(np.log, x)


def test_sigmoid_like_chain_in_float64():
    """exp inside a fused chain (the softmax and logistic shapes NumPy code writes)."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(64, 100)) * 20

    def fn(a):
        e = np.exp(a - a.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True), 1.0 / (1.0 + np.exp(-a)), np.log1p(np.exp(-a))

    got = kiln.compile(fn)(x)
    for g, w in zip(got, fn(x), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-14, atol=1e-300)

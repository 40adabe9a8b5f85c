"""np.gradient (uniform spacing, edge orders 1 and 2, every axis or some), np.percentile /
np.quantile (the linear method, scalar or list q, axis, keepdims) and np.interp under
kiln.compile: no graph break, NumPy's values, dtypes and shapes, NumPy's errors."""

from __future__ import annotations

import numpy as np
import pytest

import kiln

RNG = np.random.default_rng(0)


def equal_to_numpy(fn, *args):
    kiln.compiler.reset()
    explained = kiln.explain(fn)(*[a.copy() for a in args])
    assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]
    assert all(f == [] for f in explained.fallbacks)  # no node left on an eager kernel
    got, want = kiln.compile(fn)(*args), fn(*args)
    assert type(got) is type(want) or np.isscalar(want)
    for g, w in zip(got if isinstance(want, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("case", [
    lambda f: np.gradient(f),
    lambda f: np.gradient(f, 0.5),
    lambda f: np.gradient(f, edge_order=2),
    lambda f: np.gradient(f, axis=0),
    lambda f: np.gradient(f, 0.1, 2.0),
    lambda f: np.gradient(f, axis=(1,), edge_order=2),
])  # fmt: skip
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_gradient_equals_numpy(case, dtype):
    f = (RNG.standard_normal((7, 9)) * 10).astype(dtype)
    equal_to_numpy(case, f)


def test_gradient_of_a_vector_and_a_too_short_array():
    equal_to_numpy(lambda f: np.gradient(f, 2.0, edge_order=2), RNG.standard_normal(12))
    f = kiln.compile(lambda f: np.gradient(f, edge_order=2))
    with pytest.raises(ValueError, match="too small to calculate a numerical gradient"):
        f(np.ones(2))


@pytest.mark.parametrize("case", [
    lambda x: np.percentile(x, 50),
    lambda x: np.percentile(x, [10, 50, 90]),
    lambda x: np.quantile(x, 0.3),
    lambda x: np.quantile(x, [0.1, 0.9], keepdims=True),
    lambda x: np.percentile(x, [25, 75], axis=1),
    lambda x: np.percentile(x, 30, axis=0, keepdims=True),
    lambda x: np.quantile(x, (0.0, 1.0), axis=-1),
])  # fmt: skip
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32])
def test_percentile_and_quantile_equal_numpy(case, dtype):
    x = (RNG.standard_normal((6, 7)) * 10).astype(dtype)
    equal_to_numpy(case, x)


def test_a_q_out_of_range_raises_numpys_error():
    x = RNG.standard_normal(10)
    for fn, message in ((lambda x: np.percentile(x, [50, 101]), "Percentiles must be in"),
                        (lambda x: np.quantile(x, -0.5), "Quantiles must be in")):
        with pytest.raises(ValueError, match=message):
            fn(x)
        with pytest.raises(ValueError, match=message):
            kiln.compile(fn)(x)


@pytest.mark.parametrize("case", [
    lambda x, xp, fp: np.interp(x, xp, fp),
    lambda x, xp, fp: np.interp(x, xp, fp, left=-1.0, right=2.0),
    lambda x, xp, fp: np.interp(0.5, xp, fp),
    lambda x, xp, fp: np.interp(x.reshape(3, -1), xp, fp * 2),
])  # fmt: skip
def test_interp_equals_numpy(case):
    """Points below, inside and above the samples, exactly on them, and NaN."""
    xp = np.sort(RNG.random(10))
    fp = RNG.standard_normal(10)
    x = np.concatenate([RNG.random(40) * 1.4 - 0.2, xp, [np.nan] * 1])
    equal_to_numpy(case, x[:51], xp, fp)


def test_interp_of_mismatched_samples_raises_numpys_error():
    f = kiln.compile(lambda x, xp, fp: np.interp(x, xp, fp))
    with pytest.raises(ValueError, match="fp and xp are not of the same length"):
        f(np.ones(3), np.arange(4.0), np.ones(3))

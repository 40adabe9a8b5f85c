"""np.convolve and np.correlate under kiln.compile: one conv1d over the longer array, every mode,
either array the longer one (NumPy swaps them), float32 and float64, equal to NumPy; integer
arrays, which kiln does not convolve, run in NumPy at a graph break with NumPy's results."""

from __future__ import annotations

import numpy as np
import pytest

import kiln


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("fn", [np.convolve, np.correlate], ids=["convolve", "correlate"])
@pytest.mark.parametrize("n, m", [(1, 1), (8, 3), (13, 6), (5, 13), (2, 20), (100, 5)])
def test_convolve_and_correlate_equal_numpy(fn, mode, n, m):
    kiln.compiler.reset()  # each case its own entries (the recompile limit would run NumPy)
    rng = np.random.default_rng(n * 31 + m)
    a, v = rng.standard_normal(n), rng.standard_normal(m)

    def f(a, v):
        return fn(a, v, mode=mode)

    explained = kiln.explain(f)(a, v)
    assert explained.graph_break_count == 0 and explained.fallbacks == [[]]
    got, want = kiln.compile(f)(a, v), f(a, v)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_a_moving_average_in_float32_fuses_with_its_neighbours():
    def smooth(x, w=5):
        k = np.ones(w, dtype=np.float32) / w
        return np.convolve(x * 2, k, mode="same") - x

    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    explained = kiln.explain(smooth)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0
    got, want = kiln.compile(smooth)(x), smooth(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_integer_arrays_run_in_numpy():
    a, v = np.arange(6), np.array([1, 2, 1])
    f = kiln.compile(lambda a, v: np.convolve(a, v))
    got = f(a, v)
    np.testing.assert_array_equal(got, np.convolve(a, v))
    assert got.dtype == np.convolve(a, v).dtype


@pytest.mark.parametrize("a, v, message", [
    (np.zeros(0), np.ones(3), "a cannot be empty"),
    (np.ones(3), np.zeros(0), "v cannot be empty"),
    (np.ones((2, 3)), np.ones(2), "object too deep"),
])  # fmt: skip
def test_bad_arrays_raise_numpys_error(a, v, message):
    f = kiln.compile(lambda a, v: np.convolve(a, v))
    with pytest.raises(ValueError, match=message):
        f(a, v)
    with pytest.raises(ValueError, match=message):
        np.convolve(a, v)

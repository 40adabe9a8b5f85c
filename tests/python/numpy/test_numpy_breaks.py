"""Graph breaks in NumPy code: a break at a method call resumes (the bound method is rebuilt),
so later calls run the compiled entry instead of capturing again; what cannot be captured says
what the code raises; a frame that cannot be captured twice is not tried again."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln._capture import convert_frame


def test_a_break_at_a_method_call_resumes_and_is_not_captured_again(monkeypatch):
    def f(x, img):
        y = x * 2
        total = img.sum()  # uint8 sums to uint64, which kiln has no dtype for: a break
        return y, total

    x, img = np.ones(10), np.arange(10, dtype=np.uint8)
    explained = kiln.explain(f)(x, img)
    assert explained.graph_break_count == 1
    captures = []
    real = convert_frame.Compiler.capture

    def counted(self, func, args, code, state, reason):
        captures.append(code.co_name)
        return real(self, func, args, code, state, reason)

    monkeypatch.setattr(convert_frame.Compiler, "capture", counted)
    compiled = kiln.compile(f)
    for _ in range(4):
        y, total = compiled(x, img)
        np.testing.assert_array_equal(y, x * 2)
        assert total == img.sum() and type(total) is type(img.sum())
    assert len(captures) <= 2, captures  # f, and the code after its break: once each


def test_running_extremes_compile():
    x = np.random.default_rng(0).random((4, 5))
    for fn in (lambda a: np.maximum.accumulate(a, axis=0),
               lambda a: np.minimum.accumulate(a, axis=1),
               lambda a: np.maximum.accumulate((a * 10).astype(np.int32), axis=1)):
        got, want = kiln.compile(fn)(x), fn(x)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
        assert kiln.explain(fn)(x).graph_break_count == 0


def test_a_break_names_what_the_code_raises():
    x = np.random.default_rng(0).random((4, 4))
    reasons = [r.reason for r in kiln.explain(lambda a: np.where(a > 0.5))(x).break_reasons]
    assert any("raises NotImplementedError: np.where(condition)" in r for r in reasons), reasons


def test_a_break_at_a_method_of_a_computed_array():
    """The array whose method the break calls was computed by the graph: it is a graph output
    (uint16 has no kiln dtype, so astype breaks)."""
    def f(a):
        return a.astype(np.uint8).astype(np.uint16)

    a = np.arange(5, dtype=np.int32)
    got = kiln.compile(f)(a)
    np.testing.assert_array_equal(got, f(a))
    assert got.dtype == np.uint16


def test_uint8_index_arrays_are_integer_indices():
    """NumPy indexes with a uint8 array as integers (kiln's tensors take uint8 for a mask)."""
    def get(lut, idx):
        return lut[idx]

    def put(a, idx):
        a[idx] = -1
        return a

    lut, idx = np.array([10.0, 20.0, 30.0, 40.0]), np.array([3, 0, 1, 1], dtype=np.uint8)
    np.testing.assert_array_equal(kiln.compile(get)(lut, idx), get(lut, idx))
    np.testing.assert_array_equal(kiln.compile(put)(lut.copy(), idx), put(lut.copy(), idx))
    image = np.array([[3, 200], [7, 255]], dtype=np.uint8)  # a lookup table applied to an image
    np.testing.assert_array_equal(kiln.compile(get)(np.arange(256.0), image),
                                  get(np.arange(256.0), image))


def _guarded_reciprocal(x):
    big = np.iinfo(np.int64).max
    with np.errstate(divide="ignore", invalid="ignore"):
        y = np.where(x > 0, 1.0 / x, 0.0)
    return y, big, np.finfo(x.dtype).eps


def test_errstate_that_silences_warnings_and_dtype_limits_compile():
    """`with np.errstate(divide="ignore")` changes nothing compiled code does (its kernels warn
    about nothing) and np.iinfo/np.finfo limits are constants: no break."""
    x = np.array([0.0, 2.0, 4.0])
    explained = kiln.explain(_guarded_reciprocal)(x)
    assert explained.graph_break_count == 0
    got, want = explained.result, _guarded_reciprocal(x)
    np.testing.assert_array_equal(got[0], want[0])
    assert got[1:] == want[1:]


def _raising(x):
    with np.errstate(divide="raise"):
        return 1.0 / x


def test_errstate_raise_runs_in_numpy():
    with pytest.raises(FloatingPointError):
        kiln.compile(_raising)(np.array([0.0, 1.0]))


def _no_eager_nodes(explained) -> bool:
    """Every captured graph went through kiln's compiler and left no node on an eager kernel."""
    reports = [c.report for c in explained.captures if c.report is not None]
    return bool(reports) and all(r.eager_nodes == 0 for r in reports)


def _pymax_loop(t):
    for i in range(1, t.shape[0]):
        t[i] = max(t[i], t[i - 1]) + 1
    return t


def _pymin_of_three(a, i):
    return min(a[i], a[i + 1], a[i + 2]) * 2, max(a[i + 2], a[i])


@pytest.mark.parametrize("dtype", [np.int32, np.float64])
def test_python_max_and_min_of_array_elements_compile(dtype):
    """`max(t[i], t[i - 1])` (NPBench's nussinov) of elements of one dtype is a select in the
    graph, as Python picks: the first item unless a later one compares greater (less for min),
    so a NaN first stays and a later NaN is skipped."""
    rng = np.random.default_rng(0)
    t = (rng.random(12) * 10).astype(dtype)
    explained = kiln.explain(_pymax_loop)(t.copy())
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    assert _no_eager_nodes(explained)
    np.testing.assert_array_equal(kiln.compile(_pymax_loop)(t.copy()), _pymax_loop(t.copy()))
    a = (rng.random(6) * 10).astype(dtype)
    if dtype == np.float64:
        a[1], a[5] = np.nan, np.nan
    assert _no_eager_nodes(kiln.explain(_pymin_of_three)(a, 0))
    compiled = kiln.compile(_pymin_of_three)
    for i in range(4):
        got, want = compiled(a, i), _pymin_of_three(a, i)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
            assert np.asarray(g).dtype == np.asarray(w).dtype


def test_python_max_of_mixed_dtypes_still_breaks():
    """Which item max picks decides the result's dtype: with int32 and float64 items that
    depends on the data, so it stays a graph break (and right)."""
    def f(a, b):
        return max(a[0], b[0]) + 1

    a, b = np.array([3], np.int32), np.array([2.5])
    explained = kiln.explain(f)(a, b)
    assert explained.graph_break_count == 1
    got = kiln.compile(f)(a, b)
    assert got == f(a, b) and type(got) is type(f(a, b))


def _mgrid_product(n):
    i, j = np.mgrid[0:n, 0:n]  # NPBench mandelbrot2 / stockham_fft
    return (i * j).astype(np.float64) / n


def _mgrid_strided(x):
    g = np.mgrid[0:x.shape[0]:2, :x.shape[1]]
    return g.sum(0) * x[::2]


def _ogrid_open(x):
    a, b = np.ogrid[0:x.shape[0], 0:x.shape[1]]
    return x * a + b


def _mgrid_1d_mixed(x):
    mixed = np.mgrid[0:2, 0.0:1.0:0.5]  # a float slice: every grid is float64
    return x * np.mgrid[2:12] + np.mgrid[0.5:3.0:0.25][:x.shape[0]] + mixed[1, 0, 1]


@pytest.mark.parametrize("fn, make", [
    (_mgrid_product, lambda g, n: (n,)),
    (_mgrid_strided, lambda g, n: (g.random((n + 1, n)),)),
    (_ogrid_open, lambda g, n: (g.random((n, n + 2)),)),
    (_mgrid_1d_mixed, lambda g, n: (g.random(10),)),
])
def test_mgrid_and_ogrid_compile(fn, make):
    """`np.mgrid[...]` / `np.ogrid[...]` with slices: aranges, meshed and stacked (mgrid) or
    shaped along their dims (ogrid), in the graph; dtypes as NumPy's (a float slice makes the
    whole grid float)."""
    g = np.random.default_rng(0)
    explained = kiln.explain(fn)(*make(g, 6))
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    assert _no_eager_nodes(explained)
    compiled = kiln.compile(fn)
    for n in (6, 7, 9):
        args = make(g, n)
        got, want = compiled(*args), fn(*args)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert np.asarray(got).dtype == np.asarray(want).dtype


def test_mgrid_with_a_point_count_still_breaks():
    def f(x):
        return x * np.mgrid[0:1:5j]

    x = np.arange(5.0)
    assert kiln.explain(f)(x).graph_break_count == 1
    np.testing.assert_allclose(kiln.compile(f)(x), f(x))

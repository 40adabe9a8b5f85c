"""np.histogram inside compiled NumPy code: one graph, counts equal to NumPy's (NumPy's own bin
arithmetic, so values on an edge land where NumPy puts them), edges and dtypes equal, over equal
and explicit bins, ranges, weights and density. The one eager node is the check of the data's
range (or of the edges' order), which NumPy raises for; with an explicit range there is none."""

import numpy as np
import pytest
from test_numpy_semantics import eager_nodes

import kiln

RNG = np.random.default_rng(0)

CASES = {
    "normal": (lambda a: np.histogram(a, 10), RNG.standard_normal(1000)),
    "range": (lambda a: np.histogram(a, 37, range=(-1.5, 2.0)), RNG.standard_normal(1000)),
    "float32": (lambda a: np.histogram(a, 13), RNG.standard_normal(999).astype(np.float32)),
    "ints": (lambda a: np.histogram(a, 7), RNG.integers(-20, 50, 500)),
    "constant": (lambda a: np.histogram(a, 4), np.full(20, 3.0)),
    "on_edges": (lambda a: np.histogram(a, 10), np.linspace(0, 1, 101)),
    "weights": (lambda a: np.histogram(a, 6, weights=a * 2), RNG.random(300)),
    "density": (lambda a: np.histogram(a, 9, density=True), RNG.random(300)),
    "edges": (lambda a: np.histogram(a, np.array([0.0, 0.1, 0.5, 0.55, 1.0])), RNG.random(300)),
    "2d_input": (lambda a: np.histogram(a, 5)[0] * 2, RNG.random((30, 4))),
}


@pytest.mark.parametrize("case", CASES)
def test_histogram_equals_numpy_in_one_graph(case):
    fn, x = CASES[case]
    want = fn(x.copy())
    report = kiln.explain(fn)(x.copy())
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert eager_nodes(report) == (0 if case == "range" else 1), report.fallbacks
    got = report.result
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,), strict=True):
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape
        if np.issubdtype(w.dtype, np.integer):
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-12)


def test_histogram_errors():
    compiled = kiln.compile(lambda a, b: np.histogram(a, b))
    with pytest.raises(ValueError, match="must be positive"):
        compiled(np.ones(4), 0)
    first = kiln.compile(lambda a: np.histogram(a, 3))
    with pytest.raises(ValueError, match="not finite"):  # a first call: NumPy's error
        first(np.array([0.0, np.nan, 1.0]))
    compiled_nan = kiln.compile(lambda a: np.histogram(a, 4))
    compiled_nan(np.array([0.0, 2.0, 1.0]))
    with pytest.raises(AssertionError, match="not finite"):  # the compiled graph's check
        compiled_nan(np.array([0.0, np.nan, 1.0]))
    edges = kiln.compile(lambda a, e: np.histogram(a, e))
    edges(np.ones(4), np.array([0.0, 1.0, 2.0]))
    with pytest.raises(AssertionError, match="increase monotonically"):
        edges(np.ones(4), np.array([0.0, 2.0, 1.0]))
    with pytest.raises(ValueError, match="weights should have the same shape"):
        kiln.compile(lambda a: np.histogram(a, 3, weights=np.ones(2)))(np.ones(4))


def test_histogram_with_an_estimator_runs_in_numpy():
    """bins='auto' is not captured: the call breaks and NumPy computes it."""
    fn = lambda a: np.histogram(a, "auto")  # noqa: E731
    x = RNG.random(100)
    report = kiln.explain(fn)(x)
    assert report.graph_break_count == 1
    for g, w in zip(report.result, fn(x), strict=True):
        np.testing.assert_array_equal(np.asarray(g), w)

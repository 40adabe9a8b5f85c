"""kiln.compiler.wrap_numpy: NumPy code taking and returning kiln tensors. Under kiln.compile
the tensors are seen as arrays with no copy and the NumPy calls compile (on the tensors'
device: tests/python/cuda/test_cuda_numpy.py); uncompiled, CPU tensors convert through NumPy.
Results equal NumPy's on the same data, with NumPy's dtypes."""

import warnings

import numpy as np
import pytest

import kiln


@pytest.fixture(autouse=True)
def _fresh():
    kiln.compiler.reset()
    yield
    kiln.compiler.reset()


@kiln.compiler.wrap_numpy
def scores(x, y):
    z = np.sin(x) * 2.0 + y[1:].sum()
    return np.where(z > 0, z, 0.0), z.mean(), np.arange(3)


def numpy_scores(x, y):
    z = np.sin(x) * 2.0 + y[1:].sum()
    return np.where(z > 0, z, 0.0), z.mean(), np.arange(3)


def check(got, x, y):
    want = numpy_scores(x.numpy(), y.numpy())
    assert all(isinstance(g, kiln.Tensor) for g in got)
    for g, w in zip(got, want, strict=True):
        assert g.numpy().dtype == np.asarray(w).dtype  # float64, float64, int64
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-12)


def test_tensors_in_tensors_out_compiled_with_no_eager_node():
    x, y = kiln.randn(5, dtype=kiln.float64), kiln.randn(6, dtype=kiln.float64)
    report = kiln.explain(scores)(x, y)
    check(report.result, x, y)
    assert report.graph_count == 1 and report.graph_break_count == 0
    assert sum(c.report.eager_nodes for c in report.captures if c.report) == 0
    check(kiln.compile(scores)(x, y), x, y)


def test_uncompiled_it_converts_through_numpy():
    x, y = kiln.randn(4, dtype=kiln.float64), kiln.randn(7, dtype=kiln.float64)
    check(scores(x, y), x, y)


def test_float32_tensors_follow_numpy_promotion():
    @kiln.compiler.wrap_numpy
    def scaled(a):
        return a * 2.5, a * np.float64(2.5), (a > 0).astype(np.int32)

    a = kiln.randn(3, 4)
    got = kiln.compile(scaled)(a)
    want = (a.numpy() * 2.5, a.numpy() * np.float64(2.5), (a.numpy() > 0).astype(np.int32))
    for g, w in zip(got, want, strict=True):
        assert g.numpy().dtype == w.dtype  # float32, float64 (NEP 50), int32
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-6)


def test_wrapped_functions_are_separate_entries_named_as_the_user_wrote():
    fns = []
    for k in range(10):  # more than the recompile limit, were they one code object
        def f(a, k=k):
            return np.cos(a) + k

        fns.append(kiln.compile(kiln.compiler.wrap_numpy(f)))
    x = kiln.randn(4, dtype=kiln.float64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k, fn in enumerate(fns):
            np.testing.assert_allclose(fn(x).numpy(), np.cos(x.numpy()) + k, rtol=1e-12)
    assert not [w for w in caught if "recompile limit" in str(w.message)]
    report = kiln.explain(kiln.compiler.wrap_numpy(scores.__wrapped__))(x, x)
    assert report.captures[0].name.startswith("scores")
    assert report.recompiles == []

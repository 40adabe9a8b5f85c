"""np.linalg's solvers under kiln.compile (solve, inv, det, slogdet, cholesky, eigh,
eigvalsh): NumPy's results and dtypes (integer input computes in float64, float32 stays),
captured with no graph break, and np.linalg.LinAlgError for a singular matrix; and the low-level
ndarray constructor."""

import numpy as np
import pytest

import kiln


def spd(n, seed=0, dtype=np.float64):
    m = np.random.default_rng(seed).standard_normal((n, n))
    return (m @ m.T + n * np.eye(n)).astype(dtype)


KERNELS = {
    "solve_vector": (lambda a, b: np.linalg.solve(a, b), lambda: (spd(5), np.arange(5.0))),
    "solve_matrix": (lambda a, b: np.linalg.solve(a, b) * 2, lambda: (spd(4), spd(4, 1)[:, :2])),
    "inv_float32": (lambda a: np.linalg.inv(a) @ a, lambda: (spd(5, dtype=np.float32),)),
    "inv_int": (lambda a: np.linalg.inv(a), lambda: (np.array([[2, 1], [1, 3]]),)),
    "det": (lambda a: np.linalg.det(a), lambda: (spd(4) - 3,)),
    "det_batch": (lambda a: np.linalg.det(a), lambda: (np.stack([spd(3), -spd(3, 2)]),)),
    "slogdet": (lambda a: tuple(np.linalg.slogdet(a)), lambda: (spd(6) - 5,)),
    "cholesky": (lambda a: np.linalg.cholesky(a), lambda: (spd(5),)),
    "eigvalsh": (lambda a: np.linalg.eigvalsh(a), lambda: (spd(5),)),
    # eigenvectors are unique up to sign: the reconstruction is not
    "eigh": (lambda a: (lambda w, v: (v * w) @ v.T)(*np.linalg.eigh(a)), lambda: (spd(5),)),
    # a least-squares fit through the normal equations, as scientific code writes it
    "normal_equations": (lambda x, y: np.linalg.solve(x.T @ x + 1e-3 * np.eye(x.shape[1]),
                                                      x.T @ y),
                         lambda: (np.random.default_rng(3).standard_normal((40, 4)),
                                  np.arange(40.0))),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_compiled_equals_numpy(name):
    fn, make = KERNELS[name]
    want = fn(*make())
    explained = kiln.explain(fn)(*make())
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count >= 1 and not any(explained.fallbacks), explained.fallbacks
    got = kiln.compile(fn)(*make())
    for g, w in zip(got if isinstance(want, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,), strict=True):
        assert np.asarray(g).dtype == np.asarray(w).dtype
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-6 if w.dtype == np.float32 else 0)


def test_singular_matrix_raises_numpys_linalg_error():
    fn = kiln.compile(lambda a: np.linalg.inv(a) * 2)
    fn(np.eye(2))
    with pytest.raises(np.linalg.LinAlgError):
        fn(np.ones((2, 2)))

    def guarded(a, b):
        try:
            return np.linalg.solve(a, b)
        except np.linalg.LinAlgError:
            return np.zeros_like(b)

    np.testing.assert_array_equal(kiln.compile(guarded)(np.ones((2, 2)), np.ones(2)),
                                  np.zeros(2))


def test_the_low_level_ndarray_constructor_is_an_empty_array():
    """NPBench's vadv allocates with `np.ndarray(shape, dtype=...)`; it broke the graph."""
    def fn(x):
        out = np.ndarray(x.shape, dtype=x.dtype)
        out[:] = x * 2
        return out, isinstance(out, np.ndarray)

    x = np.arange(12.0, dtype=np.float32).reshape(3, 4)
    assert kiln.explain(fn)(x).graph_break_count == 0
    got, is_array = kiln.compile(fn)(x)
    assert is_array and got.dtype == np.float32
    np.testing.assert_array_equal(got, x * 2)


def test_a_function_kiln_cannot_capture_at_all_is_reported_with_its_reason():
    """Complex arguments run the whole function in NumPy; explain() once showed 0 graphs and
    0 breaks with no reason."""
    def fn(z):
        return (z * 2).real

    report = kiln.explain(fn)(np.ones(3, dtype=np.complex128))
    assert report.graph_count == 0 and report.graph_break_count == 1
    assert "complex128" in report.break_reasons[0].reason


def test_lstsq_runs_in_numpy_with_a_reason_and_the_rest_compiles():
    """np.linalg.lstsq's rank and residuals' shape depend on the data: the call runs in NumPy
    (its numbers exactly), named as the break's reason, and the code after it compiles."""
    def fit(a, b):
        x = np.linalg.lstsq(a, b, rcond=None)[0]
        return a @ x - b

    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((20, 3)), rng.standard_normal(20)
    report = kiln.explain(fit)(a, b)
    assert report.graph_break_count == 1 and report.graph_count == 1
    assert not any(report.fallbacks), report.fallbacks  # the code after it: compiled, not eager
    assert "np.linalg.lstsq runs in NumPy" in report.break_reasons[0].reason
    np.testing.assert_allclose(kiln.compile(fit)(a, b), fit(a, b), rtol=1e-12, atol=1e-12)

"""NumPy's semantics under kiln.compile: promotion (NEP 50), defaults, scalars, views, in-place
writes to the caller's arrays, indexing, return types, graph breaks and guards.

Every case runs the same function in NumPy and compiled, and compares values and dtypes (and
Python types: a reduction to a scalar is a NumPy scalar in both).
"""

import operator
import warnings

import numpy as np
import pytest

import kiln

# NumPy warns on division by zero in the reference runs; both sides give inf/nan alike.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _same(got, want):
    if want is None:
        assert got is None
        return
    if isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _same(g, w)
        return
    assert type(got) is type(want), f"{type(got)} vs NumPy's {type(want)}"
    if isinstance(want, (np.ndarray, np.generic)):
        assert got.dtype == want.dtype, f"{got.dtype} vs NumPy's {want.dtype}"
        assert np.shape(got) == np.shape(want)
    atol = 1e-6 if np.asarray(want).dtype in (np.float32, np.float16) else 1e-12
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=atol, equal_nan=True)


def eager_nodes(report) -> int:
    """Nodes of the captured graphs that ran on eager kernels instead of compiled code."""
    return sum(c.report.eager_nodes for c in report.captures if c.report is not None)


def run_both(fn, *args, breaks=0, eager=0):
    """fn in NumPy and compiled (on copies of the arrays); returns the compiled run's report.
    `eager`: how many captured nodes may run on eager kernels (a data-dependent op)."""
    want_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    got_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    want = fn(*want_args)
    report = kiln.explain(fn)(*got_args)
    _same(report.result, want)
    for g, w in zip(got_args, want_args, strict=True):
        if isinstance(w, np.ndarray):
            _same(g, w)
    assert report.graph_break_count == breaks, report.break_reasons
    assert any(c.report is not None for c in report.captures) or report.graph_count == 0
    assert eager_nodes(report) == eager, [f for graph in report.fallbacks for f in graph]
    return report


ARRAYS = {
    "float64": np.linspace(-3, 3, 12).reshape(3, 4),
    "float32": np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4),
    "int64": np.arange(-6, 6).reshape(3, 4),
    "int32": np.arange(-6, 6, dtype=np.int32).reshape(3, 4),
    "int8": np.arange(-6, 6, dtype=np.int8).reshape(3, 4),
    "uint8": np.arange(12, dtype=np.uint8).reshape(3, 4),
    "bool": (np.arange(12) % 3 == 0).reshape(3, 4),
}
SCALARS = [2, 2.5, True, np.float32(1.5), np.float64(0.5), np.int32(3)]


@pytest.mark.parametrize("a", sorted(ARRAYS))
@pytest.mark.parametrize("b", sorted(ARRAYS))
@pytest.mark.parametrize("op", [operator.add, operator.mul, operator.truediv, operator.lt])
def test_array_array_promotion(a, b, op):
    x, y = ARRAYS[a], ARRAYS[b] + (1 if ARRAYS[b].dtype != np.bool_ else 0)
    run_both(lambda u, v: op(u, v), x, y)


@pytest.mark.parametrize("a", sorted(ARRAYS))
@pytest.mark.parametrize("s", SCALARS, ids=lambda s: f"{type(s).__name__}({s})")
@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.truediv])
def test_array_scalar_promotion_is_nep50(a, s, op):
    if a == "bool" and op is operator.sub and isinstance(s, (bool, np.bool_)):
        pytest.skip("NumPy refuses - on booleans")
    x = ARRAYS[a]

    def fn(u):
        return op(u, s), op(s, u)

    run_both(fn, x)


@pytest.mark.parametrize("a", ["float64", "float32", "int64", "int32", "int8", "bool"])
def test_unary_math_result_dtypes(a):
    x = np.abs(ARRAYS[a]) + (0.5 if ARRAYS[a].dtype.kind == "f" else 0)

    def fn(u):
        return np.sqrt(u + 1), np.exp(u), np.floor(u), np.sin(u), np.abs(u), np.sign(u)

    if a == "bool":
        def fn(u):  # noqa: F811 - NumPy has no sign/abs of bool through these loops
            return np.sqrt(u), np.exp(u), np.sin(u)
    run_both(fn, x)


@pytest.mark.parametrize("a", ["int64", "int32", "int8", "float64", "float32"])
def test_integer_division_and_modulo_signs(a):
    x = ARRAYS[a]
    y = np.array([3, -3, 5, -2], dtype=x.dtype)

    def fn(u, v):
        return u // v, u % v, np.fmod(u, v), np.floor_divide(u, 4), u % -4

    run_both(fn, x, y)


@pytest.mark.parametrize("a", sorted(ARRAYS))
def test_reduction_dtypes_and_scalars(a):
    x = ARRAYS[a]

    def fn(u):
        return (np.sum(u), u.sum(axis=0), np.mean(u), u.mean(axis=1, keepdims=True),
                np.max(u), u.min(axis=1), np.prod(u[:, :2] != 0), np.any(u), np.all(u, axis=0),
                np.argmax(u), u.argmin(axis=1), np.cumsum(u, axis=1))

    # NumPy sums uint8 into uint64, a dtype kiln lacks: that reduction runs in NumPy.
    run_both(fn, x, breaks=2 if a == "uint8" else 0)


def test_var_std_with_ddof():
    x = ARRAYS["float64"]
    run_both(lambda u: (np.var(u), u.std(axis=0, ddof=1), np.var(u, axis=(0, 1))), x)


def test_creation_defaults_are_float64_and_int64():
    def fn(u):
        n = u.shape[0]
        return (np.zeros(n), np.ones((n, 2)), np.arange(n), np.arange(0.0, 1.0, 0.25),
                np.linspace(0, 1, 5), np.full((2, n), 7), np.eye(n), np.zeros_like(u),
                np.ones_like(u, dtype=np.float32), np.empty_like(u).shape)

    run_both(fn, ARRAYS["int32"])


def test_basic_slicing_is_a_view_that_writes_through():
    def fn(a):
        b = a[1:, ::2]
        b[0, 0] = 100.0
        b *= 2
        return a.sum()

    run_both(fn, ARRAYS["float64"])


def test_inplace_operators_and_out_write_to_callers_arrays():
    def fn(a, b):
        a += 1
        a[0] -= b[0]
        np.multiply(a, 2, out=b)
        np.add(b, a, out=b, where=a > 2)
        b[b > 10] = 0.0
        return a, b

    run_both(fn, ARRAYS["float64"], ARRAYS["float64"] * 3)


def test_inplace_same_kind_casting_error_runs_numpy():
    """NumPy refuses `int_array += 0.5`; the compiled function raises the same error."""
    def fn(a):
        a += 0.5
        return a

    with pytest.raises(np._core._exceptions._UFuncOutputCastingError if hasattr(
            np, "_core") else TypeError):
        fn(ARRAYS["int64"].copy())
    with pytest.raises(TypeError):
        kiln.compile(fn)(ARRAYS["int64"].copy())


def test_indexing_forms():
    x = np.arange(60.0).reshape(3, 4, 5)

    def fn(a):
        idx = np.array([2, 0])
        return (a[::-1], a[:, ::-2, 1], a[..., 1:], a[np.newaxis, 1], a[:, None, 0, ::-1],
                a[idx], a[:, [0, 3]], a[-1, -1, -1], a[1:2, ..., 4])

    run_both(fn, x)


def test_boolean_mask_read_and_write():
    def fn(a):
        a[a > 5] = -1.0
        return a * 2

    run_both(fn, ARRAYS["float64"])


@pytest.mark.parametrize("case", ["scale", "add_array", "clip_negative", "int_floordiv",
                                  "large_fill"])
def test_masked_updates_compile_into_one_pass(case):
    """`a[m] *= c` (the selection updated in place, then assigned) and `a[m] = 0` (any number of
    elements, not a small write) compile with no eager node: `where(m, ..., a)` over the whole
    array, written back once, as NumPy leaves the caller's array."""
    rng = np.random.default_rng(0)

    def scale(a, c):
        a[a > 0.5] *= c
        return a

    def add_array(a, b):
        m = a < b
        a[m] += b[m] * 2
        return a.sum()

    def clip_negative(a):
        a[a < 0] = 0.0
        return a

    def int_floordiv(a):
        a[a % 3 == 0] //= 2
        return a

    def large_fill(a):
        a[a < 0.2] = 0.0
        return a.sum()

    fn, args = {"scale": (scale, (rng.random(200), 1.5)),
                "add_array": (add_array, (rng.random((20, 7)), rng.random((20, 7)))),
                "clip_negative": (clip_negative, (rng.standard_normal((6, 5)),)),
                "int_floordiv": (int_floordiv, (np.arange(-20, 40),)),
                "large_fill": (large_fill, (rng.random(100_000),))}[case]  # fmt: skip
    run_both(fn, *args)


def test_a_selection_held_by_the_caller_keeps_its_own_update():
    """A selection that is returned is the caller's object: its in-place update stays its own
    (computed by the eager selection), and the array's masked write is NumPy's."""
    def fn(a):
        t = a[a > 0]
        t *= 2
        a[a > 0] = t
        return t

    run_both(fn, np.linspace(-1, 1, 9), eager=2)  # the selection and its assignment


def test_methods_and_attributes():
    def fn(a):
        return (a.T, a.shape, a.ndim, a.size, a.dtype == np.float64, a.reshape(2, 6),
                a.reshape((4, 3)).transpose(), a.flatten(), a.ravel(), a.astype(np.int32),
                a.copy(), a.clip(-1, 1), a.round(1), a.dot(a.T), a.swapaxes(0, 1),
                a[None].squeeze(0), a.itemsize, a.nbytes)

    run_both(fn, ARRAYS["float64"])


def test_shape_functions_and_joins():
    x = ARRAYS["float64"]

    def fn(a):
        return (np.concatenate([a, a], axis=1), np.stack((a, a)), np.vstack([a, a[0]]),
                np.hstack([a, a]), np.transpose(a), np.swapaxes(a, 0, 1), np.moveaxis(a, 0, -1),
                np.expand_dims(a, 1), np.squeeze(a[None]), np.broadcast_to(a[0], (2, 4)),
                np.reshape(a, (-1,)), np.tril(a), np.triu(a, 1), np.roll(a, 2, axis=1),
                np.roll(a, 1), np.where(a > 0, a, 0.0), np.clip(a, -1, 2), np.flip(a, 0),
                np.pad(a, 1), np.pad(a, ((0, 1), (2, 0)), mode="edge"), np.sort(a, axis=0),
                np.argsort(a[0]), np.cumsum(a))

    run_both(fn, x)


def test_products_and_norms():
    a = np.linspace(0, 1, 12).reshape(3, 4)
    b = np.linspace(1, 2, 20).reshape(4, 5)
    v = np.linspace(-1, 1, 4)

    def fn(a, b, v):
        return (a @ b, np.dot(a, b), np.matmul(a, v), np.dot(v, v), np.outer(v, v),
                np.einsum("ij,jk->ik", a, b), np.linalg.norm(v), np.linalg.norm(a),
                np.linalg.norm(a, axis=1), np.linalg.norm(v, ord=1), np.linalg.norm(v, np.inf),
                np.inner(v, v), np.trace(a @ a.T))

    run_both(fn, a, b, v)


def test_numpy_scalar_results_and_python_values():
    def fn(a):
        s = np.sum(a)
        return s, float(a.shape[0]) * 2, np.float32(2.0) * a, np.float64(a.shape[1])

    run_both(fn, ARRAYS["float32"])


def test_unsupported_numpy_call_is_a_graph_break_with_the_users_line():
    def fn(a):
        b = a @ a.T + np.eye(3)
        c = np.linalg.qr(b).Q
        return c @ b

    report = run_both(fn, ARRAYS["float64"], breaks=1)
    reason = report.break_reasons[0]
    assert "np.linalg.qr() is not compiled" in reason.reason
    assert reason.user_stack[-1][2].strip() == "c = np.linalg.qr(b).Q"


def test_data_dependent_branch_breaks_and_matches_numpy():
    def fn(a):
        if a.sum() > 0:
            return a * 2
        return a - 1

    run_both(fn, ARRAYS["float64"] + 1, breaks=1)


def test_guards_recompile_on_dtype_and_shape():
    def fn(a):
        return np.sqrt(a * a + 1)

    compiled = kiln.compile(fn)
    for x in (ARRAYS["float64"], ARRAYS["float32"], ARRAYS["int64"], np.ones((5, 2)),
              np.ones((7, 2)), ARRAYS["float64"].T):
        _same(compiled(x), fn(x))


def test_readonly_and_noncontiguous_inputs():
    x = np.arange(24.0).reshape(4, 6)
    x.flags.writeable = False

    def fn(a, b):
        return a * 2 + b

    run_both(fn, x, np.arange(48.0).reshape(8, 6)[::2])
    got = kiln.compile(fn)(x, np.arange(6.0)[::-1])
    np.testing.assert_array_equal(got, fn(x, np.arange(6.0)[::-1]))


def test_returns_the_callers_array_itself():
    def fn(a):
        a *= 2
        return a

    x = ARRAYS["float64"].copy()
    assert kiln.compile(fn)(x) is x


def test_unsupported_dtype_runs_numpy():
    def fn(a):
        return a * 2

    x = np.arange(4, dtype=np.complex128)
    np.testing.assert_array_equal(kiln.compile(fn)(x), x * 2)


def test_compiled_numpy_is_compiled():
    """The NumPy calls become compiled kernels: one part, nothing on eager kernels."""
    def fn(a, b):
        return np.tanh(a * b + 1.0).sum(axis=1) / a.shape[1]

    report = run_both(fn, np.ones((64, 32)), np.full((64, 32), 0.5))
    assert report.graph_count == 1
    assert not [f for graph in report.fallbacks for f in graph]
    assert report.captures[0].report.eager_nodes == 0


def test_a_function_that_only_writes_into_its_arguments_is_compiled():
    """NumPy's in-place style (`B[1:-1] = ...`, `x += A @ y`, nothing returned) compiles, and
    the program writes the arguments' memory directly."""
    def fn(A, B):
        B[1:-1] = 0.5 * (A[:-2] + A[2:])
        A += 1.0

    report = run_both(fn, np.linspace(0, 1, 50), np.zeros(50))
    assert report.captures[0].report.eager_nodes == 0
    assert len(report.captures[0].report.parts) == 1


def test_in_place_program_with_aliased_arguments_stays_correct():
    """The same array passed twice: writes must be seen through both (no in-place shortcut)."""
    def fn(A, B):
        B[1:-1] = 0.5 * (A[:-2] + A[2:])
        return A.sum()

    x = np.linspace(0, 1, 50)
    y = x.copy()
    want = fn(y, y)
    got = kiln.compile(fn)(x, x)
    np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(x, y)


def test_ufunc_methods_differences_grids_takes_splits():
    a = np.linspace(0.1, 2.3, 24).reshape(4, 6)
    v = np.linspace(-1, 1, 6)

    def fn(a, b, v):
        return (np.add.outer(v, v), np.maximum.reduce(a, axis=1), np.add.reduce(a),
                np.multiply.accumulate(a, axis=1), np.add.accumulate(v), np.diff(a),
                np.diff(v, 2), np.meshgrid(v, v[:3]), np.meshgrid(v, v[:3], indexing="ij"),
                np.take(v, [0, 2]), np.take(a, [1, 0], axis=1),
                np.take_along_axis(a, np.argsort(a, axis=1), axis=1), np.split(v, 2),
                np.array_split(v, 4), np.isclose(a, b), np.nan_to_num(a / (a - a[0, 0])),
                np.median(a), np.median(a, axis=0), np.minimum.reduce(a, axis=0),
                np.less.outer(v, v))

    report = run_both(fn, a, a + 1e-9, v)
    assert report.captures[0].report.eager_nodes == 0


def test_copyto_writes_into_the_destination():
    def fn(dst, src):
        np.copyto(dst, src)
        np.copyto(dst[0], 7.0)
        return dst.sum()

    run_both(fn, np.zeros((3, 4)), np.arange(4.0))


def test_diagonals_eye_and_float_ranges_compile():
    """Built from index arithmetic and gathers, so they compile (no eager node)."""
    m = np.arange(20.0).reshape(4, 5)
    v = np.array([1.0, -2.0, 3.0])

    def fn(m, v):
        return (np.eye(3, 4, k=1), np.eye(3, k=-1, dtype=np.int32), np.identity(2),
                np.diag(v), np.diag(v, 1), np.diag(v, -2), np.diag(m, 1), np.diagonal(m, -1),
                m.diagonal(2), np.trace(m, 1), np.trace(m[None], axis1=1, axis2=2),
                np.arange(0.1, 1.0, 0.3, dtype=np.float32), np.arange(2.5, -1.0, -0.5))

    run_both(fn, m, v)


def test_python_int_out_of_bounds_raises_numpys_overflow_error():
    """NEP 50: a Python int combined with an integer array must fit its dtype; the compiled
    code leaves that operation to NumPy, which raises."""
    a = np.array([1, 2], np.int8)
    for fn in (lambda a: a + 300, lambda a: a * 2**40, lambda a: np.add(a, -129)):
        with pytest.raises(OverflowError, match="out of bounds for int8"):
            fn(a)
        with pytest.raises(OverflowError, match="out of bounds for int8"):
            kiln.compile(fn)(a)
    fits = kiln.compile(lambda a: (a + 127, a - 128 + 0 * a, np.add(a, 100)))
    for got, want in zip(fits(np.array([1, 2], np.int16)), (np.array([128, 129], np.int16),
                         np.array([-127, -126], np.int16), np.array([101, 102], np.int16)),
                         strict=True):  # fmt: skip
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype


@pytest.mark.parametrize("name", ["heaviside", "degrees", "radians"])
def test_ufuncs_keep_nan_and_compile(name):
    ufunc = getattr(np, name)
    a = np.array([-1.0, 0.0, 2.0, np.nan, -np.inf, np.inf])
    if name == "heaviside":  # NaN stays NaN (torch.heaviside gives 0 there)
        run_both(lambda x: ufunc(x, 0.5), a)
        run_both(lambda x: ufunc(x, x * 2), a)
    else:
        run_both(lambda x: ufunc(x), a)


@pytest.mark.parametrize("kind", [np.float64, np.float32, np.int64, np.int32],
                         ids=lambda k: k.__name__)
def test_a_numpy_scalar_argument_that_changes_goes_symbolic(kind):
    # a particle filter's systematic_resample(w, u0s[t]): one capture per value hit the
    # recompile limit; the scalar is now an input of its own dtype (NumPy promotes a scalar
    # and a 0-d array alike)
    def fn(x32, x64, u):
        return x32 * u, x64 + u, u * 2, u, np.sqrt(np.abs(u) + 1)

    kiln.compiler.reset()
    compiled = kiln.compile(fn)
    records: list = []
    compiled._kiln_compiler.recorder = records
    x32, x64 = np.linspace(0, 1, 5, dtype=np.float32), np.linspace(0, 1, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(12):
            u = kind(i + 1) / kind(3) if kind in (np.float64, np.float32) else kind(i - 4)
            _same(compiled(x32, x64, u), fn(x32, x64, u))
    assert len(records) == 2  # the first value, then one capture for every other


@pytest.mark.parametrize("kwargs", [{}, {"axis": 0}, {"axis": (0, 2)},
                                    {"axis": 1, "keepdims": True}, {"keepdims": True}], ids=str)
def test_count_nonzero_with_axis_compiles(kwargs):
    x = np.random.default_rng(0).normal(size=(5, 4, 3))
    run_both(lambda a: np.count_nonzero(a > 0, **kwargs), x)


_G = np.random.default_rng(0)
_SORTED, _X = np.sort(_G.random(20)), _G.standard_normal(30)
SEARCH_CASES = {
    "searchsorted": (lambda a, v: np.searchsorted(a, v), (_SORTED, _G.random((3, 4)))),
    "searchsorted_right": (lambda a, v: np.searchsorted(a, v, side="right"),
                           (_SORTED, np.array([_SORTED[3], 2.0, -1.0]))),
    "digitize": (lambda x, b: np.digitize(x, b), (_X, np.linspace(-2, 2, 7))),
    "digitize_right": (lambda x, b: np.digitize(x, b, right=True),
                       (np.linspace(-2, 2, 7), np.linspace(-2, 2, 7))),
    "digitize_decreasing": (lambda x, b: np.digitize(x, b), (_X, np.linspace(2, -2, 7))),
    "isin": (lambda e, t: np.isin(e, t), (_G.integers(0, 10, (4, 5)), np.array([1, 3, 5]))),
    "isin_invert": (lambda e, t: np.isin(e, t, invert=True), (_G.integers(0, 4, 9),
                                                              np.array([[1], [2]]))),
    "ptp_axis": (lambda a: np.ptp(a, axis=0), (_G.random((3, 4)),)),
    "ptp_all": (lambda a: np.ptp(a), (_G.integers(-5, 5, (3, 4)),)),
    "select": (lambda x: np.select([x < -1, x > 1], [x * 2, x ** 2], default=0.0), (_X,)),
    "select_int_default": (lambda x: np.select([x < 0], [np.ones(x.shape, np.int32)], 5), (_X,)),
}


@pytest.mark.parametrize("name", sorted(SEARCH_CASES))
def test_search_and_selection_functions_compile(name):
    fn, args = SEARCH_CASES[name]
    run_both(fn, *args)


def _scalar_types(x):
    v = x.sum()
    m = x.astype(np.int64).max()
    return (isinstance(v, float), isinstance(v, np.floating), type(v).__name__,
            isinstance(v, np.ndarray), np.isscalar(v), isinstance(m, np.integer),
            type(m).__name__)


def test_reductions_are_numpy_scalars_inside_compiled_code():
    """A reduction's 0-d result is a NumPy scalar to the code, as NumPy makes it (and as the
    entry returns it): isinstance checks and type names are NumPy's."""
    x = np.arange(5.0)
    assert kiln.compile(_scalar_types)(x) == _scalar_types(x)


def _pivot_rows(A):
    A = A.copy()
    p = np.argmax(A[:, 0])
    A[[0, p]] = A[[p, 0]]  # LU's partial pivoting: a list index with a computed integer
    return A, A[[p]], A[[p, 0], 1:]


def test_a_list_index_holding_a_computed_integer_is_an_index_array():
    """NumPy reads `A[[p, 0]]` as an index array even when `p` is an array result; it must
    not become the tuple index `A[p, 0]` (torch's reading of a list holding a tensor)."""
    A = np.array([[1.0, 2.0], [5.0, 6.0], [3.0, 4.0]])
    explained = kiln.explain(_pivot_rows)(A)
    assert explained.graph_break_count == 0 and explained.fallbacks == [[]]  # all compiled
    got, want = explained.result, _pivot_rows(A)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def _deposit(grid, pos, w):
    idx = np.floor(pos).astype(np.int64)
    np.add.at(grid, idx, w)  # repeated indices each count
    np.subtract.at(grid, idx[:3], 0.5)
    return grid.sum()


def _extremes(a, idx, v):
    np.minimum.at(a, idx, v)
    np.maximum.at(a, idx[:2], 100.0)
    return a


def _histogram2d(h, i, j):
    np.add.at(h, (i, j), 1)
    return h


@pytest.mark.parametrize("case", ["deposit", "extremes", "histogram2d"])
def test_ufunc_at_accumulates_in_place_without_a_break(case):
    rng = np.random.default_rng(3)
    fn, args = {
        "deposit": (_deposit, (np.zeros(10), rng.random(50) * 10, rng.random(50))),
        "extremes": (_extremes, (np.full(6, 5.0), np.array([0, 2, 2, 5]),
                                 np.array([1.0, 3.0, -1.0, 7.0]))),
        "histogram2d": (_histogram2d, (np.zeros((4, 5)), rng.integers(0, 4, 30),
                                       rng.integers(0, 5, 30))),
    }[case]
    want_args = [a.copy() for a in args]
    got_args = [a.copy() for a in args]
    want = fn(*want_args)
    explained = kiln.explain(fn)(*got_args)
    np.testing.assert_allclose(explained.result, want, rtol=1e-12)
    np.testing.assert_allclose(got_args[0], want_args[0], rtol=1e-12)  # written in place
    assert explained.graph_break_count == 0
    # compiled, but for the index per dim of a 2-D histogram: an eager index_put_, in place
    eager = [target for _, target, _ in explained.fallbacks[0]]
    assert eager == (["kiln.Tensor.index_put_"] if case == "histogram2d" else [])


def _sin_plus(a, b):
    return np.sin(a) + b


def test_shapes_that_do_not_broadcast_raise_numpys_value_error():
    # compiled for equal run-time sizes (the binding's assumption), then called with two that
    # differ: the eager run that follows raises what NumPy's except clauses catch
    f = kiln.compile(_sin_plus)
    f(np.ones(5), np.ones(5))
    f(np.ones(7), np.ones(7))
    for a, b in [(np.ones(8), np.ones(9)), (np.ones((2, 3)), np.ones((3, 2)))]:
        with pytest.raises(ValueError):
            _sin_plus(a, b)
        with pytest.raises(ValueError, match="broadcast"):
            f(a, b)
    with pytest.raises(ValueError, match="matmul"):
        kiln.compile(lambda x, y: x @ y)(np.ones((2, 3)), np.ones((2, 3)))


def test_shape_errors_are_torchs_runtime_error_too():
    with pytest.raises(RuntimeError, match="cannot be broadcast") as e:
        kiln.ones(3) + kiln.ones(4)
    assert isinstance(e.value, kiln.ShapeError) and isinstance(e.value, ValueError)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        kiln.ones(2, 3) @ kiln.ones(2, 3)

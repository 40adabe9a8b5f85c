"""Writes into part of a large input array (`hist[t] = row`, `A[i, 1:-1] = ...`,
`A[:, j] -= v`) compile as region writes: the program computes the written values and the
runner stores each into its region of the caller's array, in place (driver/prepared_graph.cc).
Before, such a write ran on the eager kernel, or a compiled part rewrote the whole array on
every call, which made a loop over its rows quadratic. Each case compares results and the
written arguments with NumPy's and says whether the write compiled as a region."""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln._capture import loops


@pytest.fixture(autouse=True)
def _fresh():
    kiln.compiler.reset()
    yield
    kiln.compiler.reset()


@pytest.fixture
def no_unroll(monkeypatch):
    monkeypatch.setattr(loops, "UNROLL_OPS", 0)


def run_both(fn, *args):
    """fn under NumPy and through kiln.explain on copies of args: (explain's report), after
    checking that results and arguments are equal, dtypes included."""
    ours = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    theirs = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    want = fn(*theirs)
    report = kiln.explain(fn)(*ours)
    got = report.result
    for g, w in zip(got if isinstance(want, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,), strict=True):
        np.testing.assert_array_equal(g, w)
        assert np.asarray(g).dtype == np.asarray(w).dtype
    for o, t in zip(ours, theirs, strict=True):
        if isinstance(t, np.ndarray):
            np.testing.assert_array_equal(o, t)
            assert o.dtype == t.dtype
    return report


def part_reports(report):
    """The partition reports of every graph and loop body kiln compiled."""
    out = []
    for c in report.captures:
        if c.report is not None:
            out.append(c.report)
            out.extend(c.report.loops)
    return out


def region_writes(report) -> list[str]:
    return [region for r in part_reports(report) for info in r.infos
            for _, region in info["write_backs"] if region]


def eager_nodes(report) -> int:
    return sum(r.eager_nodes for r in part_reports(report))


def write_row(A, v, i):
    A[i, 2:10] = v * 2
    return v.sum()


def test_a_row_write_into_a_large_input_compiles_as_a_region():
    A = np.random.default_rng(0).random((400, 20))
    report = run_both(write_row, A, np.arange(8.0), 7)
    assert eager_nodes(report) == 0
    assert region_writes(report) == [".select(0, 7).slice(0, 2, 10, 1)"]


def test_stepped_and_negative_indices():
    def f(A, v):
        A[-1, ::3] = v
        A[-2, 1::5] = v[:12] + 1.0
        return v * 1.0

    A = np.random.default_rng(1).random((100, 60))
    report = run_both(f, A, np.arange(20.0))
    assert eager_nodes(report) == 0
    assert region_writes(report) == [".select(0, 99).slice(0, 0, 58, 3)",
                                     ".select(0, 98).slice(0, 1, 57, 5)"]


def test_a_value_cast_to_the_array_dtype_as_numpy_casts_it():
    def f(A, v):
        A[3] = v * 1.75  # float64 into int64: truncated, as NumPy's setitem does
        A[4, :2] = True
        return v.sum()

    A = np.arange(5000, dtype=np.int64).reshape(500, 10)
    report = run_both(f, A, np.arange(-5.0, 5.0))
    assert eager_nodes(report) == 0


def test_a_value_read_from_the_array_it_is_written_into():
    def shift(A):
        A[1:, 0] = A[:-1, 0]  # NumPy reads all of the source before it writes
        A[0] = A[-1] * 2
        return A.shape[0]

    A = np.random.default_rng(2).random((300, 30))
    run_both(shift, A)


def test_an_in_place_op_on_a_column_is_a_region_write():
    def f(A, v, j):
        A[:, j] -= v
        return v * 2

    A = np.random.default_rng(3).random((200, 50))
    report = run_both(f, A, np.ones(200), 11)
    assert eager_nodes(report) == 0
    assert region_writes(report) == [".select(1, 11)"]


def test_an_array_read_again_after_the_write_keeps_the_eager_store():
    def f(A, v, i):
        A[i] = v
        return A.sum(axis=0)  # reads the array as written

    A = np.random.default_rng(4).random((400, 16))
    report = run_both(f, A, np.arange(16.0), 5)
    assert region_writes(report) == []
    assert eager_nodes(report) == 1  # the store, in place; the sum compiles


def seidel_rows(A, steps):
    n = A.shape[0]
    for _ in range(steps):
        for i in range(1, n - 1):
            A[i, 1:-1] = (A[i - 1, 1:-1] + A[i, 1:-1] + A[i + 1, 1:-1]) / 3.0
    return A


def test_a_loop_over_rows_writes_each_row_in_place(no_unroll):
    A = np.random.default_rng(5).random((40, 40))
    report = run_both(seidel_rows, A, 2)
    assert eager_nodes(report) == 0
    regions = region_writes(report)
    assert regions and all(r.startswith(".select(0, s") for r in regions)


def sir(sus, inf, rec, steps):
    hist = np.empty((steps, 3, sus.shape[0]))
    for t in range(steps):
        new_inf = 0.3 * sus * inf / (sus + inf + rec)
        new_rec = 0.1 * inf
        sus, inf, rec = sus - new_inf, inf + new_inf - new_rec, rec + new_rec
        hist[t, 0] = sus
        hist[t, 1] = inf
        hist[t, 2] = rec
    return hist


@pytest.mark.parametrize("steps", [1, 2, 300])
def test_a_history_filled_row_by_row_in_a_time_loop(no_unroll, steps):
    n = 50
    args = (np.full(n, 990.0), np.linspace(1, 10, n), np.zeros(n), steps)
    report = run_both(sir, *args)
    assert eager_nodes(report) == 0
    if steps > 2:  # the three rows of entry t, composed into one write of the entry
        (region,) = region_writes(report)
        assert region.startswith(".select(0, s") and region.count(".") == 1


def test_an_index_out_of_range_raises_numpys_error():
    A = np.zeros((10, 12))
    f = kiln.compile(write_row)
    f(A, np.arange(8.0), 3)
    with pytest.raises(IndexError):
        f(A, np.arange(8.0), 10)


def test_a_region_write_into_a_tensor_bumps_its_version():
    # kiln tensors too: the store is an in-place write the version counter sees, as copy_ is
    def f(h, v, i):
        h[i] = v * 2
        return v + 1

    h, v = kiln.zeros(500, 16), kiln.ones(16)
    compiled = kiln.compile(f)
    compiled(h, v, 3)
    before = h._version
    compiled(h, v, 3)
    assert h._version > before
    assert h[3].tolist() == [2.0] * 16 and h.sum().item() == 32.0


def _two_rows(A, v, i, j):
    A[i] += v
    A[j] = v * 2.0
    return v.sum()


def test_an_index_out_of_range_leaves_the_array_as_numpy_does():
    # the second write's index is out of range: the runner checks every region before it
    # writes any, so the eager rerun that raises the error does not add v to row i twice
    f = kiln.compile(_two_rows)
    v = np.arange(10.0)
    # both writes are region writes of the compiled part (the path this test is about)
    report = run_both(_two_rows, np.zeros((500, 10)), v, 3, 5)
    assert eager_nodes(report) == 0 and len(region_writes(report)) == 2
    for i, j in [(3, 5), (4, 6), (5, 500)]:
        ours, theirs = np.zeros((500, 10)), np.zeros((500, 10))
        errors = []
        for fn, arr in ((f, ours), (_two_rows, theirs)):
            try:
                fn(arr, v, i, j)
            except IndexError as e:
                errors.append(type(e))
        assert len(errors) in (0, 2)
        np.testing.assert_array_equal(ours, theirs)


def _step(hist, t):
    hist[t] = hist[t - 1] * 0.5 + 1.0
    return t


def test_a_negative_run_time_index_counts_from_the_end():
    # `hist[t - 1]` at t = 0 is the last row in NumPy: the program assumes 0 <= index < size,
    # so this call runs eagerly and reads and writes what NumPy does
    f = kiln.compile(_step)
    start = np.random.default_rng(0).random((1000, 16))
    for t in (3, 4, 0, -2):
        ours, theirs = start.copy(), start.copy()
        f(ours, t)
        _step(theirs, t)
        np.testing.assert_array_equal(ours, theirs)


def _row_read_after(hist, W, t):
    hist[t] = hist[t - 1] * 0.5
    return hist[t - 1] @ W  # a whole row of the array as the write left it


def test_a_row_read_after_the_write_keeps_the_eager_store():
    # the compiled program would have to hold the whole new array to read that row from it
    H, W = np.random.default_rng(1).random((20000, 64)), np.ones((64, 4))
    report = run_both(_row_read_after, H, W, 7)
    assert region_writes(report) == []
    assert eager_nodes(report) == 1

"""matmul operands that are views at affine offsets (a slice, a row, a column, a block, an
expanded vector) reach the library in place (`a_strided`/`b_strided`, lower_nn.cc), with no copy
kernel, and equal eager; a flipped view (a negative stride) is still copied first."""

from __future__ import annotations

import pytest
from corpus_util import fresh_capture  # noqa: F401 - autouse: empty caches around every test
from test_backend_compiled import rand, run_compiled

import kiln

CASES = {
    "row_dot_column": lambda a, b: a[2, :5] @ b[:5, 3],
    "block_times_block": lambda a, b: a[1:5, 2:7] @ b[3:8, :4],
    "column_as_vector": lambda a, b: b[:, 1] @ a[:, :9].T,
    "slice_times_whole": lambda a, b: a[:, 3:] @ b[:6],
    "batched_slices": lambda a, b: a.reshape(3, 3, 9)[:, 1:, 2:7] @ b[:5].reshape(1, 5, 9)[..., :3],
    "expanded_vector": lambda a, b: a[0:1, :9].expand(4, 9) @ b[:9, :2],
    "flipped": lambda a, b: a[2, :5].flip(0) @ b[:5, 3],
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [kiln.float32, kiln.float64])
def test_matmul_of_views_matches_eager(case, dtype):
    backend = run_compiled(CASES[case], rand(9, 9, dtype=dtype), rand(9, 9, seed=1, dtype=dtype),
                           tol=(1e-5, 1e-5))
    (report,) = backend.reports
    assert report.eager_nodes == 0
    (info,) = report.infos
    if case in ("row_dot_column", "flipped"):  # a dot: one reduction kernel over the views
        assert info["loop_nodes"] == 1 and info["extern_kernels"] == 0
    else:  # no copy kernel before the library call
        assert info["loop_nodes"] == 0


def test_dynamic_slice_bounds_reach_the_library_in_place():
    def fn(a, b, n):
        return a[n, :n] @ b[:n, n]

    backend = run_compiled(fn, rand(12, 12), rand(12, 12, seed=2), 4, dynamic=True,
                           calls=[(rand(12, 12, seed=3), rand(12, 12, seed=4), 9),
                                  (rand(12, 12, seed=5), rand(12, 12, seed=6), 0)])
    assert all(r.eager_nodes == 0 for r in backend.reports)

"""Loops whose slice lengths follow the index (`L[i, :i] @ x[:i]`: triangular solves and
factorizations) become one loop node whose body is typed with the index as a size symbol
(loops_uniform.index_sized), instead of unrolling into a graph of thousands of nodes.

Each case compares every result and every array written in place with NumPy's; the structure
checks say whether the loop became a node with a one-iteration body or was unrolled (when the
symbolic body would be wrong: a size read as a Python number, a carried value changing shape).
"""

import numpy as np
import pytest
from test_loop_nodes import eager_nodes, loop_nodes, run_both

from kiln._capture import loops


def trisolv(L, x, b):  # NPBench, unmodified
    for i in range(x.shape[0]):
        x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]


def back_substitution(A, y):  # ludcmp's last loop: slices after the index, run backwards
    x = np.zeros_like(y)
    for i in range(A.shape[0] - 1, -1, -1):
        x[i] = (y[i] - A[i, i + 1:] @ x[i + 1:]) / A[i, i]
    return x


def durbin(r):  # NPBench, unmodified: flips, an in-place update of a growing region
    y = np.empty_like(r)
    alpha = -r[0]
    beta = 1.0
    y[0] = -r[0]
    for k in range(1, r.shape[0]):
        beta *= 1.0 - alpha * alpha
        alpha = -(r[k] + np.dot(np.flip(r[:k]), y[:k])) / beta
        y[:k] += alpha * np.flip(y[:k])
        y[k] = alpha
    return y


def prefix_means(x):
    out = np.empty(x.shape[0] - 1)
    for i in range(1, x.shape[0]):
        out[i - 1] = x[:i].sum() / len(x[:i])  # the length as a Python number
    return out


def _lower(n, rng):
    return np.tril(rng.random((n, n))) + n * np.eye(n)


def _check_one_node(report, body_ops: int):
    assert report.graph_count == 1 and report.graph_break_count == 0
    (node,) = loop_nodes(report)
    assert node.target.body.op_count() <= body_ops
    assert eager_nodes(report) == 0


@pytest.fixture
def no_unroll(monkeypatch):
    """Small test loops become loop nodes too (a constant loop whose unrolled graph stays small
    is unrolled by default)."""
    monkeypatch.setattr(loops, "UNROLL_OPS", 0)


@pytest.mark.parametrize("n", [40, 257])
def test_trisolv_is_one_node_typed_by_the_index(n, no_unroll):
    rng = np.random.default_rng(0)
    L, b = _lower(n, rng), rng.random(n)
    want, got, report, wa, ga = run_both(trisolv, L, np.full(n, -999.0), b)
    np.testing.assert_allclose(ga[1], wa[1], rtol=1e-9)
    # the first iteration (empty slices) runs unrolled; the node's body is one iteration
    _check_one_node(report, body_ops=12)


def test_back_substitution_runs_backwards_with_slices_after_the_index(no_unroll):
    rng = np.random.default_rng(1)
    A, y = _lower(60, rng).T.copy(), rng.random(60)
    want, got, report, _, _ = run_both(back_substitution, A, y)
    np.testing.assert_allclose(got, want, rtol=1e-9)
    _check_one_node(report, body_ops=12)


def test_durbin_updates_a_growing_region_in_place(no_unroll):
    r = np.random.default_rng(2).random(120) * 0.1
    want, got, report, _, _ = run_both(durbin, r)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    _check_one_node(report, body_ops=40)


def test_a_size_read_as_a_number_keeps_the_loop_unrolled(no_unroll):
    """`len(x[:i])` is one iteration's number in the body: the loop is not a node."""
    x = np.random.default_rng(3).random(30)
    want, got, report, _, _ = run_both(prefix_means, x)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert not loop_nodes(report)


def test_a_carried_value_that_changes_shape_keeps_the_loop_unrolled(no_unroll):
    def grow(x):
        acc = x[:1]
        for i in range(1, 40):
            acc = x[:i] * 2 + acc[-1]  # its length follows the index
        return acc

    x = np.random.default_rng(4).random(50)
    want, got, report, _, _ = run_both(grow, x)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert not loop_nodes(report)


def test_a_prefix_sum_of_growing_slices_in_a_node_matches(no_unroll):
    """Reductions and broadcasts over a slice whose length follows the index."""
    def weighted(x, w):
        out = np.zeros(x.shape[0])
        for i in range(1, x.shape[0]):
            out[i] = (x[:i] * w[:i]).sum() + np.max(x[:i]) - x[i:].mean()
        return out

    rng = np.random.default_rng(5)
    want, got, report, _, _ = run_both(weighted, rng.random(90), rng.random(90))
    np.testing.assert_allclose(got, want, rtol=1e-10)
    _check_one_node(report, body_ops=20)


def test_sizes_the_rules_cannot_relate_keep_the_loop_unrolled(no_unroll):
    """`x[:i] * w[-i:]`: the shape rules do not prove the two lengths equal (the product is
    an opaque call in the typed body), so the loop unrolls, and stays right."""
    def weighted(x, w):
        out = np.zeros(x.shape[0])
        for i in range(1, x.shape[0]):
            out[i] = (x[:i] * w[-i:]).sum()
        return out

    rng = np.random.default_rng(6)
    want, got, report, _, _ = run_both(weighted, rng.random(30), rng.random(30))
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert not loop_nodes(report)

"""A loop node inside a loop node's body: an inner `for j in range(i)` over the outer index is
a loop of run-time length, one node whose sizes follow j (a Cholesky or LU step), and the outer
loop is one node around it. Before, the outer index had to be a Python int for the inner range,
so the outer loop unrolled, and each inner one with it: a 100x100 Cholesky was a graph of
tens of thousands of nodes and two minutes of compile time.

The inner loop's first iteration has empty slices (`A[i, :0]`); it runs unrolled in the outer
body, which is only right where the inner range has one (`i > 0`): the outer node checks that
over its indices, and the outer loop's own first iterations run unrolled while the inner range
is too short to capture. Results and arrays written in place are compared with NumPy's."""

import operator

import numpy as np
import pytest
from test_loop_nodes import K, assert_same, eager_nodes, loop_nodes, run_both

import kiln
from kiln._capture import loops
from kiln._capture.loops import LoopCall


def cholesky(A):  # NPBench, unmodified
    A[0, 0] = np.sqrt(A[0, 0])
    for i in range(1, A.shape[0]):
        for j in range(i):
            A[i, j] -= np.dot(A[i, :j], A[j, :j])
            A[i, j] /= A[j, j]
        A[i, i] -= np.dot(A[i, :i], A[i, :i])
        A[i, i] = np.sqrt(A[i, i])


def lu(A):  # NPBench's ludcmp elimination, unmodified
    n = A.shape[0]
    for i in range(n):
        for j in range(i):
            A[i, j] -= A[i, :j] @ A[:j, j]
            A[i, j] /= A[j, j]
        for j in range(i, n):
            A[i, j] -= A[i, :i] @ A[:i, j]


def _spd(n, seed=0):
    A = np.random.default_rng(seed).random((n, n))
    return A @ A.T + n * np.eye(n)


def _nested(report):
    """(outer loop nodes, inner loop nodes in their bodies)."""
    outer = loop_nodes(report)
    inner = [n for o in outer for n in o.target.body.nodes
             if n.op == "call" and isinstance(n.target, LoopCall)]
    return outer, inner


def _body_reports(reports) -> list:
    """The partition reports of every loop body, nested ones included."""
    out = []
    for r in reports:
        out += r.loops + _body_reports(r.loops)
    return out


@pytest.mark.parametrize("n", [12, 40, 100])
def test_cholesky_is_a_node_around_a_node(n):
    want, got, report, wa, ga = run_both(cholesky, _spd(n))
    np.testing.assert_allclose(np.tril(ga[0]), np.tril(wa[0]), rtol=1e-10)
    outer, inner = _nested(report)
    if n >= 40:  # (at 12 the whole loop is small enough to unroll)
        assert len(outer) == 1 and len(inner) == 1
        assert report.op_count < 100  # one outer iteration's graph, not n * n / 2 of them
        bodies = _body_reports([c.report for c in report.captures if c.report])
        assert len(bodies) == 2 and all(r.eager_nodes == 0 for r in bodies)
        # before the loop, the first element and the peeled first row: a few single-element
        # writes the graph reads by slices afterwards, on the eager kernel at large n
        assert eager_nodes(report) <= 5


def test_lu_with_two_inner_loops():
    want, got, report, wa, ga = run_both(lu, _spd(48, seed=1))
    np.testing.assert_allclose(ga[0], wa[0], rtol=1e-9)
    outer, inner = _nested(report)
    nests = [o for o in outer if any(n.op == "call" and isinstance(n.target, LoopCall)
                                     for n in o.target.body.nodes)]
    assert len(nests) == 1 and len(inner) == 2
    # the outer loop's first two iterations run unrolled (at i = 0 and 1 the first inner range
    # is too short to capture); their second inner loop, whose row writes follow its index, is a
    # loop node of its own in each (unrolled, its n writes would lower to a chain of n region
    # tests per element of the row)
    assert len(outer) == 3
    assert report.op_count < 15 * 48


def test_the_compiled_nest_runs_for_other_sizes_and_values():
    compiled = kiln.compile(cholesky)
    for n, seed in [(40, 0), (40, 3), (64, 1)]:
        ours, theirs = _spd(n, seed), _spd(n, seed)
        compiled(ours)
        cholesky(theirs)
        np.testing.assert_allclose(np.tril(ours), np.tril(theirs), rtol=1e-10)
    report = kiln.explain(cholesky)(_spd(64, 2))  # the new size: a nest of nodes again
    outer, inner = _nested(report)
    assert len(outer) == 1 and len(inner) == 1 and report.op_count < 100


def starts_at_zero(A):
    """The outer range starts at 0: the inner `range(i)` is empty at i = 0, where its peeled
    first iteration would be wrong; the node leaves that iteration out (unrolled)."""
    for i in range(A.shape[0]):
        for j in range(i):
            A[i, j] = A[i, :j].sum() + A[j, j]
    return A


def test_an_inner_range_empty_at_the_first_outer_index():
    want, got, report, wa, ga = run_both(starts_at_zero, np.random.default_rng(2).random((40, 40)))
    np.testing.assert_allclose(ga[0], wa[0], rtol=1e-12)


def reassigns_outer_index(a):
    """The inner loop assigns the outer loop's index, which the outer body reads after it: the
    inner loop's last value, not the outer index."""
    acc = np.zeros(4)
    for j in range(3):
        for _ in range(10):
            a = a * 1.01
            j = a[0] * 2  # noqa: PLW2901 - the point of the test
        acc = acc + j
    return acc, a


def test_an_inner_loop_that_assigns_the_outer_index(monkeypatch):
    monkeypatch.setattr(loops, "UNROLL_OPS", 0)  # loop nodes, not unrolled
    x = np.ones(4)
    got, want = kiln.compile(reassigns_outer_index)(x), reassigns_outer_index(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def sums_over_both_indices(A):
    """The inner body's sizes follow j and the outer index i (`A[j, :i]`): its shape rules
    relate the two, which the inner loop's check cannot evaluate with j alone."""
    for i in range(1, A.shape[0]):
        for j in range(i):
            A[i, j] = A[i, :j].sum() * 0.01 + A[j, :i].mean()
    return A


def test_an_inner_body_whose_sizes_follow_both_indices():
    x = np.random.default_rng(4).random((100, 100))
    ours, theirs = x.copy(), x.copy()
    kiln.compile(sums_over_both_indices)(ours)
    sums_over_both_indices(theirs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)


def _outer_around_run_time_inner(A, m):
    for _ in range(3000):
        A = A * 0.5 + 1.0
        for _ in range(m):
            A = A + 1.0
    return A


def test_an_inner_loop_empty_at_capture_keeps_the_outer_loop_a_node():
    # `range(m)` of a run-time m that is 0 at the call: not the outer index, so the outer loop
    # does not peel iterations for it (and then unroll 3000 of them)
    compiled = kiln.compile(_outer_around_run_time_inner)
    x = np.random.default_rng(5).random(500)
    for m in (1, 0, 3):
        np.testing.assert_allclose(compiled(x.copy(), m), _outer_around_run_time_inner(x, m),
                                   rtol=1e-12)
    report = kiln.explain(_outer_around_run_time_inner)(x.copy(), 0)
    assert report.op_count < 50


def test_writes_that_follow_the_index_keep_a_small_loop_a_node():
    """The benchmark's maxpool2d: 12 x 12 writes of `out[:, i, j, :]` are few ops on small
    arrays, but unrolled they would be a chain of 144 region tests per output element (and a
    kernel that compiles for seconds): the inner loop's 12 unroll into the outer loop's body,
    and the outer loop is a node."""
    x = np.random.default_rng(0).random((2, 24, 24, 3))
    want, got, report, _, _ = run_both(K.maxpool2d, x)
    assert_same(got, want)
    (node,) = loop_nodes(report)
    writes = [n for n in node.target.body.nodes if n.target is operator.setitem]
    assert len(writes) == 12

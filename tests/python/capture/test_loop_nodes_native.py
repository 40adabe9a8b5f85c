"""A loop node whose body compiled to one part runs its iterations in C++
(CompiledGraph.loop, through backend_compiled._PartLoop): no Python per iteration. An iteration
whose inputs the compiled body does not take (a size it was not compiled for, inputs sharing
storage while the body writes into them) ends the native run there; the rest runs the Python
way, with the same results."""

import textwrap

import numpy as np
import pytest
from test_backend_compiled import rand
from test_loop_nodes import loop_nodes, run_both

import kiln
from kiln._capture import backend_compiled, loops

C = kiln._C._compiler
P = kiln._C._ir.parse


@pytest.fixture
def no_unroll(monkeypatch):
    monkeypatch.setattr(loops, "UNROLL_OPS", 0)


@pytest.fixture
def python_part_calls(monkeypatch):
    """How many times a compiled part was called from Python."""
    calls = []
    original = backend_compiled._CompiledPart.__call__

    def counted(self, *args):
        calls.append(self.__name__)
        return original(self, *args)

    monkeypatch.setattr(backend_compiled._CompiledPart, "__call__", counted)
    return calls


def relax(a, b, steps):
    for _ in range(steps):
        a[1:-1] += 0.25 * (b[2:] - 2 * b[1:-1] + b[:-2])
        b = a * 0.5 + b * 0.5
    return b


def test_iterations_run_in_cpp_with_no_python_part_call(no_unroll, python_part_calls):
    rng = np.random.default_rng(0)
    a, b = rng.random(50), rng.random(50)
    want, got, report, wa, ga = run_both(relax, a, b, 30)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(ga[0], wa[0], rtol=1e-12)
    (node,) = loop_nodes(report)
    compiled = kiln.compile(relax)
    compiled(a.copy(), b.copy(), 30)
    python_part_calls.clear()
    a2, b2 = a.copy(), b.copy()
    np.testing.assert_allclose(compiled(a2, b2, 30), want, rtol=1e-12)
    np.testing.assert_allclose(a2, wa[0], rtol=1e-12)
    assert python_part_calls == []  # 30 iterations, none through Python


def test_inputs_sharing_storage_leave_the_native_loop(no_unroll):
    """`relax(x, x, n)`: the body writes `a` and reads `b`, the same array: each iteration
    must see the last one's writes through both names, as NumPy does."""
    x = np.random.default_rng(1).random(40)
    want_x, got_x = x.copy(), x.copy()
    want = relax(want_x, want_x, 12)
    got = kiln.compile(relax)(got_x, got_x, 12)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    np.testing.assert_allclose(got_x, want_x, rtol=1e-12)


def test_loop_stops_where_the_compiled_body_does_not_fit():
    """The body shortens its carried vector on each run: the second run's input no longer has
    the compiled size, so the native loop stops there and says where."""
    g = C.compile_graph(P(textwrap.dedent("""\
        graph @body(%x: f32[6], %i: int) {
          %two = full() {dtype = f32, size = [], value = 2} : f32[]
          %0 = mul(%x, %two) : f32[6]
          %1 = slice(%0) {end = 5} : f32[5]
          return %1
        }
        """)))
    x = rand(6)
    args = [x, 0]
    at, outputs, _ = g.loop(3, 9, 2, args, [0], 1, False)
    assert at == 5  # ran the iteration at 3; the one at 5 did not fit
    assert outputs[0] is args[0]
    np.testing.assert_allclose(args[0].numpy(), (x * 2)[:5].numpy())
    at, outputs, _ = g.loop(9, 3, -2, [x, 0], [0], 1, False)
    assert at == 7 and outputs is not None
    assert g.loop(4, 4, 1, [x, 0], [0], 1, False) == (4, None, False)
    with pytest.raises(RuntimeError, match="must not be zero"):
        g.loop(0, 4, 0, [x, 0], [0], 1, False)


def test_shared_storage_stops_a_body_that_writes_its_inputs():
    g = C.compile_graph(P(textwrap.dedent("""\
        graph @body(%x: f32[4], %y: f32[4]) {
          %0 = add(%x, %y) : f32[4]
          return %0
        }
        """)))
    x = rand(8)
    args = [x[:4], x[4:]]  # one storage
    assert g.loop(0, 3, 1, args, [0], -1, True) == (0, None, False)
    at, outputs, _ = g.loop(0, 3, 1, list(args), [0], -1, False)
    assert at == 3
    np.testing.assert_allclose(outputs[0].numpy(), (x[:4] + 3 * x[4:]).numpy(), rtol=1e-6)


def solve(b, R, D, tol, maxiter):
    x = np.zeros_like(b)
    for _ in range(maxiter):
        x_new = (b - R @ x) / D
        if np.abs(x_new - x).max() < tol:
            break  # returns the x before x_new, the body's input as it came
        x = x_new
    return x


def _system(n, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.random((n, n)) + np.eye(n) * n
    D = np.diag(A).copy()
    return rng.random(n), A - np.diag(D), D


@pytest.mark.parametrize("tol,maxiter", [(1e-10, 500), (1e-10, 3), (10.0, 50)])
def test_a_loop_that_breaks_runs_in_cpp(no_unroll, python_part_calls, tol, maxiter):
    """The break test is one of the body's outputs: the native loop stops at the run whose
    test holds and returns that run's break values; it converges (500), runs out of
    iterations first (3) or breaks on the first run (10.0)."""
    b, R, D = _system(40)
    compiled = kiln.compile(solve)
    compiled(b, R, D, tol, maxiter)
    python_part_calls.clear()
    got = compiled(b, R, D, tol, maxiter)
    np.testing.assert_allclose(got, solve(b, R, D, tol, maxiter), rtol=1e-12)
    assert len(python_part_calls) <= 1  # the zeros before the loop; no iteration from Python


def _swap(a, b, steps):
    for _ in range(steps):
        a, b = b * 0.5, a + 1.0  # outputs in another order than the part computes them
    return a, b


def test_outputs_in_another_order_than_the_part_returns_them(no_unroll, python_part_calls):
    a, b = np.random.default_rng(2).random(6), np.random.default_rng(3).random(6)
    compiled = kiln.compile(_swap)
    compiled(a, b, 9)
    python_part_calls.clear()
    got = compiled(a, b, 9)
    want = _swap(a, b, 9)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert python_part_calls == []


def _previous(x, steps):
    for _ in range(steps):
        prev = x
        x = x * 0.5 + 1.0
    return x, prev


def test_a_body_input_returned_as_it_came_is_the_last_run_input(no_unroll):
    # `prev` is the last run's x, not the x the loop leaves: the native loop cannot read it back
    # from the arguments it has fed, so this loop runs its iterations the Python way
    x = np.arange(2000.0)
    got, want = kiln.compile(_previous)(x.copy(), 10), _previous(x.copy(), 10)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def shifted_double(x, out, k):
    for i in range(out.shape[0]):
        out[i] = x[i + k] * 2.0
    return out


def test_an_index_assumption_failing_mid_loop_ends_the_native_run(python_part_calls):
    """Between iterations only the index is rebound; the assumptions that mention it (here
    i + k < len(x)) are checked again on every one, so the run stops where NumPy raises, with the
    rows before it written once."""
    x = np.arange(20.0)
    compiled = kiln.compile(shifted_double)
    np.testing.assert_array_equal(compiled(x, np.zeros(20), 0), x * 2)
    python_part_calls.clear()
    np.testing.assert_array_equal(compiled(x, np.zeros(17), 3), x[3:] * 2)  # in range
    assert python_part_calls == []  # the native loop ran every iteration
    ours, theirs = np.zeros(20), np.zeros(20)
    for fn, out in ((compiled, ours), (shifted_double, theirs)):
        with pytest.raises(IndexError):
            fn(x, out, 3)
    np.testing.assert_array_equal(ours, theirs)
    assert theirs[16] == 38.0 and theirs[17] == 0.0


def smooth(a, b, steps):
    for _ in range(steps):
        b = a * 0.25 + b * 0.75
        a = b - a * 0.5
    return a, b


def test_carried_results_reuse_memory_but_never_the_callers_arrays(no_unroll, python_part_calls):
    """A run's result two iterations back is the memory the next result is computed in; the
    caller's arrays (the first iteration's inputs) and what the call returns stay their own."""
    rng = np.random.default_rng(3)
    a0, b0 = rng.random(5000), rng.random(5000)
    a, b = a0.copy(), b0.copy()
    compiled = kiln.compile(smooth)
    want = smooth(a0.copy(), b0.copy(), 40)
    _, _, report, _, _ = run_both(smooth, a0, b0, 40)
    (node,) = loop_nodes(report)
    got = compiled(a, b, 40)
    python_part_calls.clear()
    again = compiled(a, b, 41)
    assert python_part_calls == []  # the native loop ran every iteration
    np.testing.assert_array_equal(a, a0)  # rebinding a and b never wrote the caller's arrays
    np.testing.assert_array_equal(b, b0)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    for g, w in zip(again, smooth(a0.copy(), b0.copy(), 41), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert not np.shares_memory(again[0], again[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)  # the first call's results intact

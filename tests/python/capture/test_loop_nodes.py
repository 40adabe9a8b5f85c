"""Python `for` loops over a long range become one loop node (kiln/_capture/loops.py).

Each case runs the same function under NumPy/eager and kiln.compile and compares every result
and every array written in place; the structure checks say whether the loop became a node
(with a body graph of one iteration's size) or was unrolled, and that nothing ran on eager
kernels.
"""

import importlib.util
import os
import sys

import numpy as np
import pytest
from corpus_util import compiler_of

import kiln
from kiln._capture import loops
from kiln._capture.loops import LoopCall

# The NPBench-style kernels of the benchmark, unmodified (one module, whichever test loads it)
K = sys.modules.get("numpy_kernels")
if K is None:
    _spec = importlib.util.spec_from_file_location(
        "numpy_kernels", os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench",
                                      "numpy_kernels.py"))
    K = sys.modules["numpy_kernels"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(K)
jacobi_2d, jacobi_solve, heat_3d = K.jacobi_2d, K.jacobi_solve, K.heat_3d


@pytest.fixture
def no_unroll(monkeypatch):
    """Small test loops become loop nodes too (by default a constant loop whose unrolled graph
    stays small is unrolled)."""
    monkeypatch.setattr(loops, "UNROLL_OPS", 0)


def loop_nodes(report) -> list:
    return [n for g in report.graphs for n in g.nodes if isinstance(n.target, LoopCall)]


def eager_nodes(report) -> int:
    return sum(c.report.eager_nodes for c in report.captures if c.report is not None)


def run_both(fn, *args):
    """fn on copies of args eagerly and through kiln.explain; returns (want, got, report, want
    args, got args)."""
    want_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    got_args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    want = fn(*want_args)
    kiln.compiler.reset()
    report = kiln.explain(fn)(*got_args)
    return want, report.result, report, want_args, got_args


def assert_same(got, want):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_same(g, w)
        return
    if isinstance(want, kiln.Tensor):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
        return
    assert type(got) is type(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_stencil_time_loop_is_one_node_with_one_iteration_body():
    rng = np.random.default_rng(0)
    A = rng.random((30, 40))
    want, got, report, wa, ga = run_both(jacobi_2d, 200, A, A.copy())
    for w, g in zip(wa[1:], ga[1:], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert report.graph_count == 1 and report.graph_break_count == 0
    (node,) = loop_nodes(report)
    body = node.target.body
    assert body.op_count() < 40  # one iteration (24 ops), not 199 copies
    assert report.op_count == 1  # the loop node is the whole graph
    assert eager_nodes(report) == 0
    assert "loop node" in report.report()


def test_run_time_step_count_does_not_recompile_per_value():
    compiled = kiln.compile(jacobi_2d)
    records: list = []
    compiler_of(compiled).recorder = records
    rng = np.random.default_rng(1)
    for steps in [9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 1, 0]:
        A = rng.random((12, 12))
        want_a, want_b = A.copy(), A.copy()
        got_a, got_b = A.copy(), A.copy()
        jacobi_2d(steps, want_a, want_b)
        compiled(steps, got_a, got_b)
        np.testing.assert_allclose(got_a, want_a, rtol=1e-12)
        np.testing.assert_allclose(got_b, want_b, rtol=1e-12)
    # the first count, then one graph whose loop node takes the count at run time
    assert len(records) == 2, [r.recompile_reason for r in records]
    assert not any("L['steps'] ==" in g for g in records[-1].guards)


def test_rebound_arrays_are_carried_and_fed_back(no_unroll):
    def gd(X, y, lr, steps):
        w = np.zeros(X.shape[1])
        b = 0.0 * y[:1]
        for _ in range(steps):
            r = X @ w + b - y
            w = w - lr * (X.T @ r) / X.shape[0]
            b = b - lr * r.mean(keepdims=True)
        return w, b

    rng = np.random.default_rng(2)
    want, got, report, _, _ = run_both(gd, rng.random((40, 6)), rng.random(40), 0.1, 30)
    assert_same(got, want)
    assert len(loop_nodes(report)) == 1 and eager_nodes(report) == 0


def test_in_place_update_of_an_input_is_seen_by_the_caller(no_unroll):
    def sgd(w, X, y, lr):
        for _ in range(25):
            grad = X.T @ (X @ w - y) / X.shape[0]
            w -= lr * grad
        return np.mean((X @ w - y) ** 2)

    rng = np.random.default_rng(3)
    want, got, report, wa, ga = run_both(sgd, np.zeros(5), rng.random((50, 5)),
                                         rng.random(50), 0.1)
    assert_same(got, want)
    np.testing.assert_allclose(ga[0], wa[0], rtol=1e-12)
    assert len(loop_nodes(report)) == 1 and eager_nodes(report) == 0


def test_swapped_buffers_alternate_between_the_callers_arrays(no_unroll):
    def swap(steps, A, B):
        for _ in range(steps):
            B[1:-1] = 0.33333 * (A[:-2] + A[1:-1] + A[2:])
            A, B = B, A
        return A

    rng = np.random.default_rng(4)
    for steps in (9, 10):
        A, B = rng.random(64), rng.random(64)
        want_a, want_b, got_a, got_b = A.copy(), B.copy(), A.copy(), B.copy()
        want = swap(steps, want_a, want_b)
        kiln.compiler.reset()
        got = kiln.compile(swap)(steps, got_a, got_b)
        np.testing.assert_allclose(got_a, want_a, rtol=1e-12)
        np.testing.assert_allclose(got_b, want_b, rtol=1e-12)
        # the returned array is the caller's array the last swap left in A (a view of it)
        assert np.shares_memory(got, got_a if want is want_a else got_b)


def test_temporaries_read_after_the_loop_hold_the_last_iteration(no_unroll):
    def f(a):
        for i in range(10):  # noqa: B007 - read after the loop
            tmp = a * 2.0
            a = a + tmp * 0.01
        return a, tmp, i

    want, got, report, _, _ = run_both(f, np.linspace(0.0, 1.0, 17))
    assert_same(got[:2], want[:2])
    assert got[2] == want[2] == 9
    assert len(loop_nodes(report)) == 1 and eager_nodes(report) == 0


def test_the_index_is_a_run_time_value_of_the_body(no_unroll):
    def escape_time(cr, ci, steps):
        zr, zi = np.zeros_like(cr), np.zeros_like(ci)
        n = np.zeros(cr.shape, dtype=np.int64)
        for k in range(steps):
            inside = zr * zr + zi * zi < 4.0
            n[inside] = k
            zr, zi = (np.where(inside, zr * zr - zi * zi + cr, zr),
                      np.where(inside, 2.0 * zr * zi + ci, zi))
        return n

    cr, ci = np.meshgrid(np.linspace(-2.0, 0.5, 40), np.linspace(-1.2, 1.2, 30))
    want, got, report, _, _ = run_both(escape_time, cr, ci, 25)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype
    (node,) = loop_nodes(report)
    assert node.target.index_slot is not None
    assert eager_nodes(report) == 0


def test_an_index_needed_as_a_constant_runs_that_op_eagerly(no_unroll):
    def rolls(a, steps):
        for k in range(steps):
            a = a + np.roll(a, k) * 0.01
        return a

    want, got, report, _, _ = run_both(rolls, np.arange(7.0), 30)
    assert_same(got, want)  # each iteration rolls by its own k, not by the first one's
    assert len(loop_nodes(report)) == 1
    fallbacks = [f for graph in report.fallbacks for f in graph]
    assert any("changes between loop iterations" in reason for _, _, reason in fallbacks)


def test_a_branch_on_the_index_unrolls(no_unroll):
    def every_other(a, steps):
        for k in range(steps):
            if k % 2 == 0:
                a = a + 1.0
        return a

    want, got, report, _, _ = run_both(every_other, np.arange(3.0), 12)
    assert_same(got, want)
    assert loop_nodes(report) == []


@pytest.mark.parametrize("case", ["break", "list", "type_change", "shape_change"])
def test_loops_one_iteration_cannot_stand_for_are_unrolled(case, no_unroll):
    def breaks(a):
        for _ in range(10):
            a = a * 1.5
            if a.shape[0] > 3:
                break
        return a

    def appends(a):
        seen = []
        for _ in range(10):
            a = a + 1.0
            seen.append(a)
        return a, seen[3]

    def changes_type(a):
        acc = None
        for _ in range(10):
            acc = a * 2.0 if acc is None else acc + a
        return acc

    def changes_shape(a):
        for _ in range(8):
            a = np.concatenate([a, a[:1]])
        return a

    fn = {"break": breaks, "list": appends, "type_change": changes_type,
          "shape_change": changes_shape}[case]
    want, got, report, _, _ = run_both(fn, np.arange(5.0))
    assert_same(got, want)
    assert loop_nodes(report) == []
    assert report.graph_break_count == 0


def test_kiln_tensor_loop_and_nested_loops(no_unroll):
    def f(x, y):
        for _ in range(12):
            for _ in range(9):
                x = x * 0.5 + y
            y = y.sin()
        return x, y

    x, y = kiln.randn(4, 8), kiln.randn(4, 8)
    want = f(x, y)
    kiln.compiler.reset()
    report = kiln.explain(f)(x, y)
    assert_same(report.result, want)
    (outer,) = loop_nodes(report)
    inner = [n for n in outer.target.body.nodes if isinstance(n.target, LoopCall)]
    assert len(inner) == 1
    assert eager_nodes(report) == 0
    assert report.report().count("loop node") == 2


def test_values_that_require_grad_unroll_and_train_like_eager(no_unroll):
    def f(x, w):
        for _ in range(10):
            x = (x * w).tanh()
        return x.sum()

    x = kiln.randn(3, 4)
    w1 = kiln.randn(4).requires_grad_()
    w2 = w1.detach().clone().requires_grad_()
    f(x, w1).backward()
    kiln.compiler.reset()
    report = kiln.explain(f)(x, w2)
    report.result.backward()
    np.testing.assert_allclose(w2.grad.numpy(), w1.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert loop_nodes(report) == []


def test_custom_backend_runs_the_loop_body_as_python(no_unroll):
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm

    rng = np.random.default_rng(5)
    A = rng.random((10, 10))
    want_a, want_b, got_a, got_b = A.copy(), A.copy(), A.copy(), A.copy()
    jacobi_2d(20, want_a, want_b)
    kiln.compiler.reset()
    kiln.compile(jacobi_2d, backend=backend)(20, got_a, got_b)
    np.testing.assert_allclose(got_a, want_a, rtol=1e-12)
    assert any(isinstance(n.target, LoopCall) for g in seen for n in g.nodes)
    assert "kiln_loop(" in seen[0].code


def test_a_graph_break_in_the_body_unrolls_and_still_matches(no_unroll):
    def f(a):
        for _ in range(9):
            a = a + 1.0
            print(end="")
        return a

    want, got, report, _, _ = run_both(f, np.arange(3.0))
    assert_same(got, want)
    assert loop_nodes(report) == []
    assert report.graph_break_count >= 1


def test_a_short_constant_loop_is_unrolled_and_fuses_across_iterations():
    def f(a):
        for _ in range(10):
            a = a * 0.5 + 1.0
        return a

    want, got, report, _, _ = run_both(f, np.arange(6.0))
    assert_same(got, want)
    assert loop_nodes(report) == []  # 10 x 2 ops on 6 elements: below loops.UNROLL_OPS
    assert eager_nodes(report) == 0


def test_a_constant_loop_on_large_arrays_is_a_node():
    def f(a):
        for _ in range(10):
            a = a * 0.5 + 1.0
        return a

    want, got, report, _, _ = run_both(f, np.arange(float(loops.SMALL_ELEMENTS)))
    assert_same(got, want)
    assert len(loop_nodes(report)) == 1 and eager_nodes(report) == 0


def test_symbolic_sizes_flow_through_the_loop_node(no_unroll):
    def f(x, y, n):
        for _ in range(n):
            x = (x * 0.5 + y).tanh()
        return x.sum(-1)

    compiled = kiln.compile(f)
    records: list = []
    compiler_of(compiled).recorder = records
    for batch in (4, 5, 6, 9):
        x, y = kiln.randn(batch, 16), kiln.randn(batch, 16)
        assert_same(compiled(x, y, 200), f(x, y, 200))
    assert len(records) == 2  # static, then one graph for every batch size
    report = records[-1].report
    (body,) = report.loops
    # the body and the part after the loop ran compiled for every size (no specialization)
    assert report.eager_calls == 0 and body.eager_calls == 0
    assert report.eager_nodes == 0


def test_a_loop_bound_that_went_symbolic_runs_the_body_compiled(no_unroll):
    """NPBench's azimint_naive with another `npt`: the bound and the loop index are both int
    inputs of the body; they once shared a symbol, so every iteration ran eagerly."""
    def f(x, n):
        res = kiln.zeros(n, dtype=x.dtype)
        for i in range(n):
            res[i] = (x * i / n).sum()
        return res

    compiled = kiln.compile(f)
    records: list = []
    compiler_of(compiled).recorder = records
    for n in (20, 100, 150):
        x = kiln.randn(64, dtype=kiln.float64)
        assert_same(compiled(x, n), f(x, n))
    report = records[-1].report
    (body,) = report.loops
    assert body.eager_calls == 0 and report.eager_calls == 0


def test_export_unrolls_long_loops_into_one_program(no_unroll):
    def damped(x, y):
        for _ in range(12):
            x = x * 0.9 + y
        return x

    x, y = kiln.randn(3, 4), kiln.randn(3, 4)
    program = kiln.export(damped, (x, y))
    assert "kiln_loop" not in program.graph_text
    assert_same(program.module()(x, y), damped(x, y))


def test_a_body_using_a_parameter_that_requires_grad_unrolls(no_unroll):
    def fill(w, steps):
        out = kiln.zeros(steps, 4)
        for t in range(steps):
            out[t] = (w * 0.5).tanh()
        return out.sum()

    w1 = kiln.randn(4).requires_grad_()
    w2 = w1.detach().clone().requires_grad_()
    fill(w1, 10).backward()
    kiln.compiler.reset()
    report = kiln.explain(fill)(w2, 10)
    report.result.backward()
    np.testing.assert_allclose(w2.grad.numpy(), w1.grad.numpy(), rtol=1e-5)
    assert loop_nodes(report) == []


@pytest.mark.parametrize("tol", [1e-3, 1e-10, 1e-300, 10.0])  # early, late, never, at once
def test_a_data_dependent_break_ends_the_loop_node(tol, no_unroll):
    rng = np.random.default_rng(6)
    n = 40
    A = rng.random((n, n)) + n * np.eye(n)
    D = np.diag(A).copy()
    want, got, report, _, _ = run_both(jacobi_solve, rng.random(n), A - np.diag(D), D, tol, 200)
    np.testing.assert_array_equal(got, want)  # the same iterate: the break at the same step
    (node,) = loop_nodes(report)
    assert node.target.breaks_when is True
    assert report.graph_break_count == 0 and eager_nodes(report) == 0


def test_break_with_values_rebound_before_the_test_and_kiln_tensors(no_unroll):
    def iterate(x, y, steps):
        for _ in range(steps):
            x = (x * 0.5 + y).tanh()
            if (x - y).abs().max() < 0.3:
                break
        return x

    for steps in (50, 2000):
        x, y = kiln.randn(3, 5), kiln.randn(3, 5) * 0.1
        want = iterate(x, y, steps)
        kiln.compiler.reset()
        report = kiln.explain(iterate)(x, y, steps)
        assert_same(report.result, want)
        assert len(loop_nodes(report)) == 1 and eager_nodes(report) == 0


def test_a_write_after_the_break_test_unrolls(no_unroll):
    def writes_after(a, out):
        for _ in range(20):
            a = a * 0.9
            if a.sum() < 1.0:
                break
            out[0] += 1.0  # runs only on iterations that do not break
        return a

    a = np.full(4, 3.0)
    want_out, got_out = np.zeros(1), np.zeros(1)
    want = writes_after(a.copy(), want_out)
    kiln.compiler.reset()
    report = kiln.explain(writes_after)(a.copy(), got_out)
    assert_same(report.result, want)
    np.testing.assert_array_equal(got_out, want_out)
    assert loop_nodes(report) == []


@pytest.mark.parametrize("unroll", [True, False])
def test_an_iterator_advanced_in_the_body_is_not_one_iteration(unroll, monkeypatch):
    if not unroll:
        monkeypatch.setattr(loops, "UNROLL_OPS", 0)

    def f(a):
        it = iter(range(100))
        for _ in range(10):
            a = a + next(it)
        return a

    want, got, report, _, _ = run_both(f, np.arange(4.0))
    assert_same(got, want)  # 45 added: each iteration its own item, none skipped
    assert loop_nodes(report) == []


def test_a_carried_tensor_rebound_to_a_number_unrolls(no_unroll):
    def f(a):
        x = a * 1.0
        for _ in range(20):
            a = a + x
            x = 0.0
        return a

    want, got, report, _, _ = run_both(f, np.arange(4.0))
    assert_same(got, want)
    assert loop_nodes(report) == []


def test_an_outer_break_survives_an_inner_loop_node(no_unroll):
    def f(a, b):
        for _ in range(50):
            for _ in range(10):
                b = b * 0.9 + 0.01
            a = a + b
            if a.sum() > 20.0:
                break
        return a, b

    want, got, report, _, _ = run_both(f, np.zeros(3), np.ones(3))
    assert_same(got, want)
    (outer,) = loop_nodes(report)
    assert outer.target.breaks_when is True
    assert eager_nodes(report) == 0


def test_a_body_long_enough_for_extended_jump_arguments(no_unroll):
    import dis

    back = [i for i in dis.get_instructions(heat_3d) if i.opname == "JUMP_BACKWARD"]
    assert back and back[0].arg > 255  # the jump back lands on FOR_ITER's EXTENDED_ARG
    rng = np.random.default_rng(7)
    A = rng.random((6, 7, 8))
    want, got, report, wa, ga = run_both(heat_3d, 20, A, A.copy())
    for w, g in zip(wa[1:], ga[1:], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    assert len(loop_nodes(report)) == 1 and eager_nodes(report) == 0


def test_a_sampling_loop_over_a_module_under_no_grad_is_a_node(no_unroll):
    kiln.manual_seed(0)
    emb = kiln.nn.Embedding(64, 8)
    net = kiln.nn.Sequential(kiln.nn.Linear(8, 16), kiln.nn.SiLU(), kiln.nn.Linear(16, 8))

    def sample(x, steps):
        for t in range(steps):  # the parameters require grad; under no_grad nothing records
            x = x - 0.05 * net(x + emb(kiln.full((x.shape[0],), steps - 1 - t,
                                                 dtype=kiln.int64)))
        return x

    x = kiln.randn(4, 8)
    with kiln.no_grad():
        want = sample(x, 40)
        kiln.compiler.reset()
        report = kiln.explain(sample)(x, 40)
    assert_same(report.result, want)
    assert len(loop_nodes(report)) == 1
    # the module, the step's int arithmetic and the full() of it all compile
    reasons = [reason for graph in report.fallbacks for _, _, reason in graph]
    assert reasons == [] and eager_nodes(report) == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_arithmetic_with_the_index_compiles_with_numpy_dtypes(dtype, no_unroll):
    def weighted(a, steps):
        total = np.zeros_like(a)
        for k in range(steps):
            total += a * k  # a weak Python int: the array's dtype (NEP 50)
            a = np.sqrt(a + 1.0)
        return total, a

    a = np.random.default_rng(8).random(64).astype(dtype)
    want, got, report, _, _ = run_both(weighted, a, 25)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6 if dtype == np.float32 else 1e-12)
    assert len(loop_nodes(report)) == 1 and eager_nodes(report) == 0


def life(grid, steps):
    g = grid.astype(bool)  # computed in the graph: its sizes come from shape inference
    for _ in range(steps):
        n = np.zeros(g.shape, dtype=np.int8)
        n[1:, :] += g[:-1, :]
        n[:-1, :] += g[1:, :]
        n[:, 1:] += g[:, :-1]
        g = np.logical_and(g, n == 2)
    return g


def test_a_loop_body_is_symbolic_when_its_enclosing_graph_is(no_unroll):
    # at the second size the enclosing graph goes symbolic; the body, fed a value computed in
    # it, was compiled for the second size's example and failed at every later size
    from kiln._capture.backend_compiled import CpuBackend

    backend = CpuBackend(fallback=False)
    compiled = kiln.compile(life, backend=backend)
    rng = np.random.default_rng(0)
    for size in (12, 6, 12, 9):
        a = (rng.random((size, size)) < 0.5).astype(np.uint8)
        np.testing.assert_array_equal(compiled(a, 20), life(a, 20))
    assert len(backend.reports) == 2  # static, then symbolic (loop bodies compile inside)


@pytest.mark.parametrize("size", [4, 1 << 17])  # small (unrolled) and large (tried as a node)
def test_a_comprehension_of_tensors_keeps_every_item(size):
    # the comprehension's appends were not undone when its loop turned out not to be a node:
    # the list kept the body graph's value (a crash at the next break, or a lost item)
    def f(x, n):
        zs = [x * i for i in range(n)]
        if x.sum() > 0:  # a graph break after it
            x = x + 1
        for z in zs:
            x = x * 0.5 + z
        return x, len(zs)

    x = kiln.ones(size)
    want = f(x, 9)
    got = kiln.compile(f)(x, 9)
    assert got[1] == want[1] == 9
    assert kiln.allclose(got[0], want[0])


def logistic_gd(X, y, iters):
    w = np.zeros(X.shape[1])
    b = 0.0  # a Python float that is a NumPy value after the first step
    for _ in range(iters):
        g = 1.0 / (1.0 + np.exp(-(X @ w + b))) - y
        w -= 0.1 * (X.T @ g) / len(y)
        b -= 0.1 * g.mean()
    return w, b


def test_a_number_that_becomes_an_array_peels_the_first_iteration(no_unroll):
    # before, the whole loop unrolled: thousands of nodes, seconds of compile time, and a new
    # capture for every step count
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((50, 4)), (rng.standard_normal(50) > 0) * 1.0
    want, got, report, _, _ = run_both(logistic_gd, X, y, 40)
    assert_same(got, want)
    assert type(got[1]) is type(want[1])
    assert len(loop_nodes(report)) == 1
    body = loop_nodes(report)[0].target.body
    assert body.op_count() < 40  # one iteration's graph, not forty


def test_a_peeled_loop_with_one_trip_runs_only_the_peeled_iteration(no_unroll):
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((20, 3)), (rng.standard_normal(20) > 0) * 1.0
    for iters in (1, 2, 9):
        want, got, _, _, _ = run_both(logistic_gd, X, y, iters)
        assert_same(got, want)


def test_row_writes_into_a_large_history_are_written_in_place(no_unroll):
    # compiled as whole-array scatters, each row write rewrote the whole history on every step
    # (quadratic in the steps); now the body computes the rows and the runner stores each into
    # its region of the history, in place
    n = 64
    args = (np.full(n, 990.0), np.linspace(1, 10, n), np.zeros(n), 0.3, 0.1, 200)
    want, got, report, _, _ = run_both(K.sir_history, *args)
    assert_same(got, want)
    assert len(loop_nodes(report)) == 1
    (body_report,) = [r for c in report.captures if c.report for r in c.report.loops]
    assert body_report.fallbacks == [] and body_report.eager_nodes == 0
    (info,) = body_report.infos
    # hist[t, 0], hist[t, 1], hist[t, 2] = the three rows: one write of entry t of the history
    # (the loop index, a symbol), its three rows composed in the graph
    ((_, region),) = info["write_backs"]
    assert region.startswith(".select(0, s") and region.count(".") == 1


def _chunk_means(x, w, batch):
    for s in range(0, x.shape[0], batch):
        xb = x[s:s + batch]  # the last chunk is shorter
        w += xb.sum(axis=0) / len(xb)
    return w


def _window_means(x, width, step):
    n = x.shape[0] // step
    out = np.zeros(n)
    for k in range(n):
        seg = x[k * step:k * step + width]  # windows near the end are clipped
        out[k] = seg.sum() / seg.size
    return out


def _ramp_rows(x, out, batch):
    for s in range(0, x.shape[0], batch):
        xb = x[s:s + batch]
        out[s:s + batch] = xb[:, 0] * np.arange(len(xb))
    return out


@pytest.mark.parametrize("case", [
    (_chunk_means, lambda rng: (rng.random((400, 5)), np.zeros(5), 24), 1),
    (_window_means, lambda rng: (rng.random(2000), 30, 10), 2),
    (_ramp_rows, lambda rng: (rng.random((400, 3)), np.zeros(400), 24), 1),
], ids=["len_of_chunk", "size_of_window", "arange_of_len"])
def test_slices_clipped_by_the_arrays_end_leave_the_node_and_unroll(no_unroll, case):
    """The body is evaluated at the first index: the iterations whose slices the array's end
    clips (a shorter last chunk, so `len(xb)` differs) are not that program. The node covers
    the iterations before them and the clipped ones run unrolled after it."""
    fn, make_args, tail = case
    want, got, report, wa, ga = run_both(fn, *make_args(np.random.default_rng(7)))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    for w, g in zip(wa, ga, strict=True):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=1e-12)
    (node,) = loop_nodes(report)
    start, stop, step = node.args[:3]
    assert len(range(start, stop, step)) == {_chunk_means: 16, _window_means: 198,
                                             _ramp_rows: 16}[fn]
    assert report.graph_break_count == 0 and eager_nodes(report) == 0
    assert tail >= 1


def _jacobi(A, b, tol, maxit):
    x = np.zeros_like(b)
    D = np.diag(A)
    R = A - np.diagflat(D)
    err = np.inf
    for it in range(maxit):  # noqa: B007 - read after the loop
        x_new = (b - R @ x) / D
        err = np.max(np.abs(x_new - x))
        x = x_new
        if err < tol:
            break
    return x, it, err


def test_solver_that_breaks_returns_its_iteration_count_from_the_node():
    """`return x, it, err` after `if err < tol: break`: the node returns the index it stopped
    at, and `err = np.inf` before the loop starts as the 0-d array the loop makes of it (an
    unrolled first iteration would branch on the test in Python)."""
    rng = np.random.default_rng(4)
    A, b = rng.random((40, 40)) + 40 * np.eye(40), rng.random(40)
    for tol, maxit in [(1e-10, 500), (1e-3, 500), (1e-30, 12)]:  # converges early or runs out
        want, got, report, _, _ = run_both(_jacobi, A, b, tol, maxit)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        assert type(got[1]) is int and got[1] == want[1]
        assert type(got[2]) is type(want[2]) and got[2] == want[2]
        assert report.graph_count == 1 and report.graph_break_count == 0
        assert len(loop_nodes(report)) == 1 and eager_nodes(report) == 0


def test_index_after_a_loop_of_run_time_length_is_the_nodes_result(no_unroll):
    def halve(n, x):
        i = -1
        for i in range(n):  # noqa: B007 - read after the loop
            x = x * 0.5 + 1
        return x, i

    def halve_unbound(n, x):
        for i in range(n):  # noqa: B007 - read after the loop
            x = x * 0.5 + 1
        return x, i

    compiled = kiln.compile(halve)
    records: list = []
    compiler_of(compiled).recorder = records
    for n in [9, 14, 30, 0]:
        want, got = halve(n, np.ones(3)), compiled(n, np.ones(3))
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        assert got[1] == want[1]
    assert len(records) == 2  # the first count, then the run-time count
    unbound = kiln.compile(halve_unbound)
    for n in [9, 11]:
        assert unbound(n, np.ones(2))[1] == n - 1
    with pytest.raises(UnboundLocalError, match="'i'"):
        unbound(0, np.ones(2))


def test_arithmetic_on_the_index_after_the_loop_compiles_a_comparison_breaks():
    """`it + 1` of the index a breaking loop stopped at is computed by the entry; comparing it
    (a Python branch on it) breaks the graph there, where the resumed code has the int."""
    rng = np.random.default_rng(5)
    A, b = rng.random((20, 20)) + 20 * np.eye(20), rng.random(20)

    def steps_taken(A, b):
        x, it, err = _jacobi(A, b, 1e-8, 300)
        return x, it + 1, 2 * it - 3

    def converged(A, b):
        x, it, err = _jacobi(A, b, 1e-8, 300)
        return x, it < 299

    want, got, report, _, _ = run_both(steps_taken, A, b)
    assert got[1:] == want[1:] and type(got[1]) is int
    assert len(loop_nodes(report)) == 1 and report.graph_break_count == 0
    want, got, report, _, _ = run_both(converged, A, b)
    assert got[1] is want[1] is True
    assert report.graph_break_count == 1 and "only the run knows" in str(report.break_reasons[0])


def test_a_tolerance_that_changes_between_calls_stays_an_input_of_the_node():
    """The second tolerance makes it a run-time float: the body reads it as an input of its
    own, so the solver stays one loop node and later tolerances do not capture again."""
    rng = np.random.default_rng(6)
    A, b = rng.random((30, 30)) + 30 * np.eye(30), rng.random(30)
    compiled = kiln.compile(_jacobi)
    records: list = []
    compiler_of(compiled).recorder = records
    for tol in (1e-10, 1e-8, 1e-6, 1e-12, 1e-4):
        got, want = compiled(A, b, tol, 400), _jacobi(A, b, tol, 400)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        assert got[1:] == want[1:]
    assert len(records) == 2 and all(r.break_record is None for r in records)
    assert any(isinstance(n.target, LoopCall) for n in records[-1].graph.nodes)


def _batched_center(x, batch):
    out = np.empty_like(x)
    for s in range(0, len(x), batch):
        xb = x[s:s + batch]
        out[s:s + batch] = xb - xb.sum() / len(xb)
    return out


def _moving_avg(x, n, w):
    out = np.zeros(n)
    for k in range(n):
        xb = x[k:k + w]
        out[k] = xb.sum() / len(xb)
    return out


def test_slices_by_the_index_over_run_time_sizes_are_captured_with_static_sizes():
    """Which iterations an array's end clips depends on the sizes and bounds: with those
    run-time (a second length, a second count), a body that slices by the index is captured
    again with static sizes, each size its own capture, never the first one's baked lengths."""
    chunked = kiln.compile(_batched_center)
    for n in (90, 100, 103, 95):
        x = np.random.default_rng(n).random(n)
        np.testing.assert_allclose(chunked(x, 10), _batched_center(x, 10), rtol=1e-12)
    windowed = kiln.compile(_moving_avg)
    x = np.arange(40.0)
    for n in (30, 32, 40, 36):
        np.testing.assert_allclose(windowed(x, n, 5), _moving_avg(x, n, 5), rtol=1e-12)


def test_a_body_that_assigns_the_index_unrolls_and_leaves_its_last_value(no_unroll):
    def smooth(u, n):
        for i in range(n):
            u[1:-1] = 0.5 * u[1:-1] + 0.25 * (u[2:] + u[:-2])
            i = i * 2  # noqa: PLW2901 - what the loop leaves is this, not the range's last
        return i

    want, got, report, wa, ga = run_both(smooth, np.linspace(0, 1, 30), 20)
    assert got == want == 38
    np.testing.assert_allclose(ga[0], wa[0], rtol=1e-12)
    assert not loop_nodes(report)


def test_a_huge_iteration_limit_is_not_enumerated_at_capture():
    """`for it in range(10**9): ... break`: the range's items are made when read, so capturing
    the loop node costs the same for any limit (a list of 10**9 constants would not fit)."""
    rng = np.random.default_rng(8)
    A, b = rng.random((20, 20)) + 20 * np.eye(20), rng.random(20)
    want, got, report, _, _ = run_both(_jacobi, A, b, 1e-9, 10**9)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    assert got[1] == want[1] < 100
    assert len(loop_nodes(report)) == 1


def _ewma(x, alpha):
    out = np.empty_like(x)
    out[0] = x[0]
    for t in range(1, x.shape[0]):
        out[t] = alpha * x[t] + (1 - alpha) * out[t - 1]
    return out


def test_a_row_write_into_an_array_of_run_time_size_is_written_in_place():
    """Captured at small sizes then made dynamic, the body's `out[t] = ...` still writes one
    element in place (a region write of the compiled body), not the whole array per iteration
    (quadratic in n): the first call's small example says nothing about the sizes the node will
    run at."""
    explain = kiln.explain(_ewma)
    explain(np.random.default_rng(0).random(100), 0.1)
    report = explain(np.random.default_rng(1).random(200), 0.1)
    # (both captures make the loop a node: its row writes follow the index)
    *_, body_report = [r for c in report.captures if c.report for r in c.report.loops]
    assert report.captures[-1].report.loops == [body_report]
    assert body_report.eager_nodes == 0
    ((_, region),) = body_report.infos[0]["write_backs"]
    assert region.startswith(".select(0, s")  # element t, the loop index
    x = np.random.default_rng(2).random(9000)
    np.testing.assert_allclose(kiln.compile(_ewma)(x, 0.1), _ewma(x, 0.1), rtol=1e-12)


def test_an_augmented_column_update_writes_only_the_column(no_unroll):
    """`A[:, j] -= A[:, j + 1] * s[j]` (gramschmidt, adi, ludcmp): the in-place op on the
    column view is the small write; functionalized, it rewrote all of A on every iteration, now
    the compiled body computes the column and stores it into column j of A."""
    def update(A, s):
        for j in range(64):
            A[:, j] -= A[:, j + 1] * s[j]
        return A.sum()

    rng = np.random.default_rng(0)
    args = (rng.random((300, 300)), rng.random(64))
    want, got, report, _, _ = run_both(update, *args)
    assert_same(got, want)
    (body_report,) = [r for c in report.captures if c.report for r in c.report.loops]
    assert body_report.eager_nodes == 0
    ((_, region),) = body_report.infos[0]["write_backs"]
    assert region.startswith(".select(1, s")  # column j, the loop index


"""kiln.explain: graph and break counts, break reasons with the real user lines and hints, ops,
guards, recompiles, isolation from other compiled functions, and results equal to eager.
torch._dynamo.explain is the oracle for the counts and break lines of shared programs."""

import inspect
import runpy
import textwrap

import numpy as np
import pytest

import kiln
from kiln._C import _capture as C
from kiln._capture import explain as E

pytestmark = pytest.mark.skipif(not C.is_supported(), reason="the frame hook needs CPython 3.11")


@pytest.fixture(autouse=True)
def clean_hook():
    kiln.compiler.reset()
    yield
    C.set_callback(None)
    kiln.compiler.reset()


def line_of(fn, text: str) -> tuple[int, str]:
    """(absolute line number, stripped source) of the first line of `fn` containing `text`."""
    lines, first = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if text in line:
            return first + i, line.strip()
    raise AssertionError(f"{text!r} not in {fn.__name__}")


def same(a, b):
    assert isinstance(a, kiln.Tensor) and isinstance(b, kiln.Tensor)
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
    # The default backend compiles: fused sums and vector math may differ in the last bits.
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)


# --- programs ------------------------------------------------------------------------------------


def no_break(x, y):
    z = x * y
    return z.sin() + 1


def one_break(x):
    a = x.relu()
    print("side effect")
    return a * 3


def two_breaks(x):
    a = x * 2
    n = a.sum().item()
    b = a + n
    if b.mean() > 0:
        return b - 1
    return b + 1


G = 0


def global_write(x):
    global G
    y = x + 1
    G = 5
    return y * 2


def raises(x):
    y = x + 1
    return y.reshape(5, 7) * 2


def helper(x):
    y = x * 2
    print("in helper")
    return y - 1


def calls_helper(x):
    return helper(x) + 1


def messy(a, b=1.0, /, *rest, scale=2.0, **extra):
    print("in messy")
    return a * scale + b + sum(rest) + extra["bias"]


def calls_messy(x):
    return messy(x, 0.5, x, x, scale=3.0, bias=-2.0) * 2


class Net(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = kiln.nn.Linear(4, 3)

    def forward(self, x):
        y = self.lin(x)
        s = y.sum().item()
        return y * s


X = kiln.arange(12, dtype=kiln.float32).reshape(3, 4) / 7 - 0.5


# --- counts, reasons, lines ---------------------------------------------------------------------


def test_no_break_counts_ops_guards_and_result():
    y = kiln.ones(3, 4) * 2
    out = kiln.explain(no_break)(X, y)
    assert isinstance(out, E.ExplainOutput)
    assert (out.graph_count, out.graph_break_count, out.op_count) == (1, 0, 3)
    assert out.break_reasons == [] and out.recompiles == []
    assert out.ops_per_graph == [["operator.mul", "kiln.Tensor.sin", "operator.add"]]
    assert len(out.graphs) == 1 and out.graphs[0].op_count() == 3
    same(out.result, no_break(X, y))
    # Guards are readable text naming the argument, its dtype and shape.
    x_guards = [g for g in out.guards if g.startswith("L['x']")]
    assert len(x_guards) == 1 and "float32[3, 4]" in x_guards[0]
    assert "grad mode is enabled" in out.guards
    assert out.out_guards == out.guards
    assert len(set(out.guards)) == len(out.guards)


def test_one_break_on_print(capsys):
    out = kiln.explain(one_break)(X)
    assert capsys.readouterr().out == "side effect\n"  # print ran once, eagerly
    assert (out.graph_count, out.graph_break_count) == (2, 1)
    (br,) = out.break_reasons
    assert "print()" in br.reason
    lineno, src = line_of(one_break, "print(")
    assert br.user_stack == [(__file__, lineno, src)]
    assert (br.filename, br.lineno, br.source_line, br.function) == (__file__, lineno, src,
                                                                    "one_break")
    assert "print" in br.hint
    assert out.ops_per_graph == [["kiln.Tensor.relu"], ["operator.mul"]]
    same(out.result, one_break(X))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_two_breaks_item_and_tensor_branch(sign):
    x = X * sign + sign  # both branches of the `if`
    out = kiln.explain(two_breaks)(x)
    assert (out.graph_count, out.graph_break_count) == (3, 2)
    item, branch = out.break_reasons
    assert "item()" in item.reason and "keep values as tensors" in item.hint
    assert "data-dependent branch" in branch.reason and "kiln.where" in branch.hint
    assert (item.lineno, item.source_line) == line_of(two_breaks, ".item()")
    assert (branch.lineno, branch.source_line) == line_of(two_breaks, "if b.mean()")
    assert item.filename == branch.filename == __file__
    same(out.result, two_breaks(x))


def test_hint_from_table_when_the_evaluator_gives_none():
    out = kiln.explain(global_write)(X)
    (br,) = out.break_reasons
    assert "assignment to the global" in br.reason
    assert br.hint == E.hint_for(br.reason) and "return the value" in br.hint
    assert (br.lineno, br.source_line) == line_of(global_write, "G = 5")
    same(out.result, global_write(X))
    assert G == 5


def test_report_text():
    out = kiln.explain(two_breaks)(X)
    text = str(out)
    assert text.startswith("Graph Count: 3\nGraph Break Count: 2\nOp Count: ")
    for br in out.break_reasons:
        assert f"{br.filename}:{br.lineno} in two_breaks: {br.source_line}" in text
        assert f"Hint: {br.hint}" in text
    assert "Ops per Graph:\n  Ops 1 (two_breaks_0):\n    operator.mul\n" in text
    assert "Graphs:" not in text
    full = out.report(sources=True)
    assert "def forward(" in full and full.index("Graphs:") < full.index("Ops per Graph:")
    assert repr(out).startswith("ExplainOutput(graph_count=3, graph_break_count=2")


# --- recompiles and isolation --------------------------------------------------------------------


def test_recompile_lists_the_failing_guard():
    ex = kiln.explain(no_break)
    first = ex(X, X)
    (x_guard,) = [g for g in first.guards if g.startswith("L['x']")]
    assert first.recompiles == []
    x64, y64 = X.double(), X.double()
    out = ex(x64, y64)  # a new dtype: every entry fails, the first failing guard is x's
    assert out.graph_count == 2
    (rc,) = out.recompiles
    assert rc.reason == x_guard
    assert rc.function == rc.code_name == "no_break"
    assert (rc.filename, rc.lineno) == (__file__, no_break.__code__.co_firstlineno)
    assert f"guard failed: {x_guard}" in str(out)
    same(out.result, no_break(x64, y64))
    assert ex(X, X).graph_count == 2  # a cache hit: nothing new


def test_recompile_of_a_resume_function_names_it():
    ex = kiln.explain(one_break)
    ex(X)
    out = ex(X.double())
    assert [r.function for r in out.recompiles] == ["one_break", "one_break"]
    resume = out.recompiles[1]
    assert resume.code_name.startswith("__resume_at_") and resume.code_name != resume.function
    assert resume.where.startswith(f"one_break [{resume.code_name}] (")


def test_already_compiled_function_keeps_its_cache():
    compiled = kiln.compile(no_break)
    compiled(X, X)
    entries = C.entries(no_break.__code__)
    assert len(entries) == 1
    out = kiln.explain(no_break)(X, X)
    assert out.graph_count == 1  # captured again, not a silent cache hit
    assert C.entries(no_break.__code__) == entries
    again = kiln.explain(no_break)(X, X)  # a second explainer starts from scratch too
    assert again.graph_count == 1 and again.recompiles == []
    # With a break, the resume functions (kept per code object) must be fresh as well.
    kiln.compile(one_break)(X)
    out = kiln.explain(one_break)(X)
    assert (out.graph_count, out.graph_break_count) == (2, 1)


def test_callee_run_at_a_break_is_captured_from_a_fresh_copy(capsys):
    # helper breaks inside (print): calls_helper breaks at the call, helper runs eagerly and the
    # hook captures it as a frame of its own. Explaining twice must report the same captures,
    # and helper's own code must not get cache entries.
    names = None
    for _ in range(2):
        out = kiln.explain(calls_helper)(X)
        assert (out.graph_count, out.graph_break_count) == (3, 2)
        got = [c.name for c in out.captures]
        assert names is None or got == names
        names = got
        assert [br.function for br in out.break_reasons] == ["calls_helper", "helper"]
        assert out.break_reasons[1].lineno == line_of(helper, "print(")[0]
        same(out.result, calls_helper(X))
    assert names[:2] == ["calls_helper_0", "helper_0"]
    assert C.entries(helper.__code__) == []
    assert capsys.readouterr().out == "in helper\n" * 4


def test_callee_with_every_kind_of_parameter():
    out = kiln.explain(calls_messy)(X)
    assert [br.function for br in out.break_reasons] == ["calls_messy", "messy"]
    same(out.result, calls_messy(X))
    assert C.entries(messy.__code__) == []


def test_explain_of_a_compiled_function_reports_breaks_even_with_fullgraph():
    compiled = kiln.compile(one_break, fullgraph=True)
    with pytest.raises(kiln.compiler.CaptureError):
        compiled(X)
    out = kiln.explain(compiled)(X)
    assert (out.graph_count, out.graph_break_count) == (2, 1)
    same(out.result, one_break(X))


def test_module_and_compiled_module():
    kiln.manual_seed(0)
    net = Net()
    expected = net(X)
    for target in (net, kiln.compile(net)):
        out = kiln.explain(target)(X)
        assert (out.graph_count, out.graph_break_count) == (2, 1)
        (br,) = out.break_reasons
        assert (br.lineno, br.source_line) == line_of(Net.forward, ".item()")
        assert br.function == "forward"
        assert out.ops_per_graph[0] == ["kiln.nn.functional.linear", "kiln.Tensor.sum"]
        same(out.result, expected)
        assert "forward" not in net.__dict__  # the fresh forward is only installed per call


def test_bound_method_and_old_spelling():
    class Holder:
        scale = 3.0

        def run(self, x):
            return x * self.scale

    out = kiln.explain(Holder().run)(X)
    assert (out.graph_count, out.graph_break_count) == (1, 0)
    same(out.result, X * 3.0)
    old = kiln.explain(no_break, X, X)  # torch's older explain(fn, *args)
    assert isinstance(old, E.ExplainOutput) and old.graph_count == 1


def test_errors():
    with pytest.raises(TypeError, match="kiln.explain expects"):
        kiln.explain(42)
    with pytest.raises(RuntimeError) as eager:
        raises(X)
    ex = kiln.explain(raises)
    with pytest.raises(RuntimeError) as explained:  # the function's own error propagates
        ex(X)
    assert str(explained.value) == str(eager.value)
    out = ex.output()  # what was captured before the exception
    assert out.graph_break_count == 1 and "reshape" in out.break_reasons[0].reason
    assert out.break_reasons[0].lineno == line_of(raises, "reshape")[0]
    assert out.result is None


# --- hints ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("reason, needle", [
    ("data-dependent branch: a Python `if` on a tensor", "kiln.where"),
    ("print() is a side effect", "print()"),
    ("Tensor.item() reads a value from the tensor's data", "keep values as tensors"),
    ("int() of a tensor reads its data", "keep values as tensors"),
    ("nonzero() has a data-dependent output shape", "output shape depends on data"),
    ("call to perf_counter (builtin_function_or_method) is not supported", "outside the comp"),
    ("kiln.manual_seed() changes global state", "global state"),
    ("assignment to a nonlocal variable of an enclosing function", "return the value"),
    ("raise statement reached (the frame raises at run time)", "raises when run"),
    ("creating a Linear module inside compiled code", "create modules outside"),
    ("bytecode SETUP_ANNOTATIONS is not supported", "not captured"),
    ("something entirely new", "kiln.compiler.disable"),
])
def test_hint_table(reason, needle):
    assert needle in E.hint_for(reason)
    assert E.hint_for(reason, "given") == "given"


def test_user_function_name():
    assert E.user_function_name("f") == "f"
    assert E.user_function_name("__resume_at_40_f") == "f"
    assert E.user_function_name("__resume_at_112___resume_at_40_forward") == "forward"


# --- torch._dynamo.explain as the oracle ---------------------------------------------------------

PROGRAMS = textwrap.dedent('''
    def p_none(x):
        return (x.sin() + 1).cos()

    def p_print(x):
        a = x * 2
        print("p_print")
        return a + 1

    def p_item(x):
        y = x * 2
        n = y.sum().item()
        return y + n

    def p_branch(x):
        a = x * 2
        if a.sum() > 0:
            a = a - 1
        return a.relu() * 3

    def p_two(x):
        a = x + 1
        print("p_two")
        b = a * 2
        if b.sum() > 0:
            b = b - 1
        return b.relu()
''')


@pytest.mark.parametrize("name", ["p_none", "p_print", "p_item", "p_branch", "p_two"])
def test_counts_and_lines_match_torch_dynamo(name, tmp_path, capsys):
    torch = pytest.importorskip("torch")
    path = tmp_path / "programs.py"
    path.write_text(PROGRAMS)
    with_torch = runpy.run_path(str(path), init_globals={"torch": torch})[name]
    with_kiln = runpy.run_path(str(path), init_globals={"torch": kiln})[name]
    values = np.linspace(-1, 2, 12, dtype=np.float32).reshape(3, 4)
    torch._dynamo.reset()
    want = torch._dynamo.explain(with_torch)(torch.from_numpy(values.copy()))
    got = kiln.explain(with_kiln)(kiln.from_numpy(values.copy()))
    assert got.graph_count == want.graph_count
    assert got.graph_break_count == want.graph_break_count
    want_lines = [br.user_stack[-1].lineno for br in want.break_reasons]
    assert [br.lineno for br in got.break_reasons] == want_lines
    assert all(br.filename == str(path) for br in got.break_reasons)
    np.testing.assert_allclose(got.result.numpy(), with_torch(torch.from_numpy(values)).numpy(),
                               rtol=1e-6, atol=1e-6)


def test_a_break_inside_a_loop_says_the_rest_runs_uncompiled():
    def epoch(xs):
        total = 0.0
        for x in xs:
            total += (x * 2).sum().item()
        return total

    explained = kiln.explain(epoch)([kiln.ones(3), kiln.ones(3)])
    (reason,) = explained.break_reasons
    assert "inside a loop" in reason.hint and "runs uncompiled" in reason.hint

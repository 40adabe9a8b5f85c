"""kiln-explain (tools/kiln_explain.py and its tools/kiln-explain wrapper) on temporary scripts:
the per-function report, --function, --html (content, atomic write), argument passing and the
error exits."""

import html
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kiln._C import _capture as C

pytestmark = pytest.mark.skipif(not C.is_supported(), reason="the frame hook needs CPython 3.11")

ROOT = Path(__file__).resolve().parents[3]
CLI = ROOT / "tools" / "kiln_explain.py"
WRAPPER = ROOT / "tools" / "kiln-explain"

SCRIPT = textwrap.dedent('''\
    import sys

    import numpy as np

    import kiln

    def f(x):
        a = x * 2
        n = a.sum().item()
        b = a + n
        if b.mean() > 0:
            b = b - 1
        return b.relu()

    @kiln.compile
    def g(x):
        return (x.sin() + 1).cos()

    class Net(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = kiln.nn.Linear(4, 4)

        def forward(self, x):
            print("in forward")
            return self.lin(x).tanh()

    print("argv", sys.argv[1:], __name__)
    cf = kiln.compile(f)
    x = kiln.linspace(-1, 2, 12).reshape(3, 4)
    for t in (x, x.double()):
        np.testing.assert_allclose(cf(t).numpy(), f(t).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g(x).numpy(), (x.sin() + 1).cos().numpy(), rtol=1e-5, atol=1e-6)
    net = Net()
    cnet = kiln.compile(net)
    expected = net(x).detach().numpy()
    np.testing.assert_allclose(cnet(x).detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    if "--boom" in sys.argv:
        raise KeyError("boom")
    if "--exit" in sys.argv:
        sys.exit(int(sys.argv[-1]))
''')
LINES = SCRIPT.splitlines()


def line(text: str) -> tuple[int, str]:
    """(1-based line, stripped text) of the first SCRIPT line containing `text`."""
    return next((i, s.strip()) for i, s in enumerate(LINES, 1) if text in s)


@pytest.fixture()
def script(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text(SCRIPT)
    return str(path)


def run(*args, wrapper=False, cwd=None):
    cmd = [str(WRAPPER)] if wrapper else [sys.executable, str(CLI)]
    env = dict(os.environ)
    env.pop("KILN_LOGS", None)
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True,
                          timeout=180, env=env, cwd=cwd)


def sections(stdout: str) -> dict:
    """The report's sections by heading (`function f (path:line)` -> text)."""
    parts = re.split(r"^==== (.*)$", stdout, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts), 2)}


def test_report_per_function(script):
    proc = run(script, "one", "two", wrapper=True)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # The script ran as __main__ with its own argv, and its output comes before the report.
    assert out.startswith("argv ['one', 'two'] __main__\nin forward\nin forward\n")
    heads = list(sections(out))
    # A decorated function's code starts at its decorator line, as Python reports it.
    assert heads == [f"function g ({script}:{line('@kiln.compile')[0]})",
                     f"function f ({script}:{line('def f(x):')[0]})",
                     f"module Net.forward ({script}:{line('def forward(self, x):')[0]})"]
    g, f, net = sections(out).values()
    assert "Graph Count: 1\nGraph Break Count: 0\nOp Count: 3\n" in g
    assert "Recompiles:\n" in g and "Recompile 1" not in g
    # f: two breaks per dtype, with file:line, the source line and a hint; one recompile per
    # code object (f and its two resume functions) after the dtype changed.
    assert "Graph Count: 6\nGraph Break Count: 4\n" in f
    for text in (".item()", "if b.mean() > 0:"):
        n, src = line(text)
        assert f"      {script}:{n} in f: {src}\n    Hint: " in f
    assert "Hint: keep values as tensors" in f and "kiln.where" in f
    assert "Graphs:\n  Graph 1 (f_0, in f):\n    def forward(L_x):\n" in f
    assert "Ops 1 (f_0):\n    operator.mul\n    kiln.Tensor.sum\n" in f
    assert "  f_0 (in f):\n    L['x']: tensor kiln.float32[3, 4]" in f
    guard = "L['x']: tensor kiln.float32[3, 4] strides (4, 1) requires_grad=False"
    assert f"  Recompile 1: f ({script}:{line('def f(x):')[0]})\n    guard failed: {guard}\n" in f
    assert f.count("guard failed:") == 3
    # The module: a print break inside forward.
    assert "Graph Break Count: 1\n" in net and "print() is a side effect" in net
    n, src = line('print("in forward")')
    assert f"{script}:{n} in forward: {src}" in net


def test_function_filter(script):
    proc = run(script, "--function", "f")
    assert proc.returncode == 0, proc.stderr
    assert [h.split(" (")[0] for h in sections(proc.stdout)] == ["function f"]
    proc = run("--function=Net", script, "--function", "g")
    assert [h.split(" (")[0] for h in sections(proc.stdout)] == ["function g",
                                                                "module Net.forward"]
    proc = run(script, "--function", "nothing")
    assert proc.returncode == 1
    assert sections(proc.stdout) == {}
    assert ("kiln-explain: no compiled function named nothing (compiled: Net.forward, f, g)"
            in proc.stdout)


def test_html_report(script, tmp_path):
    report = tmp_path / "out" / "report.html"
    report.parent.mkdir()
    report.write_text("old")
    proc = run(script, "--html", report, "--function", "f", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"kiln-explain: wrote {report}" in proc.stdout
    assert os.listdir(report.parent) == ["report.html"]  # replaced, no temporary file left
    page = report.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "<link" not in page  # self-contained
    assert "<h2>function f (" in page and "Net.forward" not in page
    assert "<tr><td>Graph Break Count</td><td>4</td></tr>" in page
    # Each break shows its line highlighted with 3 lines of context on each side.
    for text in (".item()", "if b.mean() > 0:"):
        n, _ = line(text)
        hit = f'<span class="hl"><span class="lineno">{n:>2}</span>  {html.escape(LINES[n - 1])}'
        assert hit in page
        block = page[page.index(hit) - 600: page.index(hit) + 600]
        pre = block[block.rindex('<pre class="src">', 0, 600):]
        pre = pre[: pre.index("</pre>")]
        numbers = [int(m) for m in re.findall(r'class="lineno">\s*(\d+)<', pre)]
        assert numbers == list(range(n - 3, n + 4))
    assert html.escape("def forward(L_x):") in page
    assert "graph @f_0(" in page  # the .kir text
    assert html.escape("L['x']: tensor kiln.float32[3, 4]") in page
    assert "guard failed: <code>" in page and page.count("<li>") == 3


def test_script_exception_still_reports(script, tmp_path):
    report = tmp_path / "r.html"
    proc = run(script, "--boom", "--html", report)
    assert proc.returncode == 1
    err = proc.stderr
    assert "kiln-explain: the script raised an exception:\nTraceback" in err
    assert f'File "{script}", line {line("raise KeyError")[0]}, in <module>' in err
    assert err.rstrip().endswith("KeyError: 'boom'")
    assert "runpy" not in err and "kiln_explain.py" not in err
    assert "function f (" in proc.stdout and "Graph Break Count: 4" in proc.stdout
    assert "KeyError: &#x27;boom&#x27;" in report.read_text()


@pytest.mark.parametrize("code, status", [(0, 0), (3, 1)])
def test_script_exit_status(script, code, status):
    proc = run(script, "--exit", code)
    assert proc.returncode == status
    assert ("exited with status 3" in proc.stderr) == (code == 3)
    assert "function g (" in proc.stdout


def test_double_dash_passes_options_to_the_script(script):
    proc = run("--function", "g", "--", script, "--html", "x.html")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("argv ['--html', 'x.html'] __main__\n")
    assert "wrote" not in proc.stdout and list(sections(proc.stdout))[0].startswith("function g")


def test_no_compiled_function(tmp_path):
    path = tmp_path / "plain.py"
    path.write_text("print('plain')\n")
    proc = run(path)
    assert proc.returncode == 0
    assert proc.stdout.endswith("kiln-explain: no function was compiled with kiln.compile\n")


@pytest.mark.parametrize("args, message", [
    ([], "no script given"),
    (["--html"], "--html needs a value"),
    (["--bogus", "x.py"], "unknown option --bogus"),
    (["missing_script.py"], "no such script: missing_script.py"),
])
def test_usage_errors(args, message, tmp_path):
    proc = run(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"kiln-explain: error: {message}\n")


def test_help():
    proc = run("--help", wrapper=True)
    assert proc.returncode == 0 and "kiln-explain script.py" in proc.stdout


def test_unwritable_html(script, tmp_path):
    proc = run(script, "--html", tmp_path / "no" / "such" / "dir.html")
    assert proc.returncode == 1
    assert "kiln-explain: error: cannot write" in proc.stderr
    assert "function f (" in proc.stdout  # the text report is still printed


# --- in-process pieces ---------------------------------------------------------------------------


def _cli_module():
    spec = importlib.util.spec_from_file_location("kiln_explain_cli", CLI)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parse_args():
    parse = _cli_module().parse_args
    assert parse(["s.py", "a", "--function", "f", "b", "--html=r.html"]) == (
        "s.py", ["a", "b"], ["f"], "r.html")
    assert parse(["--function=f", "--function", "g", "s.py"]) == ("s.py", [], ["f", "g"], None)
    assert parse(["s.py", "--", "--function", "x"]) == ("s.py", ["--function", "x"], [], None)
    assert parse(["-h"]) is None


def test_write_atomic_keeps_the_old_file_on_failure(tmp_path):
    from kiln._capture.explain_html import write_atomic

    target = tmp_path / "r.html"
    write_atomic(str(target), "first")
    assert target.read_text() == "first"
    with pytest.raises(UnicodeEncodeError):
        write_atomic(str(target), "bad \udcff surrogate")
    assert target.read_text() == "first" and os.listdir(tmp_path) == ["r.html"]

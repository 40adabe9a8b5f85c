"""KILN_LOGS: every topic's output, checked in a fresh interpreter (the variable is read when kiln
is imported), `+topic` and `all`, and the warning for unknown topics."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

from kiln._C import _capture as C
from kiln._capture import logs

pytestmark = pytest.mark.skipif(not C.is_supported(), reason="the frame hook needs CPython 3.11")

SCRIPT = textwrap.dedent('''\
    import kiln

    def helper(t):
        return t * 2

    def f(x):
        y = helper(x) + 1
        print("printed")
        return y.relu()

    cf = kiln.compile(f)
    cf(kiln.ones(3, 4))
    cf(kiln.ones(3, 4, dtype=kiln.float64))
    cf(kiln.ones(5, 4, dtype=kiln.float64))
''')
LINES = SCRIPT.splitlines()


def line(text: str) -> int:
    """The 1-based line of SCRIPT containing `text`."""
    return next(i for i, s in enumerate(LINES, 1) if text in s)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    path = tmp_path_factory.mktemp("logs") / "prog.py"
    path.write_text(SCRIPT)
    return str(path)


def run(script: str, spec: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("KILN_LOGS", None)
    if spec is not None:
        env["KILN_LOGS"] = spec
    proc = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "printed\n" * 3  # the program's own output is untouched
    return proc


def topics_in(stderr: str) -> set:
    return {ln.split("]", 1)[0][len("[kiln:"):] for ln in stderr.splitlines()
            if ln.startswith("[kiln:")}


def test_off_by_default(script):
    assert run(script, None).stderr == ""
    assert run(script, "").stderr == ""


def test_graph(script):
    err = run(script, "graph").stderr
    assert topics_in(err) == {"graph"}
    assert "[kiln:graph] captured f_0 (2 ops):\ndef forward(L_x):\n" in err
    assert f"t0 = L_x * 2  # prog.py:{line('return t * 2')}" in err  # inlined helper's line
    assert "[kiln:graph] captured __resume_at_" in err


def test_graph_breaks(script, tmp_path):
    err = run(script, "graph_breaks").stderr
    assert topics_in(err) == {"graph_breaks"}
    n = line('print("printed")')
    want = (f"[kiln:graph_breaks] graph break in f: print() is a side effect\n"
            f"    {script}:{n}: print(\"printed\")\n"
            f"    hint: remove print() from compiled code or move it outside\n")
    assert want in err
    assert err.count("[kiln:graph_breaks]") == 3  # once per capture of f


def test_guards(script):
    err = run(script, "guards").stderr
    assert topics_in(err) == {"guards"}
    assert ("[kiln:guards] guards of f_0:\n"
            "  L['x']: tensor kiln.float32[3, 4] strides (4, 1) requires_grad=False\n") in err
    assert "  grad mode is enabled\n" in err
    assert "guards of f_1:\n  L['x']: tensor kiln.float64[3, 4]" in err


def test_recompiles(script):
    err = run(script, "recompiles").stderr
    assert topics_in(err) == {"recompiles"}
    first = (f"[kiln:recompiles] recompiling f ({script}:{line('def f(x):')}): guard failed: "
             "L['x']: tensor kiln.float32[3, 4] strides (4, 1) requires_grad=False (now: ")
    assert first in err
    # what the argument is now, not only what the capture expected
    assert "requires_grad=False (now: tensor kiln.float64[3, 4] strides (4, 1) " in err
    assert "[kiln:recompiles] automatic dynamic: L['x'] dims [0] change between calls" in err


@pytest.mark.parametrize("spec", ["bytecode", "+bytecode"])
def test_bytecode(script, spec):
    err = run(script, spec).stderr
    assert topics_in(err) == {"bytecode"}
    lines = err.splitlines()
    start = f"[kiln:bytecode] f prog.py:{line('def f(x):')} @0 RESUME"
    assert lines[0] == start
    assert f"[kiln:bytecode] f prog.py:{line('y = helper')} @2 LOAD_GLOBAL NULL + helper" in lines
    # The inlined helper is indented one level and names its own lines.
    inner = [ln for ln in lines if ln.startswith("[kiln:bytecode]   helper ")]
    assert f"[kiln:bytecode]   helper prog.py:{line('return t * 2')} @4 LOAD_CONST 2" in inner
    # The breaking instruction is logged too, and the resume functions are evaluated after it.
    assert any("__resume_at_" in ln for ln in lines)


def test_all_and_combinations(script):
    err = run(script, "all").stderr
    assert topics_in(err) == {"graph", "graph_breaks", "guards", "recompiles", "bytecode",
                              "output_code", "perf"}
    err = run(script, " graph , +guards ").stderr
    assert topics_in(err) == {"graph", "guards"}


def test_unknown_topic_warns_and_keeps_the_others(script):
    err = run(script, "graph,nope").stderr
    assert err.startswith("[kiln] KILN_LOGS: unknown topic 'nope' (known: graph, graph_breaks, "
                          "guards, recompiles, bytecode, output_code, perf, aot)\n")
    assert err.count("unknown topic") == 1
    assert topics_in(err) == {"graph"}


def test_output_code_and_perf(script):
    err = run(script, "output_code,perf").stderr
    assert "unknown topic" not in err
    assert topics_in(err) == {"output_code", "perf"}
    # The graph's generated code names the user's lines; the entry calls the graph.
    assert f"prog.py:{line('return t * 2')}" in err
    assert "def entry(_func" in err and "_graph(" in err
    assert re.search(r"\[kiln:perf\] capture of f \(.*prog.py:\d+\): [0-9.]+ ms", err)


def test_perf_times_every_compiler_stage(script):
    """KILN_LOGS=perf names each graph pass of the pipeline with its time, then lower,
    schedule and code generation."""
    from kiln._C import _compiler

    err = run(script, "perf").stderr
    stages = re.search(r"\[kiln:perf\] backend: \S+ stages: (.*)", err)
    assert stages, err
    names = [m.group(1) for m in re.finditer(r"([\w+-]+) [0-9.]+ ms", stages.group(1))]
    passes = _compiler.default_pipeline().split(",")
    assert names == ["parse+shape-infer", *passes, "lower", "schedule", "codegen+jit"]


def test_configure_in_process(capsys):
    try:
        logs.configure("+graph, guards")
        assert logs.enabled("graph") and logs.enabled("guards")
        assert not logs.enabled("bytecode")
        logs.log("graph", lambda: "built lazily")
        logs.log("bytecode", lambda: pytest.fail("a disabled topic must not build its text"))
        assert capsys.readouterr().err == "[kiln:graph] built lazily\n"
        logs.configure("all")
        assert all(logs.enabled(t) for t in logs.TOPICS)
    finally:
        logs.configure()


def test_kernel_profile_prints_each_node_at_exit(tmp_path):
    script = tmp_path / "prof.py"
    script.write_text(
        "import kiln\n"
        "w = kiln.randn(16, 16)\n"
        "f = kiln.compile(lambda x: (x @ w).relu().sum(-1))\n"
        "with kiln.no_grad():\n"
        "    for _ in range(3):\n"
        "        f(kiln.randn(8, 16))\n")
    env = dict(os.environ, KILN_PROFILE="kernels")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("[kiln:profile]")]
    assert "kernels" in lines[0] and "ms in all" in lines[0]
    assert any("extern matmul([8, 16], [16, 16]) -> [8, 16]" in ln and " 3 calls" in ln
               for ln in lines), lines
    env.pop("KILN_PROFILE")
    quiet = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                           timeout=120)
    assert "[kiln:profile]" not in quiet.stderr

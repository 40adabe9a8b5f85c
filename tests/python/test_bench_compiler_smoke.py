"""Smoke test of bench/compiler.py: `--quick` runs end to end and writes the expected tables.

No timing is asserted (the machine is shared): what is checked is that every measurement ran
(each kiln cell is a number, every workload has its row with all columns), that skipped parts
say why, that compiled results matched eager (a mismatch leaves an n/a with its reason), and
that the files written are the table printed and a PNG. The helpers (cache sizes, labels,
working sets, the numeric check, the atomic write) are tested on their own.
"""

import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
BENCH = os.path.join(ROOT, "bench")
SCRIPT = os.path.join(BENCH, "compiler.py")
NUMBER = re.compile(r"^-?\d+(\.\d+)?(e-?\d+)?$")
GBS = re.compile(r"^\d+(\.\d+)? \(\d+%\)$")
WORKLOADS = ["pointwise chain (6 ops)", "softmax", "layer_norm", "x.sum(-1).mean()",
             "GELU-MLP block", "attention block", "decoder block (GPT-2 small)", "conv-bn-relu",
             "token + position embedding", "cross-entropy loss"]
# memory-bound workloads sized by working-set target (the gathers have GPT-2's sizes)
MEMORY_BOUND = {"pointwise chain (6 ops)", "softmax", "layer_norm", "x.sum(-1).mean()"}
GATHERS = {"token + position embedding", "cross-entropy loss"}
STEADY_HEADER = ["workload", "size", "working set", "kiln eager", "kiln compiled", "torch eager",
                 "torch.compile", "speedup vs kiln eager", "speedup vs torch.compile",
                 "kiln compiled GB/s", "torch.compile GB/s", "notes"]


def load(name):
    """bench/<name>.py as a module (registered: dataclasses look their module up)."""
    if name in sys.modules:
        return sys.modules[name]
    sys.path.insert(0, BENCH)
    try:
        spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(BENCH)


def tables(text: str) -> dict:
    """Markdown tables of `text` by the section heading above them: list of rows (cells)."""
    out, heading = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        elif line.startswith("| ") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip()[1:-1].split(" | ")]
            out.setdefault(heading, []).append(cells)
    return out


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench")
    out = folder / "compiler.md"
    default = os.path.join(BENCH, "results", "compiler.md")
    before = os.stat(default).st_mtime_ns if os.path.exists(default) else None
    proc = subprocess.run([sys.executable, SCRIPT, "--quick", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = os.stat(default).st_mtime_ns if os.path.exists(default) else None
    assert before == after, "--quick with --out must not touch bench/results/compiler.md"
    text = out.read_text()
    return proc.stdout, text, tables(text), folder


def test_quick_writes_the_printed_table_and_a_png(quick_run):
    stdout, text, _, folder = quick_run
    assert text in stdout
    for heading in ("## 1. Steady state", "## 2. Compile time", "## 3. Per-call overhead",
                    "## 4. Memory while running a GPT-style model"):
        assert heading in text
    png = folder / "compiler.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(folder)) == ["compiler.md", "compiler.png"]  # no temp files left
    assert "torch.compile n/a: skipped (--quick)" in text


def test_steady_state_has_every_workload_and_column(quick_run):
    rows = quick_run[2]["1. Steady state"]
    assert rows[0] == STEADY_HEADER
    body = rows[1:]
    assert [r[0] for r in body] == WORKLOADS  # --quick: one size each, in order
    for r in body:
        assert len(r) == len(STEADY_HEADER), r
        name = r[0]
        assert re.match(r"^(L2|L3|DRAM) \(\d+(\.\d+)? (B|KB|MB|GB)\)$", r[2]), r
        kiln_eager, kiln_compiled, torch_eager, torch_compile = r[3:7]
        for cell in (kiln_eager, kiln_compiled, torch_eager):
            assert NUMBER.match(cell), (name, r)
        assert torch_compile == "n/a"
        assert NUMBER.match(r[7]) and r[8] == "n/a", r
        if name in MEMORY_BOUND | GATHERS:
            assert GBS.match(r[9]) and r[10] == "n/a", r
        else:
            assert r[9] == r[10] == "—", r
        assert "differs" not in r[11] and "n/a" not in r[11], r  # compiled == eager


def test_compile_time_overhead_and_memory_rows(quick_run):
    t = quick_run[2]
    compile_rows = t["2. Compile time"][1:]
    kiln_rows = [r for r in compile_rows if r[1] == "kiln"]
    assert [r[0].split(",")[0] for r in kiln_rows] == ["pointwise chain (6 ops)",
                                                       "decoder block (GPT-2 small)"]
    for r in kiln_rows:
        assert all(NUMBER.match(c) for c in r[2:]), r
    for r in (r for r in compile_rows if r[1] == "torch.compile"):
        assert r[2:5] == ["n/a"] * 3 and r[5] == "n/a: skipped (--quick)"
    header, row = t["3. Per-call overhead"]
    assert header[1:] == ["kiln eager", "kiln compiled", "torch eager", "torch.compile"]
    assert all(NUMBER.match(c) for c in row[1:4]) and row[4] == "n/a"
    memory = {r[0]: r[1:] for r in t["4. Memory while running a GPT-style model"][1:]}
    assert list(memory) == ["kiln eager", "kiln compiled", "torch eager", "torch.compile"]
    for name in ("kiln eager", "kiln compiled", "torch eager"):
        assert all(NUMBER.match(c) for c in memory[name]), memory[name]
    assert memory["torch.compile"][0] == "n/a: skipped (--quick)"


def test_cache_sizes_and_labels(tmp_path):
    w = load("compiler_workloads")
    for i, (level, kind, size) in enumerate([(1, "Data", "48K"), (1, "Instruction", "32K"),
                                             (2, "Unified", "2048K"), (3, "Unified", "300M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    caches = w.cache_sizes(str(tmp_path))
    assert caches == {"L1": 48 << 10, "L2": 2 << 20, "L3": 300 << 20}
    assert w.cache_sizes(str(tmp_path / "missing"))["L3"] == 32 << 20  # defaults
    assert [w.level_of(n, caches) for n in (1, 2 << 20, (2 << 20) + 1, 300 << 20,
                                            (300 << 20) + 1)] == ["L2", "L2", "L3", "L3", "DRAM"]
    t = w.targets(caches)
    assert [w.level_of(t[k], caches) for k in ("L2", "L3", "DRAM")] == ["L2", "L3", "DRAM"]
    cases = w.all_cases(False, caches)
    by = {}
    for c in cases:
        by.setdefault(c.workload, []).append(c)
    assert list(by) == WORKLOADS
    for name in MEMORY_BOUND:  # one case per level, working set near its target
        assert [c.level for c in by[name]] == ["L2", "L3", "DRAM"], name
        for c, target in zip(by[name], t.values(), strict=True):
            assert 0.75 * target <= c.ws_bytes <= target, (name, c.ws_bytes, target)
    assert all(len(v) >= 2 for k, v in by.items() if k not in GATHERS)
    assert by["token + position embedding"][0].size == "8x512 ids, d=768"
    assert by["decoder block (GPT-2 small)"][0].size == "d=768, 12 heads, 128 tok"
    assert by["softmax"][0].size.endswith("x 4096")


def test_workloads_match_torch_and_count_their_bytes():
    import torch

    w = load("compiler_workloads")
    kfw, tfw = w.framework("kiln"), w.framework("torch")
    for case in w.all_cases(True, w.cache_sizes()):
        kfn, kargs = case.build(kfw)
        tfn, targs = case.build(tfw)
        with torch.no_grad():
            got, want = kfw.numpy(kfn(*kargs)), tfw.numpy(tfn(*targs))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=case.workload)
        if case.workload in GATHERS:  # ids or logits, the rows read, the output
            moved = sum(a.numel() * a.element_size() for a in targs) + 4 * max(want.size, 1)
            rows = 4 * (want.size if want.ndim else 0)
            assert moved <= case.ws_bytes <= moved + 2 * rows, case.workload
        elif case.memory_bound:  # inputs + output, float32, read and written once
            moved = sum(a.numel() for a in targs) + max(want.size, 1)
            assert case.ws_bytes in (4 * moved, 4 * (moved + 2 * 1024)), case.workload


def test_numeric_check_and_atomic_write(tmp_path):
    bench = load("compiler")
    a = np.arange(10, dtype=np.float32)
    assert bench.max_abs_diff(a, a) == 0.0
    assert bench.max_abs_diff(a, a + 0.5) == 0.5
    assert bench.max_abs_diff(a, a[:5]) == float("inf")
    b = a.copy()
    b[3] = np.nan
    assert bench.max_abs_diff(b, a) == float("inf")
    assert bench.max_abs_diff(b, b) == 0.0
    assert bench.tolerance(a * 100) == pytest.approx(2e-4 * 900)
    path = tmp_path / "sub" / "t.md"
    bench.write_atomic(str(path), "one\n")
    bench.write_atomic(str(path), "two\n")
    assert path.read_text() == "two\n"
    with pytest.raises(TypeError):
        bench.write_atomic(str(path), None)  # a failed write keeps the old file, no temp
    assert path.read_text() == "two\n" and os.listdir(path.parent) == ["t.md"]
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask

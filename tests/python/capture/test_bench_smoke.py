"""Smoke test of bench/capture.py: `--quick` runs end to end and writes the expected table.

No timing is asserted (the machine is shared); what is checked is that every measurement ran:
each kiln cell is a number, the capture found exactly one graph and no break for the demo model,
and the file written is the table printed.
"""

import importlib.util
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "capture.py")
NUMBER = re.compile(r"^\**-?\d+(\.\d+)?\**$")


def table_rows(text: str) -> dict:
    """Markdown table rows of `text`: first cell (bold markers removed) -> the other cells."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| ---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0].strip("*")] = cells[1:]
    return rows


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "capture.md"
    default = os.path.join(ROOT, "bench", "results", "capture.md")
    before = os.stat(default).st_mtime_ns if os.path.exists(default) else None
    proc = subprocess.run([sys.executable, SCRIPT, "--quick", "--out", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = os.stat(default).st_mtime_ns if os.path.exists(default) else None
    return proc.stdout, out, before, after


def test_quick_writes_the_printed_table(quick_run):
    stdout, out, before, after = quick_run
    text = out.read_text()
    assert text in stdout
    assert before == after, "--quick with --out must not touch bench/results/capture.md"
    assert not [p for p in os.listdir(out.parent) if p.startswith(".capture-")]
    for heading in ("## 1. Cache-hit overhead", "## 2. Capture time", "## 3. Steady state"):
        assert heading in text


def test_cache_hit_rows_are_measured(quick_run):
    rows = table_rows(quick_run[1].read_text())
    for label in ("eager call", 'compile(backend="eager") call', "captured graph alone",
                  "guard + entry overhead"):
        kiln_cell, torch_cell, ratio = rows[label]
        assert NUMBER.match(kiln_cell) and NUMBER.match(torch_cell) and NUMBER.match(ratio), label
    assert "default backend call (kiln default / torch inductor)" in rows
    assert NUMBER.match(rows["default backend call (kiln default / torch inductor)"][0])
    assert rows["ops in the captured graph"][:2] == ["9", "9"]
    assert "torch default: skipped" in quick_run[1].read_text()


def test_capture_rows_count_one_graph_without_breaks(quick_run):
    rows = table_rows(quick_run[1].read_text())
    kiln_s, torch_s, ratio = rows["capture time (s)"]
    assert NUMBER.match(kiln_s) and NUMBER.match(torch_s) and NUMBER.match(ratio)
    assert rows["graphs"][:2] == ["1", "1"]
    assert rows["graph breaks"][:2] == ["0", "0"]
    assert int(rows["ops captured"][0]) > 0 and int(rows["ops captured"][1]) > 0


def test_steady_state_rows(quick_run):
    text = quick_run[1].read_text()
    rows = table_rows(text)
    for label in ("kiln eager", 'kiln.compile(backend="eager")', "torch eager",
                  'torch.compile(backend="eager")'):
        assert all(NUMBER.match(c) for c in rows[label]), (label, rows[label])
    assert rows["torch.compile (inductor)"] == ["n/a", "n/a", "n/a"]
    assert "differs from" not in text  # compiled outputs equal eager


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_capture", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_write_atomic_replaces_and_cleans_up(tmp_path):
    bench = load_bench()
    path = tmp_path / "sub" / "t.md"
    bench.write_atomic(str(path), "one\n")
    bench.write_atomic(str(path), "two\n")
    assert path.read_text() == "two\n"
    assert os.listdir(path.parent) == ["t.md"]
    mask = os.umask(0)
    os.umask(mask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask  # not mkstemp's 0600
    with pytest.raises(TypeError):
        bench.write_atomic(str(path), None)  # a failed write leaves the old file, no temp
    assert path.read_text() == "two\n"
    assert os.listdir(path.parent) == ["t.md"]


def test_fresh_copy_has_its_own_code_and_same_results():
    bench = load_bench()
    copy = bench.fresh_copy(bench.ten_inputs)
    assert copy.__code__ is not bench.ten_inputs.__code__
    assert copy(*range(10)) == bench.ten_inputs(*range(10)) == (0 + 1) * 2 - 3 + 4 * 5 + 30

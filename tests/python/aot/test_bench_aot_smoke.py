"""Smoke test of bench/aot.py: `--quick` runs end to end, every variant is timed and agrees with
kiln eager (no timing is asserted: the machine is shared)."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))


def test_quick_run_writes_every_variant(tmp_path):
    out = tmp_path / "aot.md"
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "aot.py"), "--quick",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = out.read_text()
    assert text == proc.stdout.rstrip("\n") + "\n" or text.strip() == proc.stdout.strip()
    for variant in ("kiln eager", "kiln.compile", "exported module()", "kilnc library (C API)",
                    "torch eager"):
        rows = re.findall(rf"^\| {re.escape(variant)} \| ([0-9.]+) \| ([0-9.]+)x \|$", text,
                          re.MULTILINE)
        assert len(rows) == 2, variant  # one per model
    for cost in ("kiln.export", "kilnc", "create from the library"):
        assert len(re.findall(rf"^\| {re.escape(cost)} \| [0-9.]+ \|$", text, re.MULTILINE)) == 2
    assert "differs from kiln eager" not in text

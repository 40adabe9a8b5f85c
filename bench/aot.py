"""Ahead-of-time compiled models beside kiln.compile and PyTorch, in one run, on one thread.

For two models — the GPT-style decoder of tools/demo.py (2 layers, d=128, 4 heads, vocab 512)
on 4 x 64 tokens, and a small MLP (64 → 256 → 10) on 8 rows, where a call is mostly overhead —
per-call time of:
  kiln eager, kiln.compile (default backend), the exported program's module() (Python),
  the kilnc library called through its C API (ctypes: kiln_model_run into a preallocated
  output), torch eager, torch.compile (inductor; --no-inductor skips it),
and the one-off costs: kiln.export, kilnc (a subprocess: pipeline + LLVM + link), creating
the model from the library, and torch.compile's first call. Rounds are interleaved (every
variant once per round) and medians are reported; outputs are checked against kiln eager. The
markdown table is printed and written atomically to bench/results/aot.md.

    .venv/bin/python bench/aot.py [--quick] [--out PATH] [--no-inductor]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as tF

import kiln
import kiln.nn as knn
import kiln.nn.functional as kF

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from demo import build_gpt  # noqa: E402

DEFAULT_OUT = os.path.join(ROOT, "bench", "results", "aot.md")
KILN_MAX_RANK = 8
DTYPE_CODE = {np.dtype(np.float32): 8, np.dtype(np.int64): 5}


class KilnTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("rank", ctypes.c_int32),
                ("sizes", ctypes.c_int64 * KILN_MAX_RANK)]


def describe(array: np.ndarray) -> KilnTensor:
    t = KilnTensor(array.ctypes.data, DTYPE_CODE[array.dtype], array.ndim)
    for d, s in enumerate(array.shape):
        t.sizes[d] = s
    return t


class Library:
    """A kilnc library through its C API: NAME_create, kiln_model_run, kiln_model_destroy."""

    def __init__(self, folder: str, name: str):
        self.rt = ctypes.CDLL(os.path.join(folder, "libkiln_aot.so"), mode=ctypes.RTLD_GLOBAL)
        self.lib = ctypes.CDLL(os.path.join(folder, f"lib{name}.so"))
        self.rt.kiln_last_error.restype = ctypes.c_char_p
        self.model = ctypes.c_void_p()
        start = time.perf_counter()
        status = getattr(self.lib, f"{name}_create")(None, ctypes.byref(self.model))
        self.create_s = time.perf_counter() - start
        if status != 0:
            raise RuntimeError(self.rt.kiln_last_error().decode())
        self.run_fn = self.rt.kiln_model_run

    def bind(self, inputs: list, outputs: list):
        """A zero-argument call running the model on fixed numpy buffers."""
        ins = (KilnTensor * len(inputs))(*map(describe, inputs))
        outs = (KilnTensor * len(outputs))(*map(describe, outputs))
        run, model, n_in, n_out = self.run_fn, self.model, len(inputs), len(outputs)

        def call(keep=(inputs, outputs)):  # the arrays must outlive the descriptors
            if run(model, ins, n_in, outs, n_out) != 0:
                raise RuntimeError(self.rt.kiln_last_error().decode())
            return outputs[0]

        return call

    def close(self):
        self.rt.kiln_model_destroy(self.model)


def mlp(torch_mod, nn):
    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(64, 256), nn.Linear(256, 10)

        def forward(self, x):
            F = kF if nn is knn else tF
            return F.log_softmax(self.fc2(F.gelu(self.fc1(x))), dim=-1)

    return MLP()


def copy_weights(kmodel, tmodel):
    with torch.no_grad():
        pairs = zip(kmodel.named_parameters(), tmodel.named_parameters(), strict=True)
        for (kname, p), (tname, q) in pairs:
            assert kname == tname, (kname, tname)
            q.copy_(torch.from_numpy(np.array(p.detach().numpy())))


def timed(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls * 1e3


def bench_model(label, kmodel, tmodel, kx, tx, dyn, folder, args) -> dict:
    res = {"label": label, "ms": {}, "once": {}, "notes": []}
    kilnc = os.path.join(os.path.dirname(sys.executable), "kilnc")
    with kiln.no_grad():
        want = np.array(kmodel(kx).numpy())
        start = time.perf_counter()
        program = kiln.export(kmodel, (kx,), dynamic_shapes=dyn)
        res["once"]["kiln.export"] = time.perf_counter() - start
        name = label.split()[0].lower()
        program.save(os.path.join(folder, name))
        start = time.perf_counter()
        subprocess.run([kilnc, os.path.join(folder, name + ".kir"), "-o", folder], check=True)
        res["once"]["kilnc"] = time.perf_counter() - start
        lib = Library(folder, name)
        res["once"]["create from the library"] = lib.create_s
        out = np.empty_like(want)
        variants = {
            "kiln eager": lambda: kmodel(kx),
            "kiln.compile": kiln.compile(kmodel),
            "exported module()": program.module(),
            "kilnc library (C API)": lib.bind([np.array(kx.numpy())], [out]),
            "torch eager": lambda: tmodel(tx),
        }
        calls = {k: v for k, v in variants.items() if k in ("kiln.compile", "exported module()")}
        for k, fn in calls.items():  # first calls compile: not part of the steady state
            variants[k] = (lambda f: lambda: f(kx))(fn)
        if not args.no_inductor:
            start = time.perf_counter()
            compiled = torch.compile(tmodel)
            compiled(tx)
            res["once"]["torch.compile first call"] = time.perf_counter() - start
            variants["torch.compile"] = lambda: compiled(tx)
        for k, fn in variants.items():
            got = fn()
            got = np.array(got.numpy() if hasattr(got, "numpy") else got, dtype=np.float32)
            diff = float(np.abs(got - want).max())
            if diff > 1e-3:
                res["notes"].append(f"{label}: {k} differs from kiln eager by {diff:.2e}")
        samples = {k: [] for k in variants}
        for _ in range(args.rounds):
            for k, fn in variants.items():
                samples[k].append(timed(fn, args.calls))
        res["ms"] = {k: statistics.median(v) for k, v in samples.items()}
        lib.close()
    return res


def render(results) -> str:
    lines = ["# Ahead-of-time compiled models (bench/aot.py)", "",
             f"1 thread, no_grad, medians of interleaved rounds; kiln {kiln.__version__}, "
             f"torch {torch.__version__}.", ""]
    for r in results:
        base = r["ms"]["kiln eager"]
        lines += [f"## {r['label']}", "", "| variant | ms per call | vs kiln eager |",
                  "| --- | --- | --- |"]
        for k, v in r["ms"].items():
            lines.append(f"| {k} | {v:.4f} | {base / v:.2f}x |")
        lines += ["", "| one-off cost | seconds |", "| --- | --- |"]
        lines += [f"| {k} | {v:.3f} |" for k, v in r["once"].items()]
        lines += [""] + [f"- {n}" for n in r["notes"]] + ([""] if r["notes"] else [])
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few rounds, no inductor")
    parser.add_argument("--out", default=None, help=f"markdown output (default {DEFAULT_OUT})")
    parser.add_argument("--no-inductor", action="store_true")
    args = parser.parse_args()
    args.rounds, args.calls = (3, 5) if args.quick else (9, 50)
    args.no_inductor |= args.quick
    kiln.set_num_threads(1)
    torch.set_num_threads(1)
    torch.set_grad_enabled(False)
    results = []
    with tempfile.TemporaryDirectory() as folder:
        kiln.manual_seed(0)
        kg = build_gpt(kiln, knn, kF).eval()
        tg = build_gpt(torch, torch.nn, tF).eval()
        copy_weights(kg, tg)
        idx = np.random.default_rng(0).integers(0, 512, (4, 64))
        batch = kiln.Dim("batch", min=2, max=64)
        results.append(bench_model("GPT 2x128, 4x64 tokens", kg, tg, kiln.from_numpy(idx),
                                   torch.from_numpy(idx), {"idx": {0: batch}}, folder, args))
        km, tm = mlp(kiln, knn).eval(), mlp(torch, torch.nn).eval()
        copy_weights(km, tm)
        x = np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)
        results.append(bench_model("MLP 64-256-10, 8 rows", km, tm, kiln.from_numpy(x),
                                   torch.from_numpy(x), {"x": {0: batch}}, folder, args))
    text = render(results)
    print(text)
    out = args.out or (None if args.quick else DEFAULT_OUT)
    if out:
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(out)), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

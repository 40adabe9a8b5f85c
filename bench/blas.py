"""Which BLAS kiln's float GEMMs should run on: kiln on MKL, kiln on OpenBLAS and torch, on the
GEMM shapes of the benchmark models, at 1 thread and all threads, in one run.

kiln picks its BLAS when it loads (runtime/blas.h), so each kiln variant runs in its own
subprocess (KILN_BLAS=openblas for OpenBLAS); torch runs in this one. Medians of 200 calls.

    .venv/bin/python bench/blas.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

# (m, n, k): the GPT's projections at 512 tokens (d=128) and a conv's im2col GEMM.
SHAPES = [(512, 384, 128), (512, 128, 512), (512, 512, 128), (1024, 1024, 1024), (64, 1024, 27)]

CHILD = """
import json, sys, time, statistics, numpy as np, kiln
out = {"blas": kiln._C._blas(), "times": {}}
for threads in json.loads(sys.argv[1]):
    kiln.set_num_threads(threads)
    for m, n, k in json.loads(sys.argv[2]):
        a, b = kiln.randn(m, k), kiln.randn(k, n)
        for _ in range(5):
            a @ b
        ts = []
        for _ in range(200):
            t = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t)
        out["times"][f"{threads} {m}x{n}x{k}"] = statistics.median(ts)
print(json.dumps(out))
"""


def kiln_times(env: dict, threads: list[int]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(threads), json.dumps(SHAPES)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


def torch_times(threads: list[int]) -> dict:
    import torch

    out = {}
    for t in threads:
        torch.set_num_threads(t)
        for m, n, k in SHAPES:
            a, b = torch.randn(m, k), torch.randn(k, n)
            for _ in range(5):
                a @ b
            ts = []
            for _ in range(200):
                s = time.perf_counter()
                a @ b
                ts.append(time.perf_counter() - s)
            out[f"{t} {m}x{n}x{k}"] = statistics.median(ts)
    return out


def main() -> None:
    threads = sorted({1, os.cpu_count() or 1})
    default = kiln_times({}, threads)
    openblas = kiln_times({"KILN_BLAS": "openblas"}, threads)
    torch = torch_times(threads)
    print(f"kiln's default BLAS here: {default['blas']}\n")
    print("| threads | m x n x k | kiln default (us) | kiln OpenBLAS (us) | torch (us) |")
    print("| --- | --- | --- | --- | --- |")
    for key, t in torch.items():
        nt, shape = key.split()
        d, o = default["times"][key], openblas["times"][key]
        print(f"| {nt} | {shape} | {d * 1e6:.0f} | {o * 1e6:.0f} | {t * 1e6:.0f} |")


if __name__ == "__main__":
    main()

"""kiln on a CUDA GPU beside torch: eager ops and kiln.compile against torch eager and
torch.compile (inductor) on the same device, medians of interleaved repeats.

    python bench/cuda.py            on a machine with an NVIDIA GPU (tests/gpu/run.sh runs it)
    python bench/cuda.py --smoke    tiny sizes, a few repeats: checks the script runs anywhere
                                    kiln has a CUDA device (also the host emulator)

torch is a peer here, never a dependency: without torch (or without CUDA in torch) its columns
are left out. Each workload's results are checked against kiln's CPU eager result first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

import kiln
import kiln.nn.functional as F


def _workloads(smoke: bool):
    rows, cols = (8, 64) if smoke else (4096, 4096)
    tokens, width = (8, 32) if smoke else (2048, 1024)

    # Each maker takes the library (kiln or torch) and its nn.functional.
    def chain(lib, f):
        def fn(x):
            return f.gelu(x * 1.5 + 0.5).sigmoid() * x - 1.0

        return fn

    def softmax(lib, f):
        return lambda x: f.softmax(x, -1)

    def mlp(lib, f):
        def fn(x, w1, w2):
            return f.linear(f.gelu(f.linear(f.layer_norm(x, (x.shape[-1],)), w1)), w2)

        return fn

    def args_rows(lib, dev):
        return (lib.randn(rows, cols, device=dev),)

    def args_mlp(lib, dev):
        w1 = lib.randn(4 * width, width, device=dev) * 0.02
        w2 = lib.randn(width, 4 * width, device=dev) * 0.02
        return (lib.randn(tokens, width, device=dev), w1, w2)

    return [
        ("pointwise chain", f"{rows}x{cols}", chain, args_rows),
        ("softmax", f"{rows}x{cols}", softmax, args_rows),
        ("LN-GELU-MLP", f"{tokens}x{width}", mlp, args_mlp),
    ]


def _time(fn, args, sync, repeats: int) -> float:
    fn(*args)
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        sync()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and few repeats")
    opts = parser.parse_args()
    if not kiln.cuda.is_available():
        print(f"bench/cuda.py: no CUDA device ({kiln._C._cuda.unavailable_reason()}): nothing "
              "to measure")
        return 0
    if kiln.cuda.is_emulated() and not opts.smoke:
        print("bench/cuda.py: the CUDA device is the host emulator; run with --smoke to check the "
              "script, timings there mean nothing")
        return 0
    torch = _torch()
    repeats = 3 if opts.smoke else 25
    print(f"device: {kiln.cuda.get_device_name()}; torch: "
          f"{torch.__version__ if torch else 'not available with CUDA'}")
    header = "| workload | size | kiln eager ms | kiln.compile ms |"
    if torch:
        header += " torch eager ms | torch.compile ms | kiln.compile vs torch.compile |"
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    for name, size, make, make_args in _workloads(opts.smoke):
        kiln.manual_seed(0)
        args = make_args(kiln, "cuda")
        eager = make(kiln, F)
        compiled = kiln.compile(make(kiln, F))
        want = eager(*[a.cpu() for a in args]).numpy()
        for fn in (eager, compiled):
            got = fn(*args).cpu().numpy()
            if not np.allclose(got, want, rtol=2e-3, atol=2e-3):
                print(f"{name}: results differ from the CPU's by {np.abs(got - want).max()}")
                return 1
        row = [_time(eager, args, kiln.cuda.synchronize, repeats),
               _time(compiled, args, kiln.cuda.synchronize, repeats)]
        line = f"| {name} | {size} | {row[0] * 1e3:.3f} | {row[1] * 1e3:.3f} |"
        if torch:
            import torch.nn.functional as tf

            targs = tuple(torch.from_numpy(a.cpu().numpy()).cuda() for a in args)
            teager = make(torch, tf)
            tcompiled = torch.compile(make(torch, tf))
            t = [_time(teager, targs, torch.cuda.synchronize, repeats),
                 _time(tcompiled, targs, torch.cuda.synchronize, repeats)]
            line += f" {t[0] * 1e3:.3f} | {t[1] * 1e3:.3f} | {t[1] / row[1]:.2f}x |"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

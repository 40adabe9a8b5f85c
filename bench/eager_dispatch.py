"""Eager dispatch overhead: per-call latency of small ops, kiln vs PyTorch, in one run.

Each case runs both frameworks on 1-element (or tiny) tensors, so the time is almost all
dispatch: argument parsing, type promotion, output allocation, kernel launch. Rounds are
interleaved (kiln, torch, kiln, torch, ...) and the median of the rounds is reported.

    .venv/bin/python bench/eager_dispatch.py [--rounds 15] [--calls 20000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

import kiln


def cases(fw, mk):
    F = fw.nn.functional
    a, b = mk(np.ones(1, np.float32)), mk(np.full(1, 2.0, np.float32))
    m = mk(np.ones((4, 4), np.float32))
    return {
        "add(a, b)": lambda: a + b,
        "mul(a, 2.0)": lambda: a * 2.0,
        "a.view(1, 1)": lambda: a.view(1, 1),
        "m.t()": lambda: m.t(),
        "m.sum()": lambda: m.sum(),
        "exp(a)": lambda: fw.exp(a),
        "a.add(b, alpha=2)": lambda: a.add(b, alpha=2),
        "m.max(1) (overload)": lambda: m.max(1),
        "relu(a) (F)": lambda: F.relu(a),
        "m[1]": lambda: m[1],
        "m @ m (4x4)": lambda: m @ m,
    }


def per_call_us(fn, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    kiln.set_num_threads(1)
    kc = cases(kiln, kiln.from_numpy)
    tc = cases(torch, torch.from_numpy)
    print(f"eager dispatch latency, median of {args.rounds} interleaved rounds "
          f"x {args.calls} calls")
    print(f"{'op':<20}{'kiln us':>10}{'torch us':>10}{'kiln/torch':>12}")
    for name in kc:
        try:
            kc[name]()
        except Exception as e:  # an op not available yet is reported, not fatal
            print(f"{name:<20}{'n/a':>10}  ({type(e).__name__}: {e})")
            continue
        ks, ts = [], []
        for _ in range(args.rounds):
            ks.append(per_call_us(kc[name], args.calls))
            ts.append(per_call_us(tc[name], args.calls))
        k, t = statistics.median(ks), statistics.median(ts)
        print(f"{name:<20}{k:>10.2f}{t:>10.2f}{k / t:>12.2f}")


if __name__ == "__main__":
    main()

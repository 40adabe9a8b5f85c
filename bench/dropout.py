"""Random numbers in compiled code: training-mode dropout inside kiln.compile, beside eager kiln,
torch eager and torch.compile (inductor), at 1 thread and all threads, in one run.

Workloads (float32, grad mode off, as an evaluation of a training-mode model or a data
augmentation step runs): a GELU-MLP block with dropout after the activation and after the
output (d=768, 1024 tokens), a residual dropout-add-LayerNorm (1024 x 768), and channel dropout
after a ReLU (F.dropout2d of 16 x 64 x 56 x 56). Before timing, kiln's compiled result is
checked against kiln eager from the same seed, and the generator's state after the call too:
the same elements dropped, the values equal to float rounding (GEMM, GELU). Medians
of 30 calls each; the ratios are the other's time over kiln compiled's (above 1: kiln compiled
is faster).

    .venv/bin/python bench/dropout.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def workloads(m):
    """(name, size, fn, args) for framework module `m` (kiln or torch)."""
    F = m.nn.functional
    rng = np.random.default_rng(0)

    def t(*shape):
        return m.from_numpy(rng.standard_normal(shape).astype(np.float32))

    d = 768
    w1, b1, w2, b2 = t(4 * d, d) * 0.02, t(4 * d), t(d, 4 * d) * 0.02, t(d)

    def mlp(x):
        h = F.dropout(F.gelu(F.linear(x, w1, b1)), 0.1)
        return F.dropout(F.linear(h, w2, b2), 0.1)

    gamma, beta = t(d), t(d)

    def residual(x, y):
        return F.layer_norm(x + F.dropout(y, 0.1), (d,), gamma, beta)

    def channel(x):
        return F.dropout2d(F.relu(x), 0.2)

    return [("GELU-MLP with dropout", f"d={d}, 1024 tokens", mlp, (t(1024, d),)),
            ("dropout + add + layer_norm", f"1024 x {d}", residual, (t(1024, d), t(1024, d))),
            ("relu + dropout2d", "16x64x56x56", channel, (t(16, 64, 56, 56),))]


def median_ms(fn, args, rounds: int) -> float:
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def check_equal(kiln, eager, compiled, args) -> None:
    kiln.manual_seed(7)
    want, state = eager(*args), kiln.get_rng_state()
    kiln.manual_seed(7)
    got = compiled(*args)
    assert kiln.equal(got == 0, want == 0), "compiled dropout drops other elements than eager"
    assert kiln.allclose(got, want, rtol=1e-4, atol=1e-5), "compiled values differ from eager's"
    assert kiln.equal(kiln.get_rng_state(), state), "the generator ends elsewhere"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    args = ap.parse_args(argv)
    import torch

    import kiln

    print("| threads | workload | size | kiln eager | kiln compiled | torch eager | "
          "torch.compile | vs kiln eager | vs torch.compile |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for threads in sorted({1, os.cpu_count() or 1}):
        kiln.set_num_threads(threads)
        torch.set_num_threads(threads)
        for (name, size, kfn, kargs), (_, _, tfn, targs) in zip(workloads(kiln), workloads(torch),
                                                              strict=True):  # fmt: skip
            kiln.compiler.reset()
            torch._dynamo.reset()
            kc, tc = kiln.compile(kfn), torch.compile(tfn)
            with kiln.no_grad(), torch.no_grad():
                check_equal(kiln, kfn, kc, kargs)
                ms = {"ke": median_ms(kfn, kargs, args.rounds),
                      "kc": median_ms(kc, kargs, args.rounds),
                      "te": median_ms(tfn, targs, args.rounds),
                      "tc": median_ms(tc, targs, args.rounds)}  # fmt: skip
            print(f"| {threads} | {name} | {size} | {ms['ke']:.3f} | {ms['kc']:.3f} | "
                  f"{ms['te']:.3f} | {ms['tc']:.3f} | {ms['ke'] / ms['kc']:.2f}x | "
                  f"{ms['tc'] / ms['kc']:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

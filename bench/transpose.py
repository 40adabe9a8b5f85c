"""Transposed reads and reductions over the outer dim: kiln.compile vs torch.compile, 1 thread,
medians of interleaved repeats (ms per call).

    .venv/bin/python bench/transpose.py
"""

import statistics
import time

import numpy as np
import torch

import kiln

CASES = {
    "a.t().contiguous() * 2, 2048x2048": ((2048, 2048), lambda a: a.t().contiguous() * 2),
    "a.t().contiguous() * 2, 1000x3000": ((1000, 3000), lambda a: a.t().contiguous() * 2),
    "a.permute(2, 0, 1).contiguous(), 64x256x256": (
        (64, 256, 256), lambda a: a.permute(2, 0, 1).contiguous()),
    "a.sum(0), 2048x2048": ((2048, 2048), lambda a: a.sum(0)),
}


def main() -> None:
    kiln.set_num_threads(1)
    torch.set_num_threads(1)
    print("| case | kiln.compile ms | torch.compile ms |\n| --- | ---: | ---: |")
    for name, (shape, fn) in CASES.items():
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        k, t = kiln.compile(fn), torch.compile(fn)
        kx, tx = kiln.from_numpy(x), torch.from_numpy(x)
        np.testing.assert_allclose(k(kx).numpy(), t(tx).numpy(), rtol=1e-5, atol=1e-5)
        samples = {"kiln": [], "torch": []}
        for _ in range(15):
            for lib, f, a in (("kiln", k, kx), ("torch", t, tx)):
                start = time.perf_counter()
                f(a)
                samples[lib].append(time.perf_counter() - start)
        print(f"| {name} | {statistics.median(samples['kiln']) * 1e3:.2f} | "
              f"{statistics.median(samples['torch']) * 1e3:.2f} |", flush=True)


if __name__ == "__main__":
    main()

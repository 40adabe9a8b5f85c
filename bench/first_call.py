"""First-call latency of kiln.compile on the 12-layer GPT of tools/demo.py (d=128, 4 x 64
tokens, 1 thread, under no_grad): the first compiled call minus one eager call, after
``kiln.compiler.reset()``, with the kernel cache warm (a warm-up call first), median and min of
5. It times capture, graph building, partitioning and the driver pipeline, for backend="eager",
the default backend, and the default backend with dynamic=True.

    .venv/bin/python bench/first_call.py            # this checkout
    PYTHONPATH=OTHER/frontend .venv/bin/python bench/first_call.py   # another tree (A/B)
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

import kiln
import kiln.nn as knn
import kiln.nn.functional as kF

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from demo import build_gpt  # noqa: E402


def main() -> None:
    kiln.set_num_threads(1)
    kiln.manual_seed(0)
    model = build_gpt(kiln, knn, kF, d=128, layers=12).eval()
    idx = kiln.from_numpy(np.random.default_rng(0).integers(0, 512, size=(4, 64)))

    def first_call(**options) -> float:
        kiln.compiler.reset()
        t0 = time.perf_counter()
        model(idx)
        eager = time.perf_counter() - t0
        compiled = kiln.compile(model, **options)
        t0 = time.perf_counter()
        compiled(idx)
        return time.perf_counter() - t0 - eager

    with kiln.no_grad():
        for label, options in [("backend=eager", {"backend": "eager"}),
                               ("default backend", {}),
                               ("default backend, dynamic=True", {"dynamic": True})]:
            first_call(**options)  # warms the kernel cache
            times = [first_call(**options) for _ in range(5)]
            print(f"{label}: median {statistics.median(times) * 1e3:.1f} ms "
                  f"(min {min(times) * 1e3:.1f})")


if __name__ == "__main__":
    main()

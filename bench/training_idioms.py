"""Training idioms beside torch, one run, medians: an LSTM and a GroupNorm forward+backward in
eager mode, and a whole training step (zero_grad, forward, backward, clip_grad_norm_, AdamW)
eager, with the model compiled, and compiled whole. Run with KILN_NUM_THREADS=1 OMP_NUM_THREADS=1
for one thread:

    python bench/training_idioms.py
"""

from __future__ import annotations

import time

import numpy as np
import torch

import kiln

torch.set_num_threads(1)


def median_ms(fn, rounds=30, warmup=5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3


def lstm(lib):
    lib.manual_seed(0)
    m = lib.nn.LSTM(64, 64, 2)
    x = lib.randn(35, 20, 64)
    h = (lib.zeros(2, 20, 64), lib.zeros(2, 20, 64))
    return lambda: m(x, h)[0].sum().backward()


def group_norm(lib):
    gn = lib.nn.GroupNorm(8, 64)
    x = lib.randn(16, 64, 16, 16, requires_grad=True)
    return lambda: gn(x).sum().backward()


def training_step(mode: str):
    kiln.manual_seed(0)
    layers = [kiln.nn.Sequential(kiln.nn.Linear(256, 256), kiln.nn.GELU()) for _ in range(8)]
    model = kiln.nn.Sequential(*layers, kiln.nn.Linear(256, 10))
    opt = kiln.optim.AdamW(model.parameters(), lr=1e-3)
    forward = kiln.compile(model) if mode == "model compiled" else model
    x, y = kiln.randn(64, 256), kiln.randint(0, 10, (64,))

    def step():
        opt.zero_grad()
        loss = kiln.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        kiln.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    return kiln.compile(step) if mode == "step compiled" else step


def main() -> None:
    print(f"{'workload':44s} {'torch ms':>9s} {'kiln ms':>9s}")
    for name, make in (("LSTM(64, 64, 2), 35 x 20, forward+backward", lstm),
                       ("GroupNorm(8, 64), 16x64x16x16, forward+backward", group_norm)):
        print(f"{name:44s} {median_ms(make(torch)):9.2f} {median_ms(make(kiln)):9.2f}")
    for mode in ("eager", "model compiled", "step compiled"):
        label = f"MLP 8x256 step with clipping, {mode}"
        print(f"{label:44s} {'':9s} {median_ms(training_step(mode)):9.2f}")


if __name__ == "__main__":
    main()

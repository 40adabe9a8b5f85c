"""Per-call time of the heavier eager ops on one thread, kiln vs PyTorch, in one run.

Shapes are those of the demo model (tools/demo.py): batch 4, 64 tokens, width 128, 4 heads,
plus 262,144-element float math, float16/bfloat16 math, the hardtanh family at a MobileNetV2
block's size (2x144x16x16), MobileNetV2's depthwise convolutions (stride 1 and 2), ResNet's
convolutions (the 7x7 stem, 3x3 at stride 1 and 2, 1x1) and a conv net's 2 x 2 max pooling.
With KILN_ONEDNN=0 kiln's convolutions run on its own kernels instead of oneDNN.
Rounds are interleaved (kiln, torch, kiln, ...) and the median per call is reported.

    .venv/bin/python bench/nn_ops.py [--rounds 9] [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as tF

import kiln
import kiln.nn.functional as kF


def make_cases():
    rng = np.random.default_rng(0)

    def arr(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    x, w, b = arr(4, 64, 128), arr(384, 128), arr(384)
    q, h = arr(4, 4, 64, 32), arr(4, 64, 512)
    a, m = arr(512, 512), arr(1 << 20)
    e, img = arr(8, 64, 512), arr(16, 32, 32, 32)
    blk, dw56, dw14, dww = arr(2, 144, 16, 16), arr(1, 144, 56, 56), arr(1, 384, 14, 14), arr(
        384, 1, 3, 3)
    stem, stemw, r56, w33, w11 = arr(1, 3, 224, 224), arr(64, 3, 7, 7), arr(1, 64, 56, 56), arr(
        128, 64, 3, 3), arr(256, 64, 1, 1)
    cases = {}
    for fw, F, mk in ((kiln, kF, kiln.from_numpy), (torch, tF, torch.from_numpy)):
        X, W, B, Q, H, A, E, IMG = map(mk, (x, w, b, q, h, a, e, img))
        BLK, DW56, DW14, DWW = map(mk, (blk, dw56, dw14, dww))
        STEM, STEMW, R56, W33, W11 = map(mk, (stem, stemw, r56, w33, w11))
        M16 = mk(m).half()
        E16, EB16 = E.half(), E.to(fw.bfloat16)
        cases[fw.__name__] = {
            "linear 256x128->384": lambda X=X, W=W, B=B, F=F: F.linear(X, W, B),
            "sdpa causal 4x4x64x32": lambda Q=Q, F=F: F.scaled_dot_product_attention(
                Q, Q, Q, is_causal=True
            ),
            "layer_norm 256x128": lambda X=X, F=F: F.layer_norm(X, (128,)),
            "gelu tanh 131K": lambda H=H, F=F: F.gelu(H, approximate="tanh"),
            "matmul 512x512": lambda A=A: A @ A,
            "f16 add 1M": lambda M=M16: M + M,
            "exp 262K": lambda E=E: E.exp(),
            "erf 262K": lambda E=E: E.erf(),
            "gelu 262K": lambda E=E, F=F: F.gelu(E),
            "sigmoid 262K": lambda E=E: E.sigmoid(),
            "tanh 262K": lambda E=E: E.tanh(),
            "transposed copy 4x4x64x32": lambda X=X: X.reshape(4, 64, 4, 32).transpose(1, 2)
            .contiguous(),  # fmt: skip
            "hardtanh 2x144x16x16": lambda BLK=BLK, F=F: F.hardtanh(BLK),
            "relu6 2x144x16x16": lambda BLK=BLK, F=F: F.relu6(BLK),
            "f16 exp 262K": lambda E=E16: E.exp(),
            "f16 sigmoid 262K": lambda E=E16: E.sigmoid(),
            "f16 relu 262K": lambda E=E16: E.relu(),
            "bf16 exp 262K": lambda E=EB16: E.exp(),
            "bf16 tanh 262K": lambda E=EB16: E.tanh(),
            "sin 262K": lambda E=E: E.sin(),
            "dw conv 3x3 144x56x56": lambda X=DW56, W=DWW[:144], F=F: F.conv2d(
                X, W, padding=1, groups=144),
            "dw conv 3x3 s2 144x56x56": lambda X=DW56, W=DWW[:144], F=F: F.conv2d(
                X, W, padding=1, stride=2, groups=144),
            "dw conv 3x3 384x14x14": lambda X=DW14, W=DWW, F=F: F.conv2d(
                X, W, padding=1, groups=384),
            "conv 7x7 s2 stem 3->64 @224": lambda X=STEM, W=STEMW, F=F: F.conv2d(
                X, W, stride=2, padding=3),
            "conv 3x3 64->64 @56": lambda X=R56, W=W33[:64], F=F: F.conv2d(X, W, padding=1),
            "conv 3x3 s2 64->128 @56": lambda X=R56, W=W33, F=F: F.conv2d(
                X, W, stride=2, padding=1),
            "conv 1x1 64->256 @56": lambda X=R56, W=W11, F=F: F.conv2d(X, W),
            "max_pool2d 2x2 16x32x32x32 (indices)": lambda IMG=IMG, F=F: F.max_pool2d(
                IMG, 2, return_indices=True
            ),
        }
    return cases["kiln"], cases["torch"]


def per_call_ms(fn, min_time=0.05) -> float:
    fn()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < min_time:
        fn()
        n += 1
    return (time.perf_counter() - t0) / n * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1, help="threads of both libraries")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    kiln.set_num_threads(args.threads)
    kc, tc = make_cases()
    print(f"eager op time per call, {args.threads} thread(s), median of {args.rounds} "
          "interleaved rounds")
    print(f"{'op':<38}{'kiln ms':>10}{'torch ms':>10}{'kiln/torch':>12}")
    for name in kc:
        ks, ts = [], []
        for _ in range(args.rounds):
            ks.append(per_call_ms(kc[name]))
            ts.append(per_call_ms(tc[name]))
        k, t = statistics.median(ks), statistics.median(ts)
        print(f"{name:<38}{k:>10.3f}{t:>10.3f}{k / t:>12.2f}")


if __name__ == "__main__":
    main()

"""kiln's built-in example: a GPT-style decoder written once for the torch API, run by kiln.

The model source below is ordinary PyTorch code, parameterized by the framework module, so the
same text runs under `torch` and under `kiln` (with only the imports changed). The demo loads
PyTorch's weights into kiln through state_dict, runs both, and prints the agreement and the
time per forward pass (medians of interleaved runs).

    .venv/bin/python tools/demo.py
"""

from __future__ import annotations

import math
import statistics
import sys
import time

import numpy as np


def build_gpt(torch, nn, F, vocab=512, d=128, heads=4, layers=2, ctx=64):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            return F.log_softmax(self.head(self.ln_f(x)), dim=-1)

    return GPT()


def timed(fn, rounds):
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    import torch
    import torch.nn as tnn
    import torch.nn.functional as tF

    import kiln
    import kiln.nn as knn
    import kiln.nn.functional as kF

    torch.manual_seed(0)
    ref = build_gpt(torch, tnn, tF).eval()
    model = build_gpt(kiln, knn, kF).eval()
    weights = {k: kiln.from_numpy(v.numpy().copy()) for k, v in ref.state_dict().items()}
    model.load_state_dict(weights)
    idx = np.random.default_rng(0).integers(0, 512, size=(4, 64))
    t_idx, k_idx = torch.from_numpy(idx), kiln.from_numpy(idx)

    with torch.no_grad():
        want = ref(t_idx).numpy()
    got = model(k_idx).numpy()
    err = float(np.abs(got - want).max())
    params = sum(p.numel() for p in model.parameters())

    rounds = 15
    k_times, t_times = [], []
    for _ in range(rounds):  # interleave so both see the same machine load
        k_times.append(timed(lambda: model(k_idx), 1))
        with torch.no_grad():
            t_times.append(timed(lambda: ref(t_idx), 1))
    k_ms, t_ms = statistics.median(k_times) * 1e3, statistics.median(t_times) * 1e3

    print("kiln demo: GPT-style decoder (2 blocks, d=128, 4 heads, vocab 512), 4 x 64 tokens")
    print(f"  parameters                : {params:,}")
    print(f"  max |kiln - torch| (logp) : {err:.2e}  {'OK' if err < 1e-3 else 'MISMATCH'}")
    print(f"  kiln eager forward        : {k_ms:8.2f} ms  (median of {rounds})")
    print(f"  torch eager forward       : {t_ms:8.2f} ms")
    print(f"  kiln eager / torch eager  : {k_ms / t_ms:8.2f}x time")
    print("  kiln.compile              : not in this build yet (the capture frontend is pending);")
    print("                              its speedup and graph-break report will be shown here.")
    return 0 if err < 1e-3 and math.isfinite(err) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Compiled training: ms per training step (forward + backward + AdamW step) of kiln eager,
kiln.compile, torch eager and torch.compile (inductor), same weights and batch, in one run, at 1
thread and all threads.

Workloads: nanoGPT's model (bench/train_models.py; 4 layers, d=128, 4 heads, vocab 512, 8 x 64
tokens), one GPT-2-small-sized block (d=768, 12 heads, vocab 512, 4 x 128 tokens), a GELU MLP
classifier (256 -> 1024 -> 1024 -> 10, batch 512) and the conv-BatchNorm-ReLU-pool net (width
32, 16 x 3 x 32 x 32). The model is compiled (``kiln.compile(model)``, ``torch.compile(model)``);
the loss, ``backward()`` and the optimizer step (AdamW, each framework's default
implementation) run as the user's loop runs them. Before timing, the first compiled step's loss
is checked against kiln eager's from the same weights. ``cold`` is the first compiled step
(capture + compile of forward and backward): from empty disk caches (made for the run) at the
first thread count, a warm start from the caches it filled at the second. Each framework's
rounds run back to back (their thread pools would spin while another runs); medians over the
rounds; ratios are the other's time over kiln compiled's (above 1: kiln compiled is faster).
`kiln saved MB` is what kiln's compiled forward saves for the backward (activations; saved
inputs excluded), `kiln step peak MB` the host memory a step needs above what stays allocated
between steps (kiln.cpu.max_memory_allocated; torch has no CPU counter), eager and compiled,
`kiln fallbacks` the nodes or parts its backend ran on eager kernels.
The markdown table is printed and written atomically to bench/results/compiled_train.md
(``--quick``: small shapes, few rounds, no file). ``--autocast`` runs each step's forward and
loss inside the frameworks' bfloat16 autocast (``kiln.autocast`` / ``torch.autocast``, CPU),
writing bench/results/compiled_train_bf16.md; ``--only NAME`` keeps the workloads whose name
contains NAME.

    .venv/bin/python bench/compiled_train.py [--quick] [--autocast] [--only NAME] [--rounds N]
        [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from capture import cpu_name, write_atomic  # noqa: E402
from train_models import conv_net, gpt_classes, llama_classes  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "results", "compiled_train.md")
BF16_OUT = os.path.join(os.path.dirname(__file__), "results", "compiled_train_bf16.md")


def mlp(m):
    nn = m.nn
    return nn.Sequential(nn.Linear(256, 1024), nn.GELU(), nn.Linear(1024, 1024), nn.GELU(),
                         nn.Linear(1024, 10))


def workloads(quick: bool):
    """(name, size, make(m) -> model, batch arrays, loss(m, model, *batch))."""
    rng = np.random.default_rng(0)

    def gpt_loss(m, model, idx, tgt):
        return model(idx, tgt)[1]

    def ce_loss(m, model, x, y):
        return m.nn.functional.cross_entropy(model(x), y)

    def tokens(vocab, b, t):
        idx = rng.integers(0, vocab, (b, t))
        return idx, np.roll(idx, -1, axis=1)

    if quick:
        return [("nanoGPT", "1 layer, d=32", lambda m: gpt_classes(m, 64, 16, 32, 4, 1)(),
                 tokens(64, 2, 16), gpt_loss),
                ("MLP", "64-128-10", lambda m: m.nn.Sequential(
                    m.nn.Linear(64, 128), m.nn.GELU(), m.nn.Linear(128, 10)),
                 (rng.standard_normal((32, 64)).astype(np.float32), rng.integers(0, 10, 32)),
                 ce_loss)]
    return [
        ("nanoGPT", "4 layers, d=128, 8x64 tokens",
         lambda m: gpt_classes(m, 512, 64, 128, 4, 4)(), tokens(512, 8, 64), gpt_loss),
        ("GPT-2-small block", "d=768, 12 heads, 4x128 tokens",
         lambda m: gpt_classes(m, 512, 128, 768, 12, 1)(), tokens(512, 4, 128), gpt_loss),
        ("LLaMA-style", "4 layers, d=128, GQA 4/2 heads, 8x64 tokens",
         lambda m: llama_classes(m)(), tokens(512, 8, 64), gpt_loss),
        ("GELU MLP", "256-1024-1024-10, batch 512", mlp,
         (rng.standard_normal((512, 256)).astype(np.float32), rng.integers(0, 10, 512)),
         ce_loss),
        ("conv-BN-ReLU net", "width 32, 16x3x32x32", lambda m: conv_net(m, 32),
         (rng.standard_normal((16, 3, 32, 32)).astype(np.float32), rng.integers(0, 10, 16)),
         ce_loss),
    ]


class Trainer:
    """One framework's model, optimizer and batch; `step()` runs one training step."""

    def __init__(self, m, model, batch, loss, compiled: bool, autocast: bool = False):
        self.m, self.model, self.loss_fn, self.autocast = m, model, loss, autocast
        self.batch = [m.tensor(a) for a in batch]
        self.opt = m.optim.AdamW(model.parameters(), lr=1e-4)
        self.backend = None
        if compiled and m.__name__ == "kiln":
            from kiln._capture.backend_compiled import CpuBackend

            self.backend = CpuBackend()  # its reports: saved bytes, fallbacks
            self.run = m.compile(model, backend=self.backend)
        else:
            self.run = m.compile(model) if compiled else model

    def step(self) -> float:
        with self.m.autocast("cpu", dtype=self.m.bfloat16, enabled=self.autocast):
            loss = self.loss_fn(self.m, self.run, *self.batch)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss


def copy_weights(src, dst, kiln):
    dst.load_state_dict({k: kiln.tensor(v.detach().numpy()) for k, v in src.state_dict().items()})


def bench(name, make, batch, loss, rounds, kiln, torch, autocast=False):
    torch.manual_seed(0)
    ref = make(torch)
    models = {}
    for key, m in (("ke", kiln), ("kc", kiln), ("te", torch), ("tc", torch)):
        model = make(m)
        if m is kiln:
            copy_weights(ref, model, kiln)
        else:
            model.load_state_dict(ref.state_dict())
        models[key] = Trainer(m, model, batch, loss, compiled=key.endswith("c"),
                              autocast=autocast)
    kiln.compiler.reset()
    torch._dynamo.reset()
    cold = {}
    first = {}
    for key in ("ke", "kc", "tc", "te"):
        start = time.perf_counter()
        first[key] = float(models[key].step().detach())
        cold[key] = time.perf_counter() - start
    tol = 2e-2 if autocast else 1e-4  # bfloat16 rounds the fused kernels' results differently
    assert abs(first["kc"] - first["ke"]) <= tol * max(1.0, abs(first["ke"])), first
    samples = {k: [] for k in models}
    peak = {}
    for k, t in models.items():  # one framework at a time: no thread pool spins during another
        time.sleep(0.2)
        for _ in range(2):  # warm: steady state, caches filled
            t.step()
        if t.m is kiln:  # host memory a step needs above what stays allocated between steps
            base = kiln.cpu.memory_allocated()
            kiln.cpu.reset_peak_memory_stats()
            t.step()
            peak[k] = (kiln.cpu.max_memory_allocated() - base) / 2**20
        for _ in range(rounds):
            start = time.perf_counter()
            t.step()
            samples[k].append(time.perf_counter() - start)
    reports = models["kc"].backend.reports
    compiled = {
        "saved_mb": sum(i.get("saved_bytes", 0) for r in reports for i in r.infos) / 2**20,
        "fallbacks": sum(len(r.fallbacks) for r in reports),
        "peak_mb": (peak["ke"], peak["kc"]),
    }
    return {k: statistics.median(v) * 1e3 for k, v in samples.items()}, cold, compiled


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--autocast", action="store_true")
    ap.add_argument("--only", default=None)
    args = ap.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 15)
    # Empty compile caches for this run, so the first thread count's `cold` is a cold compile
    # for both (kiln's kernel cache, inductor's FX graph and kernel caches) and the second's a
    # warm start from the caches the first filled.
    caches = tempfile.mkdtemp(prefix="compiled-train-caches-")
    os.environ["KILN_CACHE_DIR"] = os.path.join(caches, "kiln")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(caches, "inductor")
    import torch

    import kiln

    precision = "bfloat16 autocast" if args.autocast else "float32"
    lines = [f"Compiled training step (forward + backward + AdamW), {precision}, ms, median of "
             f"{rounds}; "
             f"{cpu_name()}, {datetime.date.today()}. First compiled step in s: cold at "
             "1 thread, warm (disk caches) at the second thread count.", "",
             "| threads | workload | size | kiln eager | kiln.compile | torch eager | "
             "torch.compile | vs kiln eager | vs torch eager | vs torch.compile | cold kiln "
             "/ torch.compile (s) | kiln saved MB | kiln step peak MB eager / compiled | "
             "kiln fallbacks |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
             "---: | ---: |"]
    print("\n".join(lines), flush=True)
    for threads in sorted({1, os.cpu_count() or 1}):
        kiln.set_num_threads(threads)
        torch.set_num_threads(threads)
        for name, size, make, batch, loss in workloads(args.quick):
            if args.only and args.only not in name:
                continue
            ms, cold, kc = bench(name, make, batch, loss, rounds, kiln, torch, args.autocast)
            line = (f"| {threads} | {name} | {size} | {ms['ke']:.2f} | {ms['kc']:.2f} | "
                    f"{ms['te']:.2f} | {ms['tc']:.2f} | {ms['ke'] / ms['kc']:.2f}x | "
                    f"{ms['te'] / ms['kc']:.2f}x | {ms['tc'] / ms['kc']:.2f}x | "
                    f"{cold['kc']:.2f} / {cold['tc']:.2f} | {kc['saved_mb']:.1f} | "
                    f"{kc['peak_mb'][0]:.1f} / {kc['peak_mb'][1]:.1f} | {kc['fallbacks']} |")
            print(line, flush=True)
            lines.append(line)
    out = args.out or (None if args.quick else BF16_OUT if args.autocast else DEFAULT_OUT)
    if out:
        write_atomic(out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

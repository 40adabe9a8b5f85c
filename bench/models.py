"""Inference on real model definitions: ms per forward of kiln eager, kiln.compile, torch eager
and torch.compile (inductor), same weights and input, in one run, at 1 thread and all threads.

Workloads: torchvision's ResNet-18, ResNet-50 and MobileNetV2 (bench/vision_models.py, eval
mode, 224 x 224, batch 1 and ``--batch``), and a GPT-2-small-style decoder (nanoGPT's model from
bench/train_models.py: d=768, 12 heads, vocab 50304, 512 tokens; ``--gpt-layers`` of GPT-2's 12
blocks, 2 by default to bound the run on small machines). Each model is compiled whole
(``kiln.compile(model)``, ``torch.compile(model)``) and run under ``no_grad``; before timing,
kiln's compiled output is checked against torch eager's. ``GFLOP/s`` is the model's FLOPs
(torch's FlopCounterMode) over kiln.compile's time; ``of peak`` divides it by a 2048^3 float32
(or bfloat16) GEMM's rate in torch measured in the same run at the same thread count, the
machine's practical peak. ``graphs`` / ``eager nodes`` are kiln's compiled graphs and the nodes
its backend ran on eager kernels. Ratios are torch.compile's time over kiln.compile's (above 1:
kiln is faster). ``--autocast`` runs both frameworks' forwards inside their bfloat16 autocast.
The table is printed and written atomically to bench/results/models.md (models_bf16.md).

    .venv/bin/python bench/models.py [--rounds N] [--batch 8] [--only NAME] [--autocast]
        [--gpt-layers 2] [--threads 1,2] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from capture import cpu_name, write_atomic  # noqa: E402
from train_models import gpt_classes, llama_classes  # noqa: E402
from vision_models import mobilenet_v2, resnet  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def workloads(batch: int, gpt_layers: int):
    """(name, size, make(m) -> model, input array, forward(model, x))."""
    rng = np.random.default_rng(0)

    def image(b):
        return rng.standard_normal((b, 3, 224, 224)).astype(np.float32)

    def classify(model, x):
        return model(x)

    def gpt_logits(model, idx):
        return model(idx, idx)[0]  # nanoGPT's forward takes targets; the loss is computed too

    vision = [("ResNet-18", lambda m: resnet(m, (2, 2, 2, 2))),
              ("ResNet-50", lambda m: resnet(m, (3, 4, 6, 3), bottleneck=True)),
              ("MobileNetV2", mobilenet_v2)]
    out = []
    for b in sorted({1, batch}):
        out += [(name, f"224x224, batch {b}", make, image(b), classify) for name, make in vision]
    out.append(("GPT-2-small decoder", f"{gpt_layers} blocks, d=768, 512 tokens",
                lambda m: gpt_classes(m, 50304, 512, 768, 12, gpt_layers)(),
                rng.integers(0, 50304, (1, 512)), gpt_logits))
    out.append(("LLaMA-style decoder", "4 layers, d=512, GQA 8/2 heads, 256 tokens",
                lambda m: llama_classes(m, 32000, 512, 4, 8, 2, 1376, 256)(),
                rng.integers(0, 32000, (1, 256)), gpt_logits))
    return out


def timed(fn, rounds):
    fn()
    fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def gemm_peak_gflops(torch, dtype):
    a = torch.randn(2048, 2048).to(dtype)
    ms = timed(lambda: a @ a, 5)
    return 2 * 2048**3 / (ms * 1e-3) / 1e9


def bench(make, x, forward, rounds, kiln, torch, autocast):
    from kiln._capture.backend_compiled import CpuBackend

    torch.manual_seed(0)
    ref = make(torch).eval()
    model = make(kiln).eval()
    model.load_state_dict({k: kiln.tensor(v.detach().numpy())
                           for k, v in ref.state_dict().items()})
    backend = CpuBackend()
    runs = {"ke": (kiln, model), "kc": (kiln, kiln.compile(model, backend=backend)),
            "te": (torch, ref), "tc": (torch, torch.compile(ref))}
    kiln.compiler.reset()
    torch._dynamo.reset()

    def call(key):
        m, fn = runs[key]
        with m.no_grad(), m.autocast("cpu", dtype=m.bfloat16, enabled=autocast):
            return forward(fn, m.tensor(x))

    want = call("te").float().numpy()
    start = time.perf_counter()
    got = call("kc").float().numpy()
    cold = time.perf_counter() - start
    tol = 5e-2 if autocast else 2e-3
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(got - want).max() <= tol * scale, (np.abs(got - want).max(), scale)
    ms = {}
    for key in ("ke", "kc", "te", "tc"):  # one framework at a time: no pool spins during another
        time.sleep(0.2)
        ms[key] = timed(lambda key=key: call(key), rounds)
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        forward(ref, torch.tensor(x))
    report = {"graphs": len(backend.reports),
              "eager": sum(r.eager_nodes for r in backend.reports), "cold": cold,
              "gflop": counter.get_total_flops() / 1e9}
    return ms, report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--gpt-layers", type=int, default=2)
    ap.add_argument("--only", default=None)
    ap.add_argument("--autocast", action="store_true")
    ap.add_argument("--threads", default=None, help="comma-separated thread counts")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch

    import kiln

    precision = "bfloat16 autocast" if args.autocast else "float32"
    threads = ([int(t) for t in args.threads.split(",")] if args.threads
               else sorted({1, os.cpu_count() or 1}))
    lines = [f"Inference, {precision}, ms per forward, median of {args.rounds}; {cpu_name()}, "
             f"{datetime.date.today()}.", "",
             "| threads | model | size | kiln eager | kiln.compile | torch eager | torch.compile "
             "| vs torch eager | vs torch.compile | kiln GFLOP/s | of peak | graphs | eager nodes "
             "| first call (s) |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
             "---: | ---: |"]
    print("\n".join(lines), flush=True)
    ratios = []
    for n in threads:
        kiln.set_num_threads(n)
        torch.set_num_threads(n)
        peak = gemm_peak_gflops(torch, torch.bfloat16 if args.autocast else torch.float32)
        for name, size, make, x, forward in workloads(args.batch, args.gpt_layers):
            if args.only and args.only not in name:
                continue
            ms, r = bench(make, x, forward, args.rounds, kiln, torch, args.autocast)
            gflops = r["gflop"] / (ms["kc"] * 1e-3)
            ratios.append(ms["tc"] / ms["kc"])
            line = (f"| {n} | {name} | {size} | {ms['ke']:.1f} | {ms['kc']:.1f} | {ms['te']:.1f} "
                    f"| {ms['tc']:.1f} | {ms['te'] / ms['kc']:.2f}x | {ms['tc'] / ms['kc']:.2f}x "
                    f"| {gflops:.0f} | {gflops / peak:.0%} | {r['graphs']} | {r['eager']} | "
                    f"{r['cold']:.1f} |")
            print(line, flush=True)
            lines.append(line)
        lines.append(f"| {n} | (GEMM peak) | 2048^3 | | | | | | | {peak:.0f} | 100% | | | |")
    geomean = float(np.exp(np.mean(np.log(ratios)))) if ratios else float("nan")
    lines += ["", f"Geomean kiln.compile vs torch.compile: {geomean:.2f}x"]
    print(lines[-1])
    out = args.out or os.path.join(RESULTS, "models_bf16.md" if args.autocast else "models.md")
    write_atomic(out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Eager training benchmarks: kiln beside torch, in one run, at 1 thread and at all threads.

1. Backward time of nanoGPT's model (bench/train_models.py; 4 layers, d=128, 4 heads, vocab 512,
   8 x 64 tokens) and of a conv-BatchNorm-ReLU-pool net (width 32, 16 x 3 x 32 x 32): the same
   weights and batch in both frameworks; one forward (not timed), then `loss.backward()` timed.
2. Autograd recording overhead: a 1-element `a + b` with `a.requires_grad`, minus the same add
   without; and the GPT forward with grad mode on vs off.
3. An AdamW step over the GPT's parameters: kiln's single-tensor update (`foreach=False`)
   beside torch's, and kiln's `fused=True` (one C++ call per parameter group, also kiln's
   default) beside torch's `foreach` and `fused`, and `opt.step()` inside `kiln.compile`
   (the update captured and compiled) beside torch's `fused` and kiln's fused call.
4. An SGD step (momentum 0.9, weight decay) over the same parameters: kiln's default (the fused
   group update) beside torch's CPU default (its single-tensor loop) and `foreach`, kiln's
   single-tensor update (`foreach=False`) beside torch's, and the step compiled beside kiln's
   default.

Rounds are interleaved (kiln, torch, kiln, ...) and medians are reported. At several threads the
backward rows are measured a second time with each framework alone in its own process ("own
process" rows, medians over alternating child processes): in one process, the threads one
framework leaves spinning after its parallel regions (torch's OpenMP pool) take cores from the
other's next kernel, which skews the shared-process rows by tens of percent either way. The
markdown table is printed and written atomically to bench/results/train.md (`--quick`: small
shapes and few rounds, a smoke test; it writes only where `--out` says).

    .venv/bin/python bench/train.py [--quick] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

import kiln

sys.path.insert(0, os.path.dirname(__file__))
from capture import cpu_name, write_atomic  # noqa: E402
from train_models import conv_net, gpt_classes  # noqa: E402

DEFAULT_OUT = os.path.join(os.path.dirname(__file__), "results", "train.md")


def copy_weights(src, dst):
    dst.load_state_dict({k: kiln.tensor(v.detach().numpy()) for k, v in src.state_dict().items()})


def median_time(fn, rounds: int, inner: int = 1) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)


def interleaved(fns: dict, rounds: int, inner: int = 1) -> dict:
    """Median seconds per call of each function, measured in alternating rounds."""
    samples = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            samples[k].append(median_time(fn, 1, inner))
    return {k: statistics.median(v) for k, v in samples.items()}


class Workload:
    """One model in both frameworks with the same weights and batch."""

    def __init__(self, name, make, batch):
        torch.manual_seed(0)
        self.name = name
        self.models = {"torch": make(torch), "kiln": make(kiln)}
        copy_weights(self.models["torch"], self.models["kiln"])
        self.batch = batch

    def loss(self, lib):
        model = self.models[lib]
        m = torch if lib == "torch" else kiln
        args = [m.tensor(a) for a in self.batch]
        if self.name == "gpt":
            return model(*args)[1]
        return m.nn.functional.cross_entropy(model(args[0]), args[1])

    def backward_step(self, lib):
        """A timed backward of a fresh forward (the forward's time is excluded)."""
        model = self.models[lib]

        def run():
            for p in model.parameters():
                p.grad = None
            loss = self.loss(lib)
            start = time.perf_counter()
            loss.backward()
            run.elapsed.append(time.perf_counter() - start)

        run.elapsed = []
        return run


def bench_backward(work: Workload, rounds: int) -> dict:
    runs = {lib: work.backward_step(lib) for lib in ("kiln", "torch")}
    for _ in range(rounds):
        for run in runs.values():
            run()
    return {lib: statistics.median(run.elapsed[1:] or run.elapsed) for lib, run in runs.items()}


def bench_recording(rounds: int, inner: int) -> dict:
    out = {}
    for lib, m in (("kiln", kiln), ("torch", torch)):
        a, b = m.ones(1), m.ones(1)
        ag = m.ones(1).requires_grad_()
        t = interleaved({"plain": lambda: a + b, "grad": lambda: ag + b}, rounds, inner)
        out[lib] = (t["plain"], t["grad"] - t["plain"])
    return out


def bench_forward_modes(work: Workload, rounds: int) -> dict:
    out = {}
    for lib, m in (("kiln", kiln), ("torch", torch)):

        def on():
            work.loss(lib)

        def off():
            with m.no_grad():
                work.loss(lib)

        t = interleaved({"on": on, "off": off}, rounds)
        out[lib] = (t["off"], t["on"])
    return out


def bench_adamw(work: Workload, rounds: int) -> dict:
    """Seconds per AdamW step over the GPT's parameters with gradients present."""
    variants = [
        ("kiln", kiln, {"foreach": False}),  # the single-tensor update (kiln's default is fused)
        ("kiln fused", kiln, {"fused": True}),
        ("torch", torch, {"foreach": False}),
        ("torch foreach", torch, {"foreach": True}),
        ("torch fused", torch, {"fused": True}),
        ("kiln.compile", kiln, {"compile": True}),  # opt.step() inside a compiled function
    ]
    return bench_optimizer(work, rounds, "AdamW", {"lr": 1e-4}, variants)


def bench_sgd(work: Workload, rounds: int) -> dict:
    """Seconds per SGD step (momentum 0.9, weight decay) over the GPT's parameters: each
    library's default (kiln: the fused group update; torch on CPU: the single-tensor loop)."""
    variants = [("kiln", kiln, {}), ("kiln single-tensor", kiln, {"foreach": False}),
                ("torch", torch, {}), ("torch foreach", torch, {"foreach": True}),
                ("kiln.compile", kiln, {"compile": True})]
    return bench_optimizer(work, rounds, "SGD", {"lr": 0.1, "momentum": 0.9,
                                                 "weight_decay": 5e-4}, variants)  # fmt: skip


def bench_optimizer(work: Workload, rounds: int, name: str, options: dict, variants) -> dict:
    out = {}
    for label, m, kw in variants:
        model = work.models["kiln" if m is kiln else "torch"]
        params = list(model.parameters())
        for p in params:
            p.grad = m.ones_like(p) * 1e-3
        compiled = kw.pop("compile", False)
        opt = getattr(m.optim, name)(params, **options, **kw)
        opt.step()  # creates the state
        step = opt.step
        if compiled:
            step = functools.partial(m.compile(_optimizer_step), opt)
            step()  # captures and compiles
        with m.no_grad():
            out[label] = median_time(step, rounds)
    return out


def _optimizer_step(opt):
    opt.step()


def workloads(quick: bool):
    rng = np.random.default_rng(0)
    vocab, block = (64, 16) if quick else (512, 64)
    n_embd, layers = (32, 1) if quick else (128, 4)
    idx = rng.integers(0, vocab, (2 if quick else 8, block))
    gpt = Workload("gpt", lambda m: gpt_classes(m, vocab, block, n_embd, 4, layers)(),
                   (idx, np.roll(idx, -1, axis=1)))
    width, res, n = (8, 16, 4) if quick else (32, 32, 16)
    conv = Workload("conv", lambda m: conv_net(m, width),
                    (rng.standard_normal((n, 3, res, res)).astype(np.float32),
                     rng.integers(0, 10, n)))
    return gpt, conv


def child_backward(lib: str, threads: int, rounds: int, quick: bool) -> None:
    """Child process: backward medians of one framework alone, as JSON on stdout."""
    torch.set_num_threads(threads)
    kiln.set_num_threads(threads)
    gpt, conv = workloads(quick)
    out = {}
    for work in (gpt, conv):
        run = work.backward_step(lib)
        for _ in range(rounds):
            run()
        out[work.name] = statistics.median(run.elapsed[1:])
    print(json.dumps(out))


def isolated_backward(threads: int, args) -> dict:
    """Medians over alternating child processes, each running one framework alone."""
    samples = {lib: {"gpt": [], "conv": []} for lib in ("kiln", "torch")}
    for _ in range(3 if args.quick else 5):
        for lib in ("kiln", "torch"):
            cmd = [sys.executable, __file__, "--child", lib, str(threads), str(args.rounds)]
            cmd += ["--quick"] if args.quick else []
            got = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                            check=True).stdout.strip().splitlines()[-1])
            for name, value in got.items():
                samples[lib][name].append(value)
    return {f"{name} backward (own process)": {lib: statistics.median(samples[lib][name])
                                               for lib in samples} for name in ("gpt", "conv")}


def run_all(args) -> dict:
    gpt, conv = workloads(args.quick)
    results = {}
    for threads in args.threads:
        torch.set_num_threads(threads)
        kiln.set_num_threads(threads)
        results[threads] = {
            "gpt backward": bench_backward(gpt, args.rounds),
            "conv backward": bench_backward(conv, args.rounds),
            **(isolated_backward(threads, args) if threads > 1 else {}),
            "recording": bench_recording(args.rounds, args.inner),
            "forward modes": bench_forward_modes(gpt, args.rounds),
            "adamw": bench_adamw(gpt, args.rounds),
            "sgd": bench_sgd(gpt, args.rounds),
        }
    return results


def ms(s: float) -> str:
    return f"{s * 1e3:.2f} ms"


def us(s: float) -> str:
    return f"{s * 1e6:.2f} us"


def render(args, results) -> str:
    lines = [f"# Eager training: kiln vs torch ({datetime.date.today().isoformat()})", "",
             f"{cpu_name()}; torch {torch.__version__}; medians of {args.rounds} interleaved "
             "rounds. Ratio = kiln / torch (below 1: kiln is faster).", ""]
    for threads, r in results.items():
        lines += [f"## {threads} thread{'s' if threads > 1 else ''}", "",
                  "| measurement | kiln | torch | ratio |", "| --- | --- | --- | --- |"]
        for name in ("gpt backward", "conv backward", "gpt backward (own process)",
                     "conv backward (own process)"):
            if name not in r:
                continue
            k, t = r[name]["kiln"], r[name]["torch"]
            lines.append(f"| {name} | {ms(k)} | {ms(t)} | {k / t:.2f} |")
        (kp, kg), (tp, tg) = r["recording"]["kiln"], r["recording"]["torch"]
        lines.append(f"| 1-element add, no grad | {us(kp)} | {us(tp)} | {kp / tp:.2f} |")
        lines.append(f"| recording overhead of that add | {us(kg)} | {us(tg)} | {kg / tg:.2f} |")
        (koff, kon), (toff, ton) = r["forward modes"]["kiln"], r["forward modes"]["torch"]
        lines.append(f"| gpt forward, no_grad | {ms(koff)} | {ms(toff)} | {koff / toff:.2f} |")
        lines.append(f"| gpt forward, grad on | {ms(kon)} | {ms(ton)} | {kon / ton:.2f} |")
        a = r["adamw"]
        for mine, theirs in (("kiln", "torch"), ("kiln fused", "torch foreach"),
                             ("kiln fused", "torch fused"), ("kiln.compile", "torch fused"),
                             ("kiln.compile", "kiln fused")):
            lines.append(f"| AdamW step ({mine} vs {theirs}) | {ms(a[mine])} | {ms(a[theirs])} "
                         f"| {a[mine] / a[theirs]:.2f} |")
        s = r["sgd"]
        for mine, theirs in (("kiln", "torch"), ("kiln", "torch foreach"),
                             ("kiln single-tensor", "torch"), ("kiln.compile", "kiln")):
            lines.append(f"| SGD momentum step ({mine} vs {theirs}) | {ms(s[mine])} | "
                         f"{ms(s[theirs])} | {s[mine] / s[theirs]:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smoke mode: small shapes, few rounds")
    ap.add_argument("--out", default=None, help=f"markdown output (default {DEFAULT_OUT})")
    ap.add_argument("--child", nargs=3, metavar=("LIB", "THREADS", "ROUNDS"),
                    help=argparse.SUPPRESS)  # one framework's backward alone (isolated rows)
    args = ap.parse_args(argv)
    if args.child:
        lib, threads, rounds = args.child
        child_backward(lib, int(threads), int(rounds), args.quick)
        return 0
    args.rounds, args.inner = (3, 200) if args.quick else (11, 5000)
    all_threads = os.cpu_count() or 1
    args.threads = [1] if args.quick or all_threads == 1 else [1, all_threads]
    out = args.out if args.out is not None else (None if args.quick else DEFAULT_OUT)
    text = render(args, run_all(args))
    print(text, end="")
    if out:
        write_atomic(out, text)
        print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

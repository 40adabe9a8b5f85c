"""Data-parallel training throughput: kiln's DistributedDataParallel on Open MPI beside torch's
DDP on gloo, in the same processes, at 1 and 2 ranks (1 thread each), on this machine; and
kiln's FullyShardedDataParallel beside torch's (each transformer block a unit).

Each rank trains the nanoGPT-style model of bench/train_models.py (4 layers, d=128, vocab 512,
8 x 64 tokens per rank: the global batch grows with the ranks) with AdamW; a step is forward,
backward (with the gradient all-reduce) and the optimizer. Reported: steps per second and
samples per second over all ranks (medians over timed steps), and the time one all-reduce of
the whole gradient takes alone (what a step would wait if nothing overlapped it).

    .venv/bin/python bench/distributed.py [--steps N] [--out PATH]

The parent starts `tools/kilnrun --nproc-per-node R --threads 1 bench/distributed.py --child`
for each R and prints a markdown table (written atomically to bench/results/distributed.md).
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_OUT = os.path.join(HERE, "results", "distributed.md")


def child(steps: int) -> None:
    import numpy as np
    import torch
    import torch.distributed as tdist

    import kiln
    import kiln.distributed as kdist

    sys.path.insert(0, HERE)
    from train_models import gpt_classes

    kdist.init_process_group("mpi")
    rank, world = kdist.get_rank(), kdist.get_world_size()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    tdist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    rng = np.random.default_rng(rank)
    idx = rng.integers(0, 512, (8, 64))
    tgt = np.roll(idx, -1, axis=1)
    out = {}
    for name, m, dist, wrap, compiled in (
        ("kiln ddp", kiln, kdist, kiln.nn.parallel.DistributedDataParallel, False),
        ("torch ddp", torch, tdist, torch.nn.parallel.DistributedDataParallel, False),
        ("kiln ddp compiled", kiln, kdist, kiln.nn.parallel.DistributedDataParallel, True),
        ("torch ddp compiled", torch, tdist, torch.nn.parallel.DistributedDataParallel, True),
        ("kiln fsdp", kiln, kdist, _fsdp(kiln), False),
        ("torch fsdp", torch, tdist, _fsdp(torch), False),
        ("kiln fsdp compiled", kiln, kdist, _fsdp(kiln), True),
    ):
        m.manual_seed(0)
        try:
            model = wrap(gpt_classes(m, 512, 64, 128, 4, 4)())
        except Exception as e:  # noqa: BLE001 - a peer's wrapper that does not run here
            out[name] = {"error": f"{type(e).__name__}: {e}"[:120]}
            continue
        opt = m.optim.AdamW(model.parameters(), lr=1e-3)
        run = m.compile(model) if compiled else model
        x, y = m.tensor(idx), m.tensor(tgt)
        times, waits = [], []
        for step in range(steps + 3):  # the first steps compile
            waited = getattr(model, "_comm_wait_seconds", 0.0)
            start = time.perf_counter()
            _, loss = run(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if step >= 3:
                times.append(time.perf_counter() - start)
                waits.append(getattr(model, "_comm_wait_seconds", 0.0) - waited)
        grads = m.cat([p.grad.reshape(-1) for p in model.parameters()])
        comm = []
        for _ in range(7):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(grads)
            comm.append(time.perf_counter() - start)
        out[name] = {"step": statistics.median(times), "allreduce": statistics.median(comm),
                     "wait": statistics.median(waits) if hasattr(model, "_comm_wait_seconds")
                     else None, "mb": grads.numel() * 4 / 1e6}  # fmt: skip
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)
    tdist.destroy_process_group()


def _fsdp(m):
    """FSDP with each transformer block a unit of its own (the torch default on CPU: gloo)."""

    def wrap(model):
        if m.__name__ == "kiln":
            from kiln.distributed.fsdp import FullyShardedDataParallel as FSDP
            from kiln.distributed.fsdp.wrap import transformer_auto_wrap_policy
        else:
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        block = type(model.transformer.h[0])
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={block})
        return FSDP(model, auto_wrap_policy=policy)

    return wrap


def run(ranks: int, steps: int) -> dict:
    cmd = [os.path.join(ROOT, "tools", "kilnrun"), "--nproc-per-node", str(ranks), "--threads",
           "1", __file__, "--child", "--steps", str(steps)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    for line in proc.stdout.splitlines():
        if "RESULT " in line:
            # mpirun's output tags may follow the JSON on the same line
            return json.JSONDecoder().raw_decode(line.split("RESULT ", 1)[1])[0]
    raise SystemExit(f"bench/distributed.py: the {ranks}-rank job failed:\n{proc.stdout}\n"
                     f"{proc.stderr}")  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.steps)
        return 0
    sys.path.insert(0, HERE)
    from capture import cpu_name, write_atomic

    lines = [f"# Data-parallel training: kiln (MPI) vs torch (gloo) "
             f"({datetime.date.today().isoformat()})", "",
             f"{cpu_name()}; 1 thread per rank; nanoGPT-style model, 8 x 64 tokens per rank, "
             f"AdamW; medians of {args.steps} steps after 3 warm-up steps (which compile). "
             "DDP: kiln's and torch's DistributedDataParallel; FSDP: each block a unit (torch's "
             "needs an accelerator). Compiled: kiln.compile / torch.compile of the wrapped "
             "model. *Exposed comm*: the time kiln's backward waited for its all-reduces after "
             "its last gradient (the rest of the communication overlapped the backward); *alone*: "
             "one all-reduce of the whole gradient.", "",
             "| ranks | wrapper | kiln steps/s | torch steps/s | kiln / torch time | "
             "kiln samples/s | exposed comm, kiln (ms/step) | all-reduce alone, kiln / torch "
             "(ms) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for ranks in (1, 2):
        r = run(ranks, args.steps)
        for variant in ("ddp", "ddp compiled", "fsdp", "fsdp compiled"):
            k, t = r[f"kiln {variant}"], r.get(f"torch {variant}", {"error": "not run"})
            if "step" not in k:
                lines.append(f"| {ranks} | {variant} | n/a ({k['error']}) | | | | | |")
                continue
            rate = [f"{1 / v['step']:.2f}" if "step" in v else f"n/a ({v['error']})"
                    for v in (k, t)]  # fmt: skip
            ratio = f"{k['step'] / t['step']:.2f}" if "step" in k and "step" in t else "n/a"
            wait = f"{k['wait'] * 1e3:.2f}" if k.get("wait") is not None else "n/a"
            alone = (f"{k['allreduce'] * 1e3:.2f} / {t['allreduce'] * 1e3:.2f} ({k['mb']:.1f} MB)"
                     if "step" in t else f"{k['allreduce'] * 1e3:.2f}")  # fmt: skip
            label = variant.replace("ddp", "DDP").replace("fsdp", "FSDP").replace(" ", ", ")
            lines.append(f"| {ranks} | {label} | "
                         f"{rate[0]} | {rate[1]} | {ratio} | {8 * ranks / k['step']:.1f} | "
                         f"{wait} | {alone} |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    write_atomic(args.out, text)
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""kiln's built-in example: a GPT-style decoder written once for the torch API, run by kiln.

The model source below is ordinary PyTorch code, parameterized by the framework module, so the
same text runs under `torch` and under `kiln` (with only the imports changed). The demo loads
PyTorch's weights into kiln through state_dict, compiles the model with `kiln.compile`, checks
compiled against eager against PyTorch, prints the time per forward pass (medians of
interleaved runs) and the speedup, then shows the graph-break report of a small function with a
data-dependent branch.

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


def interleaved(fns: dict, rounds: int) -> dict:
    """Median seconds per call of each function, measured in interleaved rounds so all see the
    same machine load."""
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            samples[name].append(timed(fn, 1))
    return {name: statistics.median(v) for name, v in samples.items()}


def report_parts(code) -> str:
    """How kiln's CPU backend split the graph captured for `code`: compiled parts vs ops left
    on the eager kernels."""
    import kiln

    for _guards, entry in kiln._C._capture.entries(code):
        report = getattr(entry.__globals__.get("_graph"), "kiln_report", None)
        if report is not None:
            return (f"{report.compiled_nodes} ops in {len(report.parts)} compiled part(s), "
                    f"{report.eager_nodes} on eager kernels")
    return "n/a (the graph ran on the eager backend)"


def normalize(x):
    """The example with a data-dependent branch: Python `if` on a tensor value."""
    y = x - x.mean(dim=-1, keepdim=True)
    if y.abs().max() > 3.0:  # a graph break: the branch depends on tensor data
        y = y / y.abs().max()
    return y * 2.0


def training_report(torch, kiln, ref, models, t_idx, k_idx, steps=4) -> bool:
    """A few AdamW steps of the same model from the same weights in torch, kiln eager and kiln
    compiled (forward and backward compiled): the losses must agree; prints them and the step
    times (forward + backward + AdamW, the last steps' best)."""
    eager_model, compiled_model = models
    backend = kiln._capture.backend_compiled.CpuBackend()
    runs = {"torch": (torch, ref, ref), "kiln eager": (kiln, eager_model, eager_model),
            "kiln compiled": (kiln, compiled_model, kiln.compile(compiled_model,
                                                                 backend=backend))}
    targets = {"torch": t_idx.roll(-1, 1), "kiln": kiln.from_numpy(t_idx.roll(-1, 1).numpy())}
    losses = {k: [] for k in runs}
    step_ms = {k: [] for k in runs}
    for name, (m, net, run) in runs.items():
        net.train()
        opt = m.optim.AdamW(net.parameters(), lr=1e-3)
        idx, tgt = (t_idx, targets["torch"]) if m is torch else (k_idx, targets["kiln"])
        for _ in range(steps):
            t0 = time.perf_counter()
            logp = run(idx)
            loss = m.nn.functional.nll_loss(logp.flatten(0, 1), tgt.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            step_ms[name].append((time.perf_counter() - t0) * 1e3)
            losses[name].append(loss.item())
        net.eval()
    same = all(np.allclose(losses[k], losses["torch"], rtol=1e-4) for k in runs)
    trained = sum(r.backward_parts for r in backend.reports)
    fallbacks = sum(len(r.fallbacks) for r in backend.reports)
    print("  training (AdamW, next-token loss, same weights and data; a step = forward + backward"
          " + AdamW):")
    for name in runs:
        best = min(step_ms[name][1:])  # the first compiled step captures and compiles
        print(f"    {name:<16}: losses " + ", ".join(f"{v:.4f}" for v in losses[name])
              + f"; step {best:.2f} ms")
    print(f"    compiled training          : {trained} part(s) with a compiled backward, "
          f"{fallbacks} fallback(s); first step {step_ms['kiln compiled'][0]:.0f} ms (capture +"
          f" compile of forward and backward)  {'OK' if same and trained else 'MISMATCH'}")
    return same and trained > 0


def heat_2d(steps, A, B):
    """Plain NumPy (no kiln in it): a time-stepped 5-point stencil updating A and B in place."""
    for _ in range(steps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:] + A[2:, 1:-1] +
                               A[:-2, 1:-1])
        A[1:-1, 1:-1] = 0.2 * (B[1:-1, 1:-1] + B[1:-1, :-2] + B[1:-1, 2:] + B[2:, 1:-1] +
                               B[:-2, 1:-1])


def numpy_report(kiln) -> bool:
    """kiln.compile on the unmodified NumPy stencil: same arrays as NumPy, and the speedup."""
    rng = np.random.default_rng(0)
    A, B = rng.random((400, 400)), rng.random((400, 400))
    want = [A.copy(), B.copy()]
    heat_2d(10, *want)
    got = [A.copy(), B.copy()]
    compiled = kiln.compile(heat_2d)
    compiled(10, *got)
    same = all(np.allclose(g, w) for g, w in zip(got, want, strict=True))
    seconds = interleaved({"numpy": lambda: heat_2d(10, A, B),
                           "kiln": lambda: compiled(10, A, B)}, 7)
    ms = {name: s * 1e3 for name, s in seconds.items()}
    print()
    print("  NumPy program (10 steps of a 5-point stencil on 400x400 float64, unmodified code)")
    print(f"    arrays equal NumPy's         : {'yes' if same else 'NO'}")
    print(f"    NumPy                        : {ms['numpy']:8.2f} ms")
    print(f"    kiln.compile                 : {ms['kiln']:8.2f} ms  "
          f"({ms['numpy'] / ms['kiln']:.2f}x NumPy)")
    return same


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
    trainees = [build_gpt(kiln, knn, kF) for _ in range(2)]
    for t in trainees:
        t.load_state_dict(weights)
    idx = np.random.default_rng(0).integers(0, 512, size=(4, 64))
    t_idx, k_idx = torch.from_numpy(idx), kiln.from_numpy(idx)

    # Inference under no_grad (with grad mode on, the same model compiles its backward too).
    inference = kiln.no_grad()
    inference.__enter__()
    with torch.no_grad():
        want = ref(t_idx).numpy()
    eager_out = model(k_idx).numpy()
    compiled = kiln.compile(model)
    t0 = time.perf_counter()
    compiled_out = compiled(k_idx).numpy()
    first_call = time.perf_counter() - t0
    err_eager = float(np.abs(eager_out - want).max())
    err_compiled = float(np.abs(compiled_out - eager_out).max())
    params = sum(p.numel() for p in model.parameters())
    report = kiln.explain(model)(k_idx)

    rounds = 15
    # One thread each: torch's idle pool threads spin after each op and would slow whichever
    # kiln run comes next, which skews an interleaved comparison on a small machine.
    torch.set_num_threads(1)
    kiln.set_num_threads(1)

    def torch_eager():
        with torch.no_grad():
            ref(t_idx)

    ms = interleaved(
        {"compiled": lambda: compiled(k_idx), "eager": lambda: model(k_idx), "torch": torch_eager},
        rounds,
    )
    ms = {k: v * 1e3 for k, v in ms.items()}
    ok = err_eager < 1e-3 and err_compiled < 1e-5 and math.isfinite(err_eager)

    print("kiln demo: GPT-style decoder (2 blocks, d=128, 4 heads, vocab 512), 4 x 64 tokens")
    print(f"  parameters                     : {params:,}")
    print(f"  max |kiln eager - torch| (logp): {err_eager:.2e}")
    print(f"  max |compiled - eager|         : {err_compiled:.2e}  {'OK' if ok else 'MISMATCH'}")
    print(f"  kiln.compile: {report.graph_count} graph(s), {report.graph_break_count} graph "
          f"break(s), {sum(len(o) for o in report.ops_per_graph)} ops; first call "
          f"{first_call * 1e3:.1f} ms (capture + compile)")
    print(f"  kiln compiled forward          : {ms['compiled']:8.2f} ms  "
          f"(median of {rounds}, 1 thread)")
    print(f"  kiln eager forward             : {ms['eager']:8.2f} ms")
    print(f"  torch eager forward            : {ms['torch']:8.2f} ms")
    print(f"  speedup compiled vs kiln eager : {ms['eager'] / ms['compiled']:8.2f}x")
    print(f"  kiln CPU backend               : {report_parts(type(model).forward.__code__)}")

    inference.__exit__(None, None, None)
    ok = training_report(torch, kiln, ref, trainees, t_idx, k_idx) and ok
    ok = numpy_report(kiln) and ok

    x = kiln.randn(8, 16) * 4.0
    c_norm = kiln.compile(normalize)
    same = np.allclose(c_norm(x).numpy(), normalize(x).numpy())
    ok = ok and same
    print()
    print("Graph-break report for a function with a data-dependent branch "
          f"(results equal eager: {'yes' if same else 'NO'}):")
    print(kiln.explain(normalize)(x))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

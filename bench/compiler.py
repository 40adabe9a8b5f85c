"""kiln's optimizing CPU compiler beside kiln eager, torch eager and torch.compile, in one run.

For each workload of bench/compiler_workloads.py (6-op pointwise chain, softmax, layer_norm,
GELU-MLP, attention, GPT-2-small decoder block, conv-bn-relu, `x.sum(-1).mean()`, GPT-2's token +
position embedding and its cross-entropy loss) at sizes
labelled by working set (L2 / L3 / DRAM, from this machine's cache sizes): ms per call of kiln
eager, `kiln.compile` (default backend; `backend="eager"` stands in while
`kiln._capture.backend_compiled` is missing), torch eager and `torch.compile` (inductor), medians of
interleaved rounds, after checking every compiled result against eager; speedups; for the
memory-bound workloads GB/s (bytes read + written once) as a fraction of a STREAM triad measured
in the same run. Then: cold/warm compile time and peak RSS while compiling (subprocesses, fresh
cache folders), the per-call overhead of a tiny compiled function, and the peak memory of a
GPT-style model compiled vs eager (RSS high-water in subprocesses). The markdown table is printed
and written atomically to bench/results/compiler.md, the speedup chart to compiler.png.

    .venv/bin/python bench/compiler.py [--quick] [--threads N] [--out PATH] [--no-inductor]
                                       [--only SUBSTRING]

`--only conv` times just the workloads whose name contains the substring and skips the compile
time, overhead and memory sections (they belong to the full report); nothing is written unless
--out is given.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compiler_workloads as W  # noqa: E402

DEFAULT_OUT = os.path.join(ROOT, "bench", "results", "compiler.md")
VARIANTS = ("kiln eager", "kiln compiled", "torch eager", "torch.compile")


def describe_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:160]


def max_abs_diff(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| (NaN-aware, chunked so a DRAM-sized output needs no big temporaries);
    inf on a shape mismatch."""
    if got.shape != want.shape:
        return float("inf")
    g, w = got.reshape(-1), want.reshape(-1)
    worst, step = 0.0, 1 << 22
    for i in range(0, g.size, step):
        a, b = g[i:i + step].astype(np.float64), w[i:i + step].astype(np.float64)
        if (np.isnan(a) != np.isnan(b)).any():
            return float("inf")
        d = np.abs(a - b)
        worst = max(worst, float(np.nanmax(d)) if d.size else 0.0)
    return worst


def tolerance(want: np.ndarray) -> float:
    """Absolute tolerance of a compiled result: 2e-4 of the reference's largest magnitude (at
    least 2e-4): fused kernels reorder sums and use ~2-ulp polynomial exp/tanh/erf."""
    peak = float(np.nanmax(np.abs(want))) if want.size else 0.0
    return 2e-4 * max(1.0, peak)


def run_rounds(variants: dict, rounds: int, round_s: float) -> dict:
    """Median ms per call of each variant: calls per round calibrated from one timed call so a
    round takes about `round_s`, rounds interleaved so every variant sees the same load."""
    calls = {}
    for name, (fn, args) in variants.items():
        t0 = time.perf_counter()
        fn(*args)
        calls[name] = max(1, min(10000, int(round_s / max(time.perf_counter() - t0, 1e-7))))
    samples: dict = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (fn, args) in variants.items():
            t0 = time.perf_counter()
            for _ in range(calls[name]):
                fn(*args)
            samples[name].append((time.perf_counter() - t0) / calls[name] * 1e3)
    return {name: statistics.median(v) for name, v in samples.items()}


class GraphRecorder:
    """A kiln backend that keeps the captured graphs and, with the CPU compiler, the partition
    reports of `backend_compiled.compile_graph` (for the notes); else it runs graphs eagerly."""

    def __init__(self, compiled: bool) -> None:
        self.compiled = compiled
        self.graphs: list = []
        self.reports: list = []

    def __call__(self, graph, example_inputs):
        self.graphs.append(graph)
        if not self.compiled:
            return graph.compile_python()
        from kiln._capture import backend_compiled

        fn = backend_compiled.compile_graph(graph)
        self.reports.append(fn.kiln_report)
        return fn


def capture_info(fn, args, compiled: bool) -> GraphRecorder:
    """What kiln captures of `fn(*args)` and what the CPU backend makes of it (one capture,
    then a reset)."""
    import kiln

    kiln.compiler.reset()
    rec = GraphRecorder(compiled)
    target = fn if isinstance(fn, kiln.nn.Module) else W.fresh_copy(fn)
    kiln.compile(target, backend=rec, dynamic=False)(*args)
    kiln.compiler.reset()
    return rec


def bench_case(case, kfw, tfw, backend, inductor: str | None, rounds: int, round_s: float,
               capture: GraphRecorder | None) -> dict:
    """One case: build the four variants, check compiled against eager, time them."""
    import torch

    import kiln

    res: dict = {"errors": {}, "diff": {}, "capture": capture}
    kfn, kargs = case.build(kfw)
    tfn, targs = case.build(tfw)
    kiln.compiler.reset()
    torch._dynamo.reset()
    want_k = kfw.numpy(kfn(*kargs))
    want_t = tfw.numpy(tfn(*targs))
    res["diff"]["torch eager"] = max_abs_diff(want_t, want_k)
    res["torch_mismatch"] = not res["diff"]["torch eager"] <= tolerance(want_k)
    if capture is None:  # once per workload: the graph is the same at every size
        try:
            res["capture"] = capture_info(kfn, kargs, backend is None)
        except Exception as e:
            res["errors"]["capture"] = describe_error(e)
    variants = {"kiln eager": (kfn, kargs), "torch eager": (tfn, targs)}

    def add(name, make, args, fw, want):
        try:
            fn = make()
            got = fw.numpy(fn(*args))
            res["diff"][name] = diff = max_abs_diff(got, want)
            if not diff <= tolerance(want):
                res["errors"][name] = f"differs from eager by {diff:.2e}, not timed"
                return
            variants[name] = (fn, args)
        except Exception as e:  # reported in the table, not fatal
            res["errors"][name] = describe_error(e)

    def compile_kiln():
        return kiln.compile(kfn if isinstance(kfn, kiln.nn.Module) else W.fresh_copy(kfn),
                            backend=backend, dynamic=False)

    def compile_torch():
        return torch.compile(tfn if isinstance(tfn, torch.nn.Module) else W.fresh_copy(tfn),
                             dynamic=False)

    add("kiln compiled", compile_kiln, kargs, kfw, want_k)
    if inductor is None:
        add("torch.compile", compile_torch, targs, tfw, want_t)
    else:
        res["errors"]["torch.compile"] = inductor
    del want_k, want_t
    res["ms"] = run_rounds({n: variants[n] for n in VARIANTS if n in variants}, rounds, round_s)
    return res


def stream_triad(n: int, rounds: int) -> float:
    """GB/s of a = b + s*c (torch.add(b, c, alpha=s, out=a), float32, the run's threads),
    counting 3 x n x 4 bytes, median of `rounds` after a warm-up."""
    import torch

    b, c = torch.rand(n), torch.rand(n)
    a = torch.empty(n)
    times = []
    for i in range(rounds + 1):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        if i:
            times.append(time.perf_counter() - t0)
    return 3 * n * W.F32 / statistics.median(times) / 1e9


# -- subprocess measurements ---------------------------------------------------------------------
def run_child(kind: str, fw: str, args, env: dict | None = None, **extra) -> dict:
    """Runs this script as `--child kind` in a subprocess; its JSON, or {"error": ...}."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, "--fw", fw,
           "--threads", str(args.threads), "--kiln-backend", args.kiln_backend]
    if args.quick:
        cmd.append("--quick")
    for k, v in extra.items():
        cmd += [f"--{k}", str(v)]
    full_env = dict(os.environ, **(env or {}))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=900,
                              cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 900 s"}
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        return {"error": (lines[-1] if lines else f"exit {proc.returncode}")[:160]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench_compile_time(args, case_index: int, skip: str | None) -> dict:
    """kiln and torch.compile: cold (fresh cache folder), warm in the same process after a
    reset, warm in a new process on the same folder; peak RSS growth of the cold compile."""
    out: dict = {}
    for fw in ("kiln", "torch"):
        if fw == "torch" and skip is not None:
            out[fw] = {"error": skip}
            continue
        folder = tempfile.mkdtemp(prefix=f"kiln-bench-{fw}-cache-")
        env = ({"KILN_CACHE_DIR": folder} if fw == "kiln" else
               {"TORCHINDUCTOR_CACHE_DIR": folder, "TORCHINDUCTOR_COMPILE_THREADS": "1"})
        try:
            first = run_child("compile", fw, args, env, case=case_index)
            second = run_child("compile", fw, args, env, case=case_index)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if "error" in first or "error" in second:
            out[fw] = {"error": first.get("error") or second.get("error")}
        else:
            out[fw] = {"cold": first["first_s"], "warm": first["again_s"],
                       "warm_process": second["first_s"], "rss_mb": first["rss_mb"]}
    return out


def bench_overhead(args, backend, inductor: str | None) -> dict:
    """µs per call of `tiny(x)` (x + 1 on 4 floats) in each variant, interleaved rounds."""
    import torch

    import kiln

    res: dict = {"errors": {}}
    kx, tx = kiln.from_numpy(np.ones(4, np.float32)), torch.from_numpy(np.ones(4, np.float32))
    variants = {"kiln eager": (W.tiny, (kx,)), "torch eager": (W.tiny, (tx,))}
    kiln.compiler.reset()
    torch._dynamo.reset()
    makers = {"kiln compiled": (lambda: kiln.compile(W.fresh_copy(W.tiny), backend=backend),
                                (kx,))}
    if inductor is None:
        makers["torch.compile"] = (lambda: torch.compile(W.fresh_copy(W.tiny)), (tx,))
    else:
        res["errors"]["torch.compile"] = inductor
    for name, (make, fargs) in makers.items():
        try:
            fn = make()
            got = np.asarray(fn(*fargs).numpy())
            if not np.array_equal(got, np.full(4, 2.0, np.float32)):
                raise AssertionError(f"wrong result {got}")
            fn(*fargs)
            variants[name] = (fn, fargs)
        except Exception as e:
            res["errors"][name] = describe_error(e)
    ms = run_rounds({n: variants[n] for n in VARIANTS if n in variants}, args.rounds,
                    args.round_s)
    res["us"] = {n: v * 1e3 for n, v in ms.items()}
    return res


def bench_memory(args, skip: str | None) -> dict:
    """{(framework, "eager" | "compiled"): peak MB of the GPT-style model}, a subprocess each."""
    out = {}
    for fw, mode in (("kiln", "eager"), ("kiln", "compiled"), ("torch", "eager"),
                     ("torch", "compiled")):
        if fw == "torch" and mode == "compiled" and skip is not None:
            out[(fw, mode)] = {"error": skip}
            continue
        # Tensor memory: kiln's host block cache (freed blocks kept for reuse, at most
        # KILN_HOST_CACHE_MB) is off here so that RSS follows live tensors, as torch's does.
        env = {"MALLOC_MMAP_THRESHOLD_": "65536", "TORCHINDUCTOR_COMPILE_THREADS": "1",
               "KILN_HOST_CACHE_MB": "0"}
        out[(fw, mode)] = run_child("memory", fw, args, env, mode=mode)
    return out


# -- the report ----------------------------------------------------------------------------------
NA = "n/a"
EXTERNS = {"linear": "GEMM", "matmul": "GEMM", "conv2d": "conv",
           "scaled_dot_product_attention": "sdpa"}
KIR_OP = re.compile(r"^\s*%\S+ = (\w+)\(")
KIR_TARGET = re.compile(r'target = "([^"]+)"')


def graph_ops(capture) -> tuple:
    """(externs, fallbacks) of a capture: the extern kir ops of its graphs (library calls in
    compiled code) and what runs on eager kernels (the backend's fallbacks by target name; with
    the eager stand-in, the calls that have no kir op)."""
    externs, fallbacks = set(), set()
    for graph in capture.graphs if capture else ():
        for line in graph.to_kir().splitlines():
            m = KIR_OP.match(line)
            if m and m.group(1) in EXTERNS:
                externs.add(m.group(1))
            elif m and m.group(1) == "call" and not capture.compiled:
                t = KIR_TARGET.search(line)
                fallbacks.add(t.group(1).rsplit(".", 1)[-1] if t else "call")
    for report in capture.reports if capture else ():
        for _, target, _ in report.fallbacks:
            fallbacks.add(target.rsplit(".", 1)[-1])
    return sorted(externs), sorted(fallbacks)


def compiled_summary(capture) -> str:
    """"K kernels (E library calls), N eager nodes" over the backend's reports, or ""."""
    if not capture or not capture.reports:
        return ""
    kernels = sum(i.get("kernels", 0) for r in capture.reports for i in r.infos)
    externs = sum(i.get("extern_kernels", 0) for r in capture.reports for i in r.infos)
    eager = sum(r.eager_nodes for r in capture.reports)
    return (f"{plural(kernels, 'kernel')} ({plural(externs, 'library call')})"
            + (f", {plural(eager, 'eager node')}" if eager else ""))


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def fmt(value) -> str:
    """A time with 3 significant digits (whole numbers from 100 on)."""
    if value is None:
        return NA
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def ratio(a, b) -> str:
    return NA if a is None or b is None or a == 0 else f"{b / a:.2f}"


def slower_reasons(res, info) -> list:
    """Why kiln compiled may trail torch.compile on this case, from what the graph holds."""
    reasons = []
    externs, fallbacks = graph_ops(res.get("capture"))
    if info["stand_in"]:
        reasons.append("no kernels compiled (eager stand-in backend)")
    if fallbacks:
        reasons.append("falls back: " + ", ".join(fallbacks) + " run eagerly")
    kinds = {EXTERNS[e] for e in externs}
    if "GEMM" in kinds:
        reasons.append(f"GEMM: OpenBLAS vs {info['torch_blas']}")
    if "conv" in kinds:
        reasons.append("conv: kiln's direct AVX-512 kernel (im2col + OpenBLAS for 1x1/strided) vs "
                       "oneDNN")
    if "sdpa" in kinds:
        reasons.append("attention is an extern (eager kernel)")
    if not reasons:
        reasons.append("no fallback or extern: kiln's generated kernel is the slower code")
    return reasons


def case_row(case, res, info, global_skip) -> tuple:
    """(markdown row, notes) of one case."""
    ms, errs, notes = res["ms"], res["errors"], []
    for name, err in errs.items():
        if err != global_skip:
            notes.append(f"{name} n/a: {err}")
    if res["torch_mismatch"]:
        notes.append(f"torch eager differs from kiln eager by {res['diff']['torch eager']:.1e}")
    kc, tc = ms.get("kiln compiled"), ms.get("torch.compile")
    summary = compiled_summary(res.get("capture"))
    if summary:
        notes.append(summary)
    if kc is not None and tc is not None and kc > tc:
        notes += slower_reasons(res, info)
    cells = [case.workload, case.size, f"{case.level} ({W.human_bytes(case.ws_bytes)})"]
    cells += [fmt(ms.get(v)) for v in VARIANTS]
    cells += [ratio(kc, ms.get("kiln eager")), ratio(kc, tc)]
    for name in ("kiln compiled", "torch.compile"):
        t = ms.get(name)
        if not case.memory_bound or t is None:
            cells.append("—" if not case.memory_bound else NA)
        else:
            gbs = case.ws_bytes / (t * 1e-3) / 1e9
            cells.append(f"{gbs:.1f} ({gbs / info['triad_gbs']:.0%})")
    cells.append("; ".join(notes))
    return "| " + " | ".join(cells) + " |"


def render(info, cases, results, compile_times, overhead, memory) -> str:
    """The markdown report: steady state per case, compile time, overhead, model memory."""
    caches, skip = info["caches"], info["inductor_skip"]
    threads = f"{info['threads']} thread{'s' if info['threads'] > 1 else ''}"
    lines = [
        "# kiln's CPU compiler vs kiln eager, torch eager and torch.compile", "",
        f"`.venv/bin/python bench/compiler.py{info['flags']}`, "
        f"{info['date']}, {info['cpu']} (L2 {W.human_bytes(caches['L2'])}, L3 "
        f"{W.human_bytes(caches['L3'])}), {threads}, under no_grad; Python {info['python']}, "
        f"torch {info['torch']}; {info['minutes']:.1f} min. kiln compiled = `kiln.compile` with "
        f"{info['backend']}.", "",
        "## 1. Steady state", "",
        f"ms per call, median of {info['rounds']} interleaved rounds; every compiled result was "
        "checked against eager first (max abs difference within 2e-4 of the output's scale). "
        "Working set: bytes read + written once (inputs, weights, outputs), labelled by the "
        "smallest cache that holds it. *Speedup* = time of the other / time of kiln compiled "
        "(> 1: kiln compiled is faster). GB/s for the memory-bound workloads, in parentheses "
        f"the fraction of a STREAM triad (a = b + s*c, float32, {threads}, "
        f"{W.human_bytes(info['triad_bytes'])}) measured in this run: "
        f"**{info['triad_gbs']:.1f} GB/s**.", "",
        "| workload | size | working set | kiln eager | kiln compiled | torch eager | "
        "torch.compile | speedup vs kiln eager | speedup vs torch.compile | kiln compiled GB/s "
        "| torch.compile GB/s | notes |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for case, res in zip(cases, results, strict=True):
        lines.append(case_row(case, res, info, skip))
    if skip:
        lines += ["", f"torch.compile n/a: {skip}."]
    if overhead is None:  # --only: the steady-state table alone
        return "\n".join(lines) + "\n"
    lines += ["", "## 2. Compile time", "",
              "Seconds of the first compiled call minus one eager call, each framework in fresh "
              "subprocesses: *cold* with an empty cache folder (`KILN_CACHE_DIR`, "
              "`TORCHINDUCTOR_CACHE_DIR`), *warm* in the same process after "
              "`kiln.compiler.reset()` / `torch._dynamo.reset()` (in-memory caches kept: "
              "inductor's are its own), *warm, new process* on the cold run's folder. Peak RSS: "
              "growth of the RSS high-water over the cold first call (VmHWM, restarted through "
              "/proc/self/clear_refs just before it; ru_maxrss would start at the parent's "
              "high-water, which Linux carries across exec); inductor compiles in process (1 "
              "compile thread) so its memory is counted.",
              "", "| graph | framework | cold s | warm s | warm, new process s | "
              "peak RSS while compiling MB |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for (workload, size), by_fw in compile_times.items():
        for fw, r in by_fw.items():
            name = "kiln" if fw == "kiln" else "torch.compile"
            if "error" in r:
                lines.append(f"| {workload}, {size} | {name} | {NA} | {NA} | {NA} | {NA}: "
                             f"{r['error']} |")
                continue
            lines.append(f"| {workload}, {size} | {name} | {r['cold']:.3f} | {r['warm']:.3f} | "
                         f"{r['warm_process']:.3f} | {r['rss_mb']:.1f} |")
    us, errs = overhead["us"], overhead["errors"]
    lines += ["", "## 3. Per-call overhead", "",
              "`tiny(x) = x + 1.0` on 4 float32 elements: µs per call, median of interleaved "
              "rounds (compiled: guards + entry + the compiled graph).", "",
              "| µs per call | kiln eager | kiln compiled | torch eager | torch.compile |",
              "| --- | ---: | ---: | ---: | ---: |",
              "| tiny(x) | " + " | ".join(fmt(us.get(v)) for v in VARIANTS) + " |"]
    lines += [f"- {n} n/a: {e}" for n, e in errs.items() if e != skip]
    d, heads, layers, batch, tokens = info["gpt"]
    lines += ["", "## 4. Memory while running a GPT-style model", "",
              f"tools/demo.py's GPT ({layers} layers, d={d}, {heads} heads, vocab 512) on "
              f"{batch} x {tokens} tokens, one subprocess per variant. kiln exposes no allocator "
              "statistics, so this is the RSS high-water (VmHWM, restarted through "
              "/proc/self/clear_refs after two warm-up calls, compile included) during 3 "
              "forwards, above the resident size before them (weights, code, caches), for every "
              "variant alike. `MALLOC_MMAP_THRESHOLD_=65536` makes glibc map every buffer of "
              "64 KB or more and unmap it when freed (as both frameworks' allocators use "
              "malloc), so the high-water follows the live tensors rather than heap that "
              "malloc kept from earlier calls.", "",
              "| variant | peak above resident MB | resident before MB |",
              "| --- | ---: | ---: |"]
    for (fw, mode), r in memory.items():
        name = {"eager": f"{fw} eager", "compiled": "kiln compiled" if fw == "kiln"
                else "torch.compile"}[mode]
        if "error" in r:
            lines.append(f"| {name} | {NA}: {r['error']} | {NA} |")
        else:
            lines.append(f"| {name} | {r['peak_mb']:.1f} | {r['base_mb']:.0f} |")
    return "\n".join(lines) + "\n"


def plot_speedups(path: str, cases, results) -> str:
    """Bar chart of kiln compiled's speedups per case, written atomically; what was done."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return "plot skipped: matplotlib is not installed (requirements-dev.txt)"
    labels = [f"{c.workload}\n{c.size} ({c.level})" for c in cases]
    series = {}
    for other in ("kiln eager", "torch.compile"):
        series[other] = [r["ms"][other] / r["ms"]["kiln compiled"]
                         if other in r["ms"] and "kiln compiled" in r["ms"] else np.nan
                         for r in results]
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(cases)), 6))
    x = np.arange(len(cases))
    for i, (other, vals) in enumerate(series.items()):
        bars = ax.bar(x + (i - 0.5) * 0.4, vals, 0.4, label=f"kiln compiled vs {other}")
        ax.bar_label(bars, labels=[f"{v:.2g}" if v == v else "" for v in vals], fontsize=6,
                     rotation=90, padding=2)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("speedup: time of the other / time of kiln compiled (log scale)")
    ax.set_title("kiln.compile (CPU compiler) speedups; a missing bar was not measured")
    ax.legend()
    fig.tight_layout()
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".compiler-", suffix=".png", dir=folder)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        _publish(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
    return f"plot written to {path}"


def _publish(tmp: str, path: str) -> None:
    """Gives a temp file the mode of an ordinary new file (mkstemp makes 0600), renames it."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)
    os.replace(tmp, path)


def write_atomic(path: str, text: str) -> None:
    """Temp file in the same folder + rename: a reader never sees half a table."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".compiler-", suffix=".md", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        _publish(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


# -- driver --------------------------------------------------------------------------------------
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: one small size per workload, few rounds, no inductor, "
                         "no file unless --out")
    ap.add_argument("--threads", type=int, default=1, help="threads of kiln and torch (1)")
    ap.add_argument("--out", default=None, help=f"markdown output (default {DEFAULT_OUT})")
    ap.add_argument("--plot", default=None, help="speedup chart (default: --out with .png)")
    ap.add_argument("--no-inductor", action="store_true", help="skip torch.compile")
    ap.add_argument("--kiln-backend", choices=("auto", "default", "eager"), default="auto",
                    help="auto: the default backend when backend_compiled exists, else eager")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--only", default=None, metavar="SUBSTRING",
                    help="time only workloads whose name contains SUBSTRING (e.g. conv); skips "
                         "compile time, overhead and memory; no file unless --out")
    ap.add_argument("--child", choices=("compile", "memory"), help=argparse.SUPPRESS)
    ap.add_argument("--fw", choices=("kiln", "torch"), help=argparse.SUPPRESS)
    ap.add_argument("--case", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=("eager", "compiled"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.rounds = args.rounds or (2 if args.quick else 7)
    args.round_s = 0.01 if args.quick else 0.1
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        fn = W.child_compile if args.child == "compile" else W.child_memory
        print(json.dumps(fn(args)))
        return 0
    import warnings

    import torch

    import kiln

    warnings.filterwarnings("ignore", module="torch")
    W.set_threads(args.threads)
    backend, backend_desc = W.kiln_backend(args.kiln_backend)
    inductor = ("skipped (--quick)" if args.quick else
                "skipped (--no-inductor)" if args.no_inductor else None)
    caches = W.cache_sizes()
    cases = W.all_cases(args.quick, caches)
    if args.only:
        cases = [c for c in cases if args.only in c.workload]
        if not cases:
            print(f"no workload matches --only {args.only!r}", file=sys.stderr)
            return 2
    kfw, tfw = W.framework("kiln"), W.framework("torch")
    t_start = time.perf_counter()
    results, captures = [], {}
    triad_n = (1 << 20) if args.quick else W.targets(caches)["DRAM"] // (3 * W.F32)
    triad = []
    with torch.no_grad(), kiln.no_grad():
        for case in cases:
            print(f"[compiler bench] {case.workload}, {case.size} ({case.level})",
                  file=sys.stderr, flush=True)
            res = bench_case(case, kfw, tfw, backend, inductor, args.rounds, args.round_s,
                             captures.get(case.workload))
            captures.setdefault(case.workload, res["capture"])
            results.append(res)
            if case.level == "DRAM" or not triad:  # triad beside the big cases, same load
                triad.append(stream_triad(triad_n, args.rounds))
        overhead = None if args.only else bench_overhead(args, backend, inductor)
    compile_times, memory = {}, None
    if not args.only:
        compile_cases = {}  # the smallest case of a small and a large graph
        for i, c in enumerate(cases):
            if c.workload.startswith(("pointwise", "decoder")):
                compile_cases.setdefault(c.workload, i)
        print("[compiler bench] compile times, memory (subprocesses)", file=sys.stderr,
              flush=True)
        compile_times = {(cases[i].workload, cases[i].size):
                         bench_compile_time(args, i, inductor) for i in compile_cases.values()}
        memory = bench_memory(args, inductor)
    flags = ((" --quick" if args.quick else "") + (" --no-inductor" if args.no_inductor else "")
             + (f" --threads {args.threads}" if args.threads != 1 else "")
             + (f" --kiln-backend {args.kiln_backend}" if args.kiln_backend != "auto" else "")
             + (f" --only {args.only}" if args.only else ""))
    info = {"flags": flags, "backend": backend_desc, "stand_in": backend == "eager",
            "inductor_skip": inductor, "caches": caches, "threads": args.threads,
            "quick": args.quick, "triad_gbs": statistics.median(triad),
            "triad_bytes": 3 * triad_n * W.F32, "cpu": cpu_name(),
            "date": datetime.date.today().isoformat(), "python": platform.python_version(),
            "torch": torch.__version__, "rounds": args.rounds,
            "minutes": (time.perf_counter() - t_start) / 60, "gpt": W.gpt_shape(args.quick),
            "torch_blas": "MKL" if torch.backends.mkl.is_available() else "its BLAS"}
    text = render(info, cases, results, compile_times, overhead, memory)
    print(text, end="")
    out = args.out if args.out is not None else (None if args.quick or args.only else DEFAULT_OUT)
    if out:
        write_atomic(out, text)
        plot = args.plot or os.path.splitext(out)[0] + ".png"
        try:
            done = plot_speedups(plot, cases, results)
        except Exception as e:  # the table is written; a chart failure is reported, not fatal
            done = f"plot failed: {describe_error(e)}"
        print(f"\nwritten to {out}; {done}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

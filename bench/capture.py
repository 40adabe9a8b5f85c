"""Capture frontend benchmarks: kiln.compile beside torch.compile, in one run, on one thread.

1. Cache-hit overhead: per-call time of a compiled function of 10 small tensors minus the time
   of its captured graph called directly (the graph callable is obtained through a recording
   backend), i.e. what the frame hook, the guards and the entry cost per call; for kiln with
   `backend="eager"` and for Dynamo with `backend="eager"` (graph: the FX `GraphModule.forward`
   a recording backend returns). Also each framework's default compiled call (torch: inductor).
2. Capture time: first call of a compiled 12-layer GPT-style model (tools/demo.py) minus one
   eager call, after a reset, median of 3 fresh captures; graphs, graph breaks, ops captured.
3. Steady state: time per forward of that model, eager and compiled, both frameworks.

Rounds are interleaved (kiln, torch, kiln, ...) and medians are reported. Everything runs under
no_grad (inference). The markdown table is printed and written atomically to
bench/results/capture.md (`--quick`: a small model and few rounds, a smoke test; it writes
only where `--out` says).

    .venv/bin/python bench/capture.py [--quick] [--out PATH] [--no-inductor]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
import types
import warnings

import numpy as np
import torch
import torch.nn as tnn
import torch.nn.functional as tF

import kiln
import kiln.nn as knn
import kiln.nn.functional as kF

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from demo import build_gpt  # noqa: E402

DEFAULT_OUT = os.path.join(ROOT, "bench", "results", "capture.md")
NA = "n/a"


# -- the function of section 1 ---------------------------------------------------------------
def ten_inputs(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9):
    """Nine cheap elementwise ops over ten tensors: almost all of a call is overhead."""
    s = (a0 + a1) * a2 - a3
    s = s + a4 * a5
    return s + a6 + a7 + a8 + a9


def fresh_copy(fn):
    """`fn` with its own code object: both frame hooks cache per code object, so each compiled
    variant of section 1 gets a copy and never hits another variant's cache entry."""
    return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                              fn.__defaults__, fn.__closure__)


class Recorder:
    """A backend for either framework that records what it is given and returns the graph's
    own callable unchanged (what the "eager" backends run), so it can be timed alone."""

    def __init__(self, framework: str) -> None:
        self.framework = framework
        self.graphs: list = []  # (graph, callable, example inputs)

    def __call__(self, graph, example_inputs):
        fn = graph.compile_python() if self.framework == "kiln" else graph.forward
        self.graphs.append((graph, fn, list(example_inputs)))
        return fn

    def op_count(self) -> int:
        if self.framework == "kiln":
            return sum(g.op_count() for g, _, _ in self.graphs)
        return sum(1 for g, _, _ in self.graphs for n in g.graph.nodes
                   if n.op in ("call_function", "call_method", "call_module"))


def per_call_us(fn, args, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - t0) / calls * 1e6


def describe_error(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:160]


def _tensor_args(example_inputs, fallback):
    """Dynamo hands a backend real tensors; should a version hand fakes, use the call's."""
    if any(type(x).__name__ == "FakeTensor" for x in example_inputs):
        return fallback
    return example_inputs


def bench_cache_hit(rounds: int, calls: int, inductor: bool) -> dict:
    """Section 1: per-call µs of eager, compiled (eager backend), graph alone, default backend."""
    res: dict = {"errors": {}}
    kx = [kiln.from_numpy(np.full(4, float(i + 1), np.float32)) for i in range(10)]
    tx = [torch.from_numpy(np.full(4, float(i + 1), np.float32)) for i in range(10)]
    cases: dict = {"kiln eager": (ten_inputs, kx), "torch eager": (ten_inputs, tx)}

    def add(name, make, args, check):
        try:
            fn = make()
            got = fn(*args)
            fn(*args)  # a second call is a cache hit (no recompile expected)
            np.testing.assert_allclose(np.asarray(got.numpy()), check, rtol=1e-6)
            cases[name] = (fn, args)
        except Exception as e:  # reported in the table, not fatal
            res["errors"][name] = describe_error(e)

    want = ten_inputs(*kx).numpy()
    rec_k, rec_t = Recorder("kiln"), Recorder("torch")
    add("kiln compiled", lambda: kiln.compile(fresh_copy(ten_inputs), backend="eager"), kx, want)
    add("kiln recorded", lambda: kiln.compile(fresh_copy(ten_inputs), backend=rec_k), kx, want)
    add("kiln default", lambda: kiln.compile(fresh_copy(ten_inputs)), kx, want)
    add("torch compiled", lambda: torch.compile(fresh_copy(ten_inputs), backend="eager"), tx,
        want)
    add("torch recorded", lambda: torch.compile(fresh_copy(ten_inputs), backend=rec_t), tx, want)
    if inductor:
        add("torch default", lambda: torch.compile(fresh_copy(ten_inputs)), tx, want)
    else:
        res["errors"]["torch default"] = "skipped (--quick or --no-inductor)"
    for rec, name in ((rec_k, "kiln graph"), (rec_t, "torch graph")):
        if len(rec.graphs) == 1:
            _, fn, ex = rec.graphs[0]
            cases[name] = (fn, _tensor_args(ex, kx if rec is rec_k else tx))
        elif name.split()[0] + " recorded" in cases:
            res["errors"][name] = f"{len(rec.graphs)} graphs captured, expected 1"
    res["ops"] = {"kiln": rec_k.op_count(), "torch": rec_t.op_count()}

    times: dict = {name: [] for name in cases}
    overhead: dict = {"kiln": [], "torch": []}
    for _ in range(rounds):
        for name, (fn, args) in cases.items():
            times[name].append(per_call_us(fn, args, calls))
        for fw in overhead:  # per-round differences: the same machine state on both sides
            if f"{fw} compiled" in cases and f"{fw} graph" in cases:
                overhead[fw].append(times[f"{fw} compiled"][-1] - times[f"{fw} graph"][-1])
    res["us"] = {name: statistics.median(t) for name, t in times.items()}
    res["overhead"] = {fw: statistics.median(v) for fw, v in overhead.items() if v}
    return res


# -- sections 2 and 3: the GPT-style model ------------------------------------------------------
def make_models(layers: int, d: int):
    """The same architecture and weights in both frameworks, and 4 x 64 token ids."""
    torch.manual_seed(0)
    ref = build_gpt(torch, tnn, tF, d=d, layers=layers).eval()
    model = build_gpt(kiln, knn, kF, d=d, layers=layers).eval()
    model.load_state_dict({k: kiln.from_numpy(v.numpy().copy())
                           for k, v in ref.state_dict().items()})
    idx = np.random.default_rng(0).integers(0, 512, size=(4, 64))
    return model, ref, kiln.from_numpy(idx), torch.from_numpy(idx)


def _timed(fn, *args) -> tuple:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def _kiln_compiler(compiled):
    """The Compiler behind a kiln.compile result (for its capture records), or None."""
    inner = getattr(compiled, "_compiled_call", compiled)
    return getattr(inner, "_kiln_compiler", None)


def capture_kiln(model, idx) -> dict:
    """One fresh kiln capture: seconds of the first compiled call minus an eager call; graphs,
    breaks and ops from the compiler's capture records."""
    kiln.compiler.reset()
    t_eager, want = _timed(model, idx)
    compiled = kiln.compile(model, backend="eager")
    compiler = _kiln_compiler(compiled)
    if compiler is not None:
        compiler.recorder = []
    t_first, got = _timed(compiled, idx)
    out = {"s": t_first - t_eager, "err": float(np.abs(got.numpy() - want.numpy()).max())}
    if compiler is not None:
        records = compiler.recorder
        out.update(graphs=len(records), ops=sum(r.graph.op_count() for r in records),
                   breaks=sum(r.break_record is not None for r in records),
                   reasons=[r.break_record.reason for r in records if r.break_record])
    return out


def capture_torch(ref, idx) -> dict:
    """One fresh Dynamo capture (eager backend): first compiled call minus an eager call."""
    torch._dynamo.reset()
    t_eager, want = _timed(ref, idx)
    compiled = torch.compile(ref, backend="eager")
    t_first, got = _timed(compiled, idx)
    return {"s": t_first - t_eager, "err": float((got - want).abs().max())}


def explain_counts(fw: str, model, idx) -> dict:
    """graphs / breaks / ops from kiln.explain or torch._dynamo.explain; {} when unavailable,
    {"error": ...} when explain fails."""
    try:
        if fw == "kiln":
            if not hasattr(kiln, "explain"):
                return {}
            out = kiln.explain(model)(idx)
            return {"graphs": out.graph_count, "breaks": out.graph_break_count}
        torch._dynamo.reset()
        out = torch._dynamo.explain(model)(idx)
        return {"graphs": out.graph_count, "breaks": out.graph_break_count, "ops": out.op_count}
    except Exception as e:
        return {"error": describe_error(e)}


def bench_capture(model, ref, kidx, tidx, trials: int) -> dict:
    """Section 2: medians of `trials` fresh captures per framework, interleaved."""
    res: dict = {"errors": {}, "kiln": [], "torch": []}
    for _ in range(trials):
        for fw, run in (("kiln", lambda: capture_kiln(model, kidx)),
                        ("torch", lambda: capture_torch(ref, tidx))):
            if fw in res["errors"]:
                continue
            try:
                res[fw].append(run())
            except Exception as e:
                res["errors"][fw] = describe_error(e)
    res["explain"] = {"kiln": explain_counts("kiln", model, kidx),
                      "torch": explain_counts("torch", ref, tidx)}
    return res


def bench_steady(model, ref, kidx, tidx, rounds: int, inductor: bool) -> dict:
    """Section 3: ms per forward of every variant that works, interleaved rounds."""
    res: dict = {"errors": {}}
    kiln.compiler.reset()
    torch._dynamo.reset()
    want = model(kidx).numpy()
    variants = {"kiln eager": (model, (kidx,)), "torch eager": (ref, (tidx,))}

    def add(name, make, args):
        try:
            fn = make()
            t0 = time.perf_counter()
            out = fn(*args)
            res.setdefault("first_s", {})[name] = time.perf_counter() - t0
            got = out.numpy()
            res.setdefault("err", {})[name] = float(np.abs(got - want).max())
            variants[name] = (fn, args)
        except Exception as e:
            res["errors"][name] = describe_error(e)

    add("kiln compiled", lambda: kiln.compile(model, backend="eager"), (kidx,))
    add("torch compiled", lambda: torch.compile(ref, backend="eager"), (tidx,))
    if inductor:
        add("torch inductor", lambda: torch.compile(ref), (tidx,))
    else:
        res["errors"]["torch inductor"] = "skipped (--quick or --no-inductor)"
    times: dict = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (fn, args) in variants.items():
            t0 = time.perf_counter()
            fn(*args)
            times[name].append((time.perf_counter() - t0) * 1e3)
    res["ms"] = {name: statistics.median(t) for name, t in times.items()}
    return res


# -- the report ----------------------------------------------------------------------------------
def fmt(value, digits: int = 2) -> str:
    if value is None:
        return NA
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def ratio(a, b) -> str:
    return NA if a is None or b is None or b == 0 else f"{a / b:.2f}"


def render(args, hit: dict, cap: dict, steady: dict, model_desc: str) -> str:
    """The markdown report: three tables, then the reasons of every n/a."""
    notes: list = []
    lines = [
        "# kiln.compile vs torch.compile: capture benchmarks",
        "",
        f"`.venv/bin/python bench/capture.py{' --quick' if args.quick else ''}`, "
        f"{datetime.date.today().isoformat()}, {cpu_name()}, 1 thread, under no_grad; "
        f"Python {platform.python_version()}, torch {torch.__version__}. "
        "Medians of interleaved rounds.",
        "",
        "## 1. Cache-hit overhead",
        "",
        f"`f(a0, ..., a9)`: 10 float32 tensors of 4 elements, 9 elementwise ops; median of "
        f"{args.hit_rounds} rounds x {args.calls} calls; µs per call. *Guard + entry overhead* is "
        "the compiled call minus the captured graph called directly (kiln: the graph callable "
        "a recording backend received; torch: the FX `GraphModule.forward`), per round.",
        "",
        "| µs per call | kiln | torch | kiln/torch |",
        "| --- | ---: | ---: | ---: |",
    ]
    us, errs = hit["us"], hit["errors"]

    def cell(table, errors, name):
        if name in table:
            return table[name]
        if name in errors:
            notes.append(f"{name}: {errors[name]}")
        return None

    rows = (("eager call", "kiln eager", "torch eager"),
            ('compile(backend="eager") call', "kiln compiled", "torch compiled"),
            ("captured graph alone", "kiln graph", "torch graph"))
    for label, kn, tn in rows:
        k, t = cell(us, errs, kn), cell(us, errs, tn)
        lines.append(f"| {label} | {fmt(k)} | {fmt(t)} | {ratio(k, t)} |")
    k, t = hit["overhead"].get("kiln"), hit["overhead"].get("torch")
    lines.append(f"| **guard + entry overhead** | **{fmt(k)}** | **{fmt(t)}** | "
                 f"**{ratio(k, t)}** |")
    k, t = cell(us, errs, "kiln default"), cell(us, errs, "torch default")
    lines.append(f"| default backend call (kiln default / torch inductor) | {fmt(k)} | {fmt(t)} "
                 f"| {ratio(k, t)} |")
    lines.append(f"| ops in the captured graph | {hit['ops']['kiln']} | {hit['ops']['torch']} "
                 "|  |")

    lines += ["", "## 2. Capture time", "",
              f"{model_desc}; first compiled call minus one eager call, each after a reset "
              f"(`kiln.compiler.reset()`, `torch._dynamo.reset()`), median of {args.trials} "
              f"fresh capture{'s' if args.trials > 1 else ''}, both with `backend=\"eager\"`.", "",
              "| capture | kiln | torch (Dynamo) | kiln/torch |", "| --- | ---: | ---: | ---: |"]
    med = {}
    for fw in ("kiln", "torch"):
        runs = cap[fw]
        if fw in cap["errors"]:
            notes.append(f"{fw} capture: {cap['errors'][fw]}")
        med[fw] = statistics.median(r["s"] for r in runs) if runs else None
    lines.append(f"| capture time (s) | {fmt(med['kiln'], 3)} | {fmt(med['torch'], 3)} | "
                 f"{ratio(med['kiln'], med['torch'])} |")
    kinfo = dict(cap["kiln"][-1]) if cap["kiln"] else {}
    kinfo.update({k: v for k, v in cap["explain"]["kiln"].items() if k != "error"})
    tinfo = cap["explain"]["torch"]
    for fw, info in (("kiln", cap["explain"]["kiln"]), ("torch", tinfo)):
        if "error" in info:
            notes.append(f"{fw} explain: {info['error']}")
    for key, label in (("graphs", "graphs"), ("breaks", "graph breaks"), ("ops", "ops captured")):
        lines.append(f"| {label} | {fmt(kinfo.get(key))} | {fmt(tinfo.get(key))} |  |")
    for fw in ("kiln", "torch"):
        errs_ = [r["err"] for r in cap[fw]]
        if errs_ and max(errs_) > 1e-3:
            notes.append(f"{fw} compiled output differs from eager by {max(errs_):.2e}")
    if kinfo.get("reasons"):
        notes.append("kiln graph breaks: " + "; ".join(kinfo["reasons"]))

    lines += ["", "## 3. Steady state", "",
              f"{model_desc}; ms per forward, median of {args.rounds} interleaved rounds.", "",
              "| forward | ms | x kiln eager | x torch eager |", "| --- | ---: | ---: | ---: |"]
    ms, errs = steady["ms"], steady["errors"]
    base_k, base_t = ms.get("kiln eager"), ms.get("torch eager")
    for label, name in (("kiln eager", "kiln eager"),
                        ('kiln.compile(backend="eager")', "kiln compiled"),
                        ("torch eager", "torch eager"),
                        ('torch.compile(backend="eager")', "torch compiled"),
                        ("torch.compile (inductor)", "torch inductor")):
        v = cell(ms, errs, name)
        lines.append(f"| {label} | {fmt(v)} | {ratio(v, base_k)} | {ratio(v, base_t)} |")
    for name, e in steady.get("err", {}).items():
        if e > 1e-3:
            notes.append(f"{name}: output differs from kiln eager by {e:.2e}")
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def write_atomic(path: str, text: str) -> None:
    """Temp file in the same folder + rename: a reader never sees half a table."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".capture-", suffix=".md", dir=folder)
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)  # mkstemp makes 0600; a results file is for everyone
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: 2-layer d=64 model, few rounds, no inductor, no file "
                         "unless --out")
    ap.add_argument("--out", default=None, help=f"markdown output (default {DEFAULT_OUT})")
    ap.add_argument("--no-inductor", action="store_true", help="skip torch.compile's default")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--d", type=int, default=None)
    args = ap.parse_args(argv)
    quick = args.quick
    args.layers = args.layers or (2 if quick else 12)
    args.d = args.d or (64 if quick else 256)
    args.hit_rounds, args.calls = (3, 500) if quick else (15, 5000)
    args.trials, args.rounds = (1, 3) if quick else (3, 15)
    inductor = not (quick or args.no_inductor)
    out = args.out if args.out is not None else (None if quick else DEFAULT_OUT)

    torch.set_num_threads(1)
    kiln.set_num_threads(1)
    warnings.filterwarnings("ignore", module="torch")
    model, ref, kidx, tidx = make_models(args.layers, args.d)
    desc = (f"GPT-style decoder of tools/demo.py ({args.layers} layers, d={args.d}, 4 heads, "
            "vocab 512), 4 x 64 tokens")
    with torch.no_grad(), kiln.no_grad():
        hit = bench_cache_hit(args.hit_rounds, args.calls, inductor)
        cap = bench_capture(model, ref, kidx, tidx, args.trials)
        steady = bench_steady(model, ref, kidx, tidx, args.rounds, inductor)
    text = render(args, hit, cap, steady, desc)
    print(text, end="")
    if out:
        write_atomic(out, text)
        print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

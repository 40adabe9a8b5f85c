"""Unmodified NumPy kernels under NumPy, kiln.compile, torch.compile and numba.njit, in one run.

The kernels are bench/numpy_kernels.py (NPBench style: stencils with time loops, pointwise
chains, reductions, matrix-vector chains, softmax and an MLP in NumPy, an N-body step, a
Mandelbrot iteration, in-place slice updates). Every system's result is checked against NumPy's
(values and dtypes, in-place updates included) before timing; a system that fails or does not
compile a kernel shows n/a with the reason. Times are medians of rounds interleaved with
NumPy's, in ms per call; torch.compile and numba run in a child process per kernel, bounded by
--peer-timeout. "compile" is the first call's time minus a warm call's (capture + compile),
from empty in-memory caches. The table is printed and written atomically to bench/results/numpy.md.

    .venv/bin/python bench/numpy_suite.py [--threads 1] [--scale 4] [--rounds 15] [--only NAME]
                                    [--no-torch] [--no-numba] [--out PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import tempfile
import time

# This file is bench/numpy_suite.py: its folder must not shadow the numpy package.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]


def _set_threads_env(n: int) -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "NUMBA_NUM_THREADS"):
        os.environ[var] = str(n)


def _parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--scale", type=int, default=4, help="size multiplier of every kernel")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--only", action="append", default=[])
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--no-numba", action="store_true")
    p.add_argument("--out", default=None)
    p.add_argument("--peer-timeout", type=float, default=240.0,
                   help="seconds a peer may take on one kernel (compile + runs) before n/a")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)  # one peer, one kernel
    return p.parse_args()


ARGS = _parse() if __name__ == "__main__" else None
if ARGS is not None:
    _set_threads_env(ARGS.threads)

import numpy as np  # noqa: E402

_spec = importlib.util.spec_from_file_location("numpy_kernels",
                                               os.path.join(HERE, "numpy_kernels.py"))
K = importlib.util.module_from_spec(_spec)
sys.modules["numpy_kernels"] = K
_spec.loader.exec_module(K)

DEFAULT_OUT = os.path.join(HERE, "results", "numpy.md")


def _describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:100]


def same(got, want) -> str | None:
    """None when `got` is NumPy's result (values and dtypes), else what differs."""
    if isinstance(want, tuple):
        if not isinstance(got, tuple) or len(got) != len(want):
            return f"returned {type(got).__name__}"
        for g, w in zip(got, want, strict=True):
            err = same(g, w)
            if err:
                return err
        return None
    if want is None:
        return None if got is None else "returned a value"
    g, w = np.asarray(got), np.asarray(want)
    if g.dtype != w.dtype:
        return f"dtype {g.dtype} (NumPy: {w.dtype})"
    if g.shape != w.shape or not np.allclose(g, w, rtol=1e-7, atol=1e-10, equal_nan=True):
        return "values differ from NumPy's"
    return None


def check(kernel, fn, args) -> str | None:
    want_args, got_args = K.copy_args(args), K.copy_args(args)
    want = kernel.fn(*want_args)
    got = fn(*got_args)
    err = same(got, want)
    for i in kernel.writes:
        err = err or same(got_args[i], want_args[i])
    return err


def first_call_seconds(fn, args) -> float:
    t0 = time.perf_counter()
    fn(*K.copy_args(args))
    return time.perf_counter() - t0


def median_ms(fns: dict, args, rounds: int) -> dict:
    """Interleaved rounds (each system once per round, on its own copy of the inputs)."""
    own = {name: K.copy_args(args) for name in fns}
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn(*own[name])
            times[name].append(time.perf_counter() - t0)
    return {name: sorted(ts)[len(ts) // 2] * 1e3 for name, ts in times.items()}


def make_peer(name: str, threads: int):
    """(compile, reset) of a system by name."""
    if name == "kiln.compile":
        import kiln

        kiln.set_num_threads(threads)
        return (lambda fn: kiln.compile(fn)), kiln.compiler.reset
    if name == "torch.compile":
        import torch
        import torch._dynamo

        torch.set_num_threads(threads)
        return (lambda fn: torch.compile(fn)), torch._dynamo.reset
    if name == "numba.njit":
        import numba

        return (lambda fn: numba.njit(cache=False)(fn)), (lambda: None)
    raise ValueError(f"unknown system {name!r}")


def measure(kernel, name: str, args, args_ns) -> dict:
    """One system on one kernel beside NumPy: checked first, then interleaved rounds."""
    out = {"ms": {}, "compile": None, "note": None}
    timed = {"NumPy": kernel.fn}
    try:
        make, reset = make_peer(name, args_ns.threads)
        reset()
        fn = make(kernel.fn)
        cold = first_call_seconds(fn, args)
        err = check(kernel, fn, args)
        if err:
            out["note"] = err
        else:
            warm = first_call_seconds(fn, args)
            out["compile"] = max(cold - warm, 0.0)
            timed[name] = fn
    except Exception as e:  # noqa: BLE001 - a system that cannot run a kernel shows why
        out["note"] = _describe(e)
    out["ms"] = median_ms(timed, args, args_ns.rounds)
    return out


def measure_in_child(kernel, name: str, args_ns) -> dict:
    """A peer in its own process, bounded by --peer-timeout (torch.compile may compile for
    minutes; numba may not compile at all)."""
    import json
    import subprocess

    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--only", kernel.name,
           "--scale", str(args_ns.scale), "--rounds", str(args_ns.rounds),
           "--threads", str(args_ns.threads)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args_ns.peer_timeout)
    except subprocess.TimeoutExpired:
        return {"ms": {}, "compile": None,
                "note": f"did not finish within {args_ns.peer_timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"ms": {}, "compile": None, "note": f"exit {done.returncode}: {tail[:100]}"}
    return json.loads(lines[-1])


def peers(args_ns) -> list:
    names = []
    if not args_ns.no_torch and importlib.util.find_spec("torch") is not None:
        names.append("torch.compile")
    if not args_ns.no_numba and importlib.util.find_spec("numba") is not None:
        names.append("numba.njit")
    return names


def run(args_ns) -> list:
    rows = []
    others = peers(args_ns)
    for kernel in K.KERNELS:
        if args_ns.only and kernel.name not in args_ns.only:
            continue
        args = kernel.make(np.random.default_rng(0), args_ns.scale)
        row = {"kernel": kernel.name, "ms": {}, "compile": {}, "notes": []}
        for name in others:
            got = measure_in_child(kernel, name, args_ns)
            if name in got["ms"]:
                row["ms"][name] = got["ms"][name]
                row["compile"][name] = got["compile"]
            if got["note"]:
                row["notes"].append(f"{name}: {got['note']}")
        got = measure(kernel, "kiln.compile", args, args_ns)
        row["ms"].update(got["ms"])
        if got["compile"] is not None:
            row["compile"]["kiln.compile"] = got["compile"]
        if got["note"]:
            row["notes"].append(f"kiln.compile: {got['note']}")
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


def run_child(args_ns) -> None:
    import json

    kernel = K.by_name(args_ns.only[0])
    args = kernel.make(np.random.default_rng(0), args_ns.scale)
    print(json.dumps(measure(kernel, args_ns.child, args, args_ns)), flush=True)


def _fmt(v, digits=3):
    return "n/a" if v is None else f"{v:.{digits}f}"


def _ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


COLUMNS = ["kernel", "NumPy ms", "kiln ms", "torch.compile ms", "numba ms", "kiln vs NumPy",
           "kiln vs torch.compile", "kiln vs numba", "compile s kiln / torch / numba"]


def format_row(row) -> str:
    ms = row["ms"]
    k = ms.get("kiln.compile")
    comp = row["compile"]
    cells = [row["kernel"], _fmt(ms.get("NumPy")), _fmt(k), _fmt(ms.get("torch.compile")),
             _fmt(ms.get("numba.njit")), _fmt(_ratio(ms.get("NumPy"), k), 2) + "x",
             _fmt(_ratio(ms.get("torch.compile"), k), 2) + "x",
             _fmt(_ratio(ms.get("numba.njit"), k), 2) + "x",
             " / ".join(_fmt(comp.get(p), 2) for p in ("kiln.compile", "torch.compile",
                                                        "numba.njit"))]
    return "| " + " | ".join(cells) + " |"


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def report(rows, args_ns) -> str:
    import platform

    lines = [f"# NumPy kernels: NumPy vs kiln.compile vs torch.compile vs numba "
             f"({args_ns.threads} thread(s), scale {args_ns.scale})", "",
             f"{platform.processor() or platform.machine()}, NumPy {np.__version__}", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += [format_row(r) for r in rows]
    g = {name: geomean([_ratio(r["ms"].get(name), r["ms"].get("kiln.compile")) for r in rows])
         for name in ("NumPy", "torch.compile", "numba.njit")}
    lines += ["", f"geomean kiln.compile speedup: {_fmt(g['NumPy'], 2)}x NumPy, "
              f"{_fmt(g['torch.compile'], 2)}x torch.compile, {_fmt(g['numba.njit'], 2)}x numba "
              "(ratios > 1: kiln faster; over the kernels each peer ran)"]
    comp = [r["compile"].get("kiln.compile") for r in rows]
    worst = max([c for c in comp if c is not None], default=None)
    lines.append(f"kiln compile time per kernel: max {_fmt(worst, 2)} s")
    notes = [f"- {r['kernel']}: {n}" for r in rows for n in r["notes"]]
    if notes:
        lines += ["", "Not timed:"] + notes
    return "\n".join(lines) + "\n"


def write_atomically(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main() -> None:
    if ARGS.child:
        run_child(ARGS)
        return
    rows = run(ARGS)
    text = report(rows, ARGS)
    print()
    print(text)
    out = ARGS.out or (DEFAULT_OUT if not ARGS.only else None)
    if out:
        write_atomically(out, text)


if __name__ == "__main__":
    main()

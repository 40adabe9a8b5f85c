"""kiln.explain: what kiln.compile captured from a function, and why the graph broke.

`kiln.explain(fn)(*args, **kwargs)` runs `fn` once under a private `Compiler` that records every
capture (`CaptureRecord`), and returns an `ExplainOutput`: the graphs, ops per graph, each graph
break with its user line and a suggested fix, the guards, and the recompiles with the guard that
failed. Field names follow `torch._dynamo.explain`.

Isolation: captures are cached per code object (on the code object itself, and in
`convert_frame`'s per-code state, which is keyed by code *equality*). So that a function that was
already compiled is captured again from scratch, without wiping the caches of other compiled
functions, explain runs a *copy* of the function whose code object carries one extra, unused
constant (the explainer's marker): equal bytecode, distinct identity and equality, hence an
empty cache. Functions that a graph break runs eagerly, which the hook captures as frames of
their own, are sent to marked copies the same way. Calling the same explainer again keeps those
caches, so a later call with different inputs shows its recompiles.
"""

from __future__ import annotations

import itertools
import re
import time
import types

import kiln
from kiln._capture.convert_frame import Compiler, _should_skip
from kiln._capture.graph import target_name

__all__ = ["BreakReason", "CaptureInfo", "ExplainOutput", "Recompile", "explain", "hint_for"]

# --- Suggested fixes ---------------------------------------------------------------------------

# (pattern over the break reason, suggested fix), first match wins. Used when the evaluator gave
# no hint of its own.
HINTS: list[tuple[str, str]] = [
    (r"data-dependent branch|truth value|bool\(\) of a tensor",
     "use kiln.where(cond, a, b) (or another tensor op) instead of Python control flow on a "
     "tensor"),
    (r"print\(\)", "remove print() from compiled code or move it outside"),
    (r"\.item\(\)|\.tolist\(\)|\.numpy\(\)|reads its data|reads a value|computed from tensor "
     r"data|depends on (its )?data|compares data|NumPy|DLPack|data_ptr",
     "keep values as tensors inside compiled code (no .item()/.tolist()/float(t)); read them "
     "after the compiled function returns"),
    (r"data-dependent output shape",
     "avoid ops whose output shape depends on data (nonzero, unique) inside compiled code, or "
     "use a fixed-shape alternative such as kiln.where"),
    (r"bytecode .* is not supported|with-block|generator|coroutine",
     "this Python construct is not captured: move it into a helper decorated with "
     "kiln.compiler.disable"),
    (r"^call to |call into library function|is not supported$|with a module or function",
     "move the call outside the compiled function, or wrap it in kiln.compiler.disable"),
    (r"changes global state",
     "set global state (seeds, default dtype, threads) outside the compiled function"),
    (r"assignment to the global|nonlocal variable",
     "return the value instead of assigning a global or nonlocal variable inside compiled code"),
    (r"raises at run time|raise statement|StopIteration|assertion failed",
     "this line raises when run; the graph breaks so that the exception is raised eagerly"),
    (r"forward hooks", "remove the module's forward hooks, or compile its forward function"),
    (r"creating a .* module",
     "create modules outside the compiled function (for example in __init__)"),
    (r"inference_mode", "use kiln.no_grad() inside compiled code"),
    (r"autograd", "call backward() outside the compiled function: the compiled forward "
                  "records its compiled backward, which loss.backward() runs"),
    (r"iteration over a tensor|iteration over a 0-d",
     "iterate over range(t.shape[0]) or use a tensor op instead of iterating a tensor"),
    (r"symbolic|float arithmetic on symbolic",
     "mark the dimension static (kiln.mark_static) or compile with dynamic=False"),
]
DEFAULT_HINT = ("move the unsupported code outside the compiled function, or into a helper "
                "decorated with kiln.compiler.disable")


def hint_for(reason: str, hint: str = "") -> str:
    """The evaluator's `hint` when it gave one, else the first `HINTS` entry matching
    `reason`, else `DEFAULT_HINT`."""
    if hint:
        return hint
    for pattern, text in HINTS:
        if re.search(pattern, reason):
            return text
    return DEFAULT_HINT


# --- The pieces of a report --------------------------------------------------------------------

_RESUME_PREFIX = re.compile(r"^(?:__resume_at_\d+_)+")


def user_function_name(code_name: str) -> str:
    """`f` for `f` and for its resume functions (`__resume_at_40_f`, `__resume_at_9___resume_at_
    40_f`): the name the user wrote."""
    return _RESUME_PREFIX.sub("", code_name) or code_name


class BreakReason:
    """One graph break: `reason`, `user_stack` (a list of (filename, lineno, source line)),
    `hint` (a suggested fix, never empty) and `function` (the user's function name)."""

    def __init__(self, reason, user_stack, hint, function) -> None:
        self.reason = reason
        self.user_stack = list(user_stack)
        self.hint = hint
        self.function = function

    @classmethod
    def from_record(cls, record, code) -> BreakReason:
        return cls(record.reason, record.user_stack, hint_for(record.reason, record.hint),
                   user_function_name(code.co_name))

    @property
    def filename(self) -> str:
        return self.user_stack[-1][0]

    @property
    def lineno(self) -> int:
        return self.user_stack[-1][1]

    @property
    def source_line(self) -> str:
        return self.user_stack[-1][2]

    def __str__(self) -> str:
        lines = [self.reason]
        lines += [f"  {f}:{n} in {self.function}: {s}" for f, n, s in self.user_stack]
        lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"BreakReason({self.reason!r}, {self.filename}:{self.lineno})"


class Recompile:
    """A capture that happened because every cached entry of a code object failed its guards:
    `function` is the user's name, `code_name` the code's own (a resume function's differs),
    `reason` the text of the first guard that failed (of the newest entry)."""

    def __init__(self, function, code_name, filename, lineno, reason) -> None:
        self.function = function
        self.code_name = code_name
        self.filename = filename
        self.lineno = lineno
        self.reason = reason

    @property
    def where(self) -> str:
        """`f (file:line)`, naming the resume function when it is one."""
        resume = f" [{self.code_name}]" if self.code_name != self.function else ""
        return f"{self.function}{resume} ({self.filename}:{self.lineno})"

    def __str__(self) -> str:
        return f"{self.where}: guard failed: {self.reason}"

    def __repr__(self) -> str:
        return f"Recompile({self.function!r}, {self.reason!r})"


class CaptureInfo:
    """One capture of one code object (the function or a resume function): its graph (which may
    have no ops), its ops, guards, break (or None) and recompile reason (or None)."""

    def __init__(self, record) -> None:
        code = record.code
        self.code = code
        self.function = user_function_name(code.co_name)
        self.graph = record.graph
        self.name = record.graph.name
        self.ops = [target_name(n.target) for n in record.graph.nodes if n.op == "call"]
        self.guards = list(dict.fromkeys(record.guards))  # the same check may be recorded twice
        self.break_reason = (BreakReason.from_record(record.break_record, code)
                             if record.break_record is not None else None)
        self.report = getattr(record, "report", None)
        # (node name, target, reason) of each node the compiler declined (it ran eagerly)
        self.fallbacks = list(self.report.fallbacks) if self.report is not None else []
        self.recompile = None
        if record.recompile_reason is not None:
            self.recompile = Recompile(self.function, code.co_name, code.co_filename,
                                       code.co_firstlineno, record.recompile_reason)


def _loop_bodies(report) -> list:
    """The reports of a graph's loop nodes' bodies, nested loops included."""
    found = []
    for body in report.loops:
        found += [body, *_loop_bodies(body)]
    return found


# --- ExplainOutput -----------------------------------------------------------------------------


class ExplainOutput:
    """What explain() saw. `graphs` are the captured graphs with at least one op (as torch counts
    them; `captures` has every capture, empty graphs included), `ops_per_graph` their op names,
    `break_reasons` every graph break, `guards` (alias `out_guards`) every guard as text,
    `recompiles` every recompile with the failing guard, `fallbacks` per graph the nodes that ran on
    eager kernels because the compiler declined them, with the reason, `backward_parts` per graph
    the compiled parts that also compiled their backward, `result` what the last call returned."""

    def __init__(self, records, result=None, compile_times=None) -> None:
        self.captures = [CaptureInfo(r) for r in records]
        kept = [c for c in self.captures if c.ops]
        self.graphs = [c.graph for c in kept]
        self.graph_count = len(self.graphs)
        self.ops_per_graph = [c.ops for c in kept]
        self.op_count = sum(len(ops) for ops in self.ops_per_graph)
        self.break_reasons = [c.break_reason for c in self.captures if c.break_reason]
        self.graph_break_count = len(self.break_reasons)
        self.guards = list(dict.fromkeys(g for c in self.captures for g in c.guards))
        self.recompiles = [c.recompile for c in self.captures if c.recompile]
        self.fallbacks = [c.fallbacks for c in kept]
        # per graph, the compiled parts that compiled their backward too (compiled training)
        self.backward_parts = [c.report.backward_parts if c.report is not None else 0
                               for c in kept]
        self.result = result
        self.compile_times = compile_times

    @property
    def out_guards(self) -> list[str]:
        return self.guards

    def report(self, sources: bool = False) -> str:
        """The readable report; `sources` adds each graph's Python source."""
        out = [f"Graph Count: {self.graph_count}",
               f"Graph Break Count: {self.graph_break_count}",
               f"Op Count: {self.op_count}",
               "Break Reasons:"]
        for i, br in enumerate(self.break_reasons, 1):
            out.append(f"  Break Reason {i}:")
            out.append(f"    Reason: {br.reason}")
            out.append("    User Stack:")
            out += [f"      {f}:{n} in {br.function}: {s}" for f, n, s in br.user_stack]
            out.append(f"    Hint: {br.hint}")
        kept = [c for c in self.captures if c.ops]
        if sources:
            out.append("Graphs:")
            for i, c in enumerate(kept, 1):
                out.append(f"  Graph {i} ({c.name}, in {c.function}):")
                out += [f"    {line}" for line in c.graph.python_source().rstrip().splitlines()]
        out.append("Ops per Graph:")
        for i, c in enumerate(kept, 1):
            out.append(f"  Ops {i} ({c.name}):")
            out += [f"    {op}" for op in c.ops]
        out.append("Compiled Parts:")
        for c in kept:
            r = c.report
            if r is None:
                out.append(f"  {c.name}: not compiled by kiln's backend")
                continue
            out.append(f"  {c.name}: {len(r.parts)} compiled parts, {r.compiled_nodes} compiled "
                       f"nodes, {r.eager_nodes} eager nodes")
            out += [f"    fallback {name} ({target}): {reason}"
                    for name, target, reason in c.fallbacks]
            out += [f"    loop node {body.name}: body in {len(body.parts)} compiled parts, "
                    f"{body.compiled_nodes} compiled nodes, {body.eager_nodes} eager nodes"
                    for body in _loop_bodies(r)]
            for k, info in enumerate(r.infos):
                if "backward" in info:
                    shapes = " (compiled per input shape)" if info.get("per_shape") else ""
                    out.append(f"    part{k} trains{shapes}: forward {info['kernels']} kernels, "
                               f"backward {info['backward']['kernels']} kernels, "
                               f"{info['saved']} saved values ({info['saved_bytes']} bytes)")
        out.append("Guards:")
        for c in self.captures:
            out.append(f"  {c.name} (in {c.function}):")
            out += [f"    {g}" for g in c.guards]
        out.append("Recompiles:")
        for i, r in enumerate(self.recompiles, 1):
            out.append(f"  Recompile {i}: {r.where}")
            out.append(f"    guard failed: {r.reason}")
        if self.compile_times is not None:
            out.append(f"Compile Times: {self.compile_times}")
        return "\n".join(out) + "\n"

    def __str__(self) -> str:
        return self.report()

    def __repr__(self) -> str:
        return (f"ExplainOutput(graph_count={self.graph_count}, "
                f"graph_break_count={self.graph_break_count}, op_count={self.op_count}, "
                f"recompiles={len(self.recompiles)})")


# --- Running a function with a fresh cache ------------------------------------------------------

_MARKER_IDS = itertools.count()
_CO_VARARGS, _CO_VARKEYWORDS = 0x04, 0x08


def new_marker() -> str:
    """A constant no user code holds; code objects carrying it belong to one explainer."""
    return f"__kiln_explain_{next(_MARKER_IDS)}"


def marked_code(code: types.CodeType, marker: str) -> types.CodeType:
    """`code` with `marker` appended to its constants: the same bytecode, names and lines, but
    neither identical nor equal to `code`, so it has its own (empty) capture cache and state."""
    return code.replace(co_consts=code.co_consts + (marker,))


def _function_like(fn, code: types.CodeType) -> types.FunctionType:
    """A function running `code` with `fn`'s globals, name, defaults and closure."""
    clone = types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__,
                               fn.__closure__)
    clone.__kwdefaults__ = fn.__kwdefaults__
    clone.__qualname__ = fn.__qualname__
    return clone


def fresh_function(fn: types.FunctionType, marker: str | None = None) -> types.FunctionType:
    """A copy of `fn` whose code is `marked_code(fn.__code__, marker)`: it captures from scratch
    while other compiled callers of `fn` keep their caches."""
    clone = _function_like(fn, marked_code(fn.__code__, marker or new_marker()))
    clone.__module__ = fn.__module__
    clone.__doc__ = fn.__doc__
    clone.__dict__.update(fn.__dict__)
    return clone


def _call_with_frame_args(fn, code: types.CodeType, args: tuple):
    """Calls `fn` with the arguments of a frame of `code` as the hook sees them (positional
    parameters, keyword-only parameters, then the *args tuple and the **kwargs dict)."""
    n, k = code.co_argcount, code.co_kwonlyargcount
    positional = list(args[:n])
    keywords = {code.co_varnames[n + i]: args[n + i] for i in range(k)}
    i = n + k
    if code.co_flags & _CO_VARARGS:
        positional += args[i]
        i += 1
    if code.co_flags & _CO_VARKEYWORDS:
        keywords.update(args[i])
    return fn(*positional, **keywords)


def _unwrap(target):
    """(callable to explain, compiler settings to copy or None) for a function, a method, a
    kiln.compile'd function or module, or a module."""
    from kiln._capture.compile import OptimizedModule

    if isinstance(target, OptimizedModule):
        return target._orig_mod, target._compiled_call._kiln_compiler
    compiler = getattr(target, "_kiln_compiler", None)
    if compiler is not None:
        return target._kiln_original, compiler
    return target, None


class _ModuleRunner:
    """Calls `module(*args)` (hooks included) with its forward replaced, for the call only, by a
    fresh copy bound to the module."""

    def __init__(self, module, marker: str) -> None:
        self.module = module
        forward = module.__dict__.get("forward", type(module).forward)
        if isinstance(forward, types.MethodType):
            forward = forward.__func__
        if not isinstance(forward, types.FunctionType):
            raise TypeError(f"kiln.explain: {type(module).__name__}.forward is not a Python "
                            "function")
        self.forward = types.MethodType(fresh_function(forward, marker), module)

    def __call__(self, *args, **kwargs):
        d = self.module.__dict__
        missing = object()
        previous = d.get("forward", missing)
        d["forward"] = self.forward
        try:
            return self.module(*args, **kwargs)
        finally:
            if previous is missing:
                d.pop("forward", None)
            else:
                d["forward"] = previous


def _fresh_callable(fn, marker: str):
    if isinstance(fn, kiln.nn.Module):
        return _ModuleRunner(fn, marker)
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return types.MethodType(fresh_function(fn.__func__, marker), fn.__self__)
    if isinstance(fn, types.FunctionType):
        return fresh_function(fn, marker)
    raise TypeError(f"kiln.explain expects a function, a method or a kiln.nn.Module, got "
                    f"{type(fn).__name__}")


class _ExplainCompiler(Compiler):
    """The explainer's Compiler. It captures only code carrying its marker (the explained
    function's copy and the resume functions made from it). Any other frame that misses the
    cache (a function a graph break runs eagerly, which the hook would capture as a frame of its
    own) is sent to a marked copy of its code, so its captures are recorded too, from an empty
    cache, and nothing is installed on the original code. Also adds up the capture time."""

    def __init__(self, marker: str, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.marker = marker
        self.seconds = 0.0
        self._copies: dict = {}  # original code -> marked code

    def callback(self, func, args, code):
        start = time.perf_counter()
        try:
            if self.marker in code.co_consts or _should_skip(code):
                return super().callback(func, args, code)
            copy = self._copies.get(code)
            if copy is None:
                copy = self._copies[code] = marked_code(code, self.marker)
            return lambda fn, *frame_args: _call_with_frame_args(_function_like(fn, copy), copy,
                                                                 frame_args)
        finally:
            self.seconds += time.perf_counter() - start


class Explainer:
    """The callable kiln.explain(fn) returns: each call runs `fn` under the private compiler and
    returns an ExplainOutput for everything captured so far by this explainer."""

    def __init__(self, fn) -> None:
        from kiln._capture.compile import _check_python, wrap_with_compiler

        _check_python()
        target, settings = _unwrap(fn)
        marker = new_marker()
        self.records: list = []
        if settings is None:
            self.compiler = _ExplainCompiler(marker, recorder=self.records)
        else:  # keep the compiled function's settings, but report breaks instead of raising
            self.compiler = _ExplainCompiler(marker, settings.backend, False, settings.dynamic,
                                             settings.recompile_limit, recorder=self.records)
        self._run = wrap_with_compiler(_fresh_callable(target, marker), self.compiler)

    def __call__(self, *args, **kwargs) -> ExplainOutput:
        result = self._run(*args, **kwargs)
        return self.output(result)

    def output(self, result=None) -> ExplainOutput:
        """The ExplainOutput for the captures so far (also after `fn` raised)."""
        times = f"{len(self.records)} captures, {self.compiler.seconds:.4f} s in capture"
        return ExplainOutput(self.records, result, times)


def explain(fn, *extra_args, **extra_kwargs):
    """`kiln.explain(fn)(*args, **kwargs)` runs `fn` (a function, method, kiln.nn.Module or a
    kiln.compile'd one) with a fresh capture cache and returns an `ExplainOutput`. The older
    torch spelling `kiln.explain(fn, *args, **kwargs)` runs it at once."""
    explainer = Explainer(fn)
    if extra_args or extra_kwargs:
        return explainer(*extra_args, **extra_kwargs)
    return explainer

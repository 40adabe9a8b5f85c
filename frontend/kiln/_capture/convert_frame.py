"""From a frame to a cache entry: capture, guards, graph breaks, recompiles.

`Compiler.callback` is what the eval-frame hook calls on a cache miss. It captures the frame
symbolically from its first instruction; the result is a graph plus either the return value or a
graph break (an instruction that cannot be captured, with the stack and locals before it). The
entry it installs runs the graph, then returns, or performs the break: a call or a branch on a
tensor is executed right there and the frame continues in a resume function (captured in turn);
any other break continues natively in a resume function that starts at the breaking instruction.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import threading
import time
import types
import warnings

import kiln
from kiln import _C
from kiln._capture import bytecode, codegen, logs, side_effects
from kiln._capture import variables as V
from kiln._capture.calls import library_dirs
from kiln._capture.context import NUMPY_NUMBER_NAMES, CaptureContext
from kiln._capture.graph import Graph
from kiln._capture.sources import ArgSource, ClosureSource
from kiln._capture.symbolic import Frame, Snapshot, user_frames

_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))
_NN_MODULES_DIR = os.path.join(_KILN_DIR, "kiln", "nn", "modules") + os.sep
_WRAP_NUMPY_FILE = os.path.join(_KILN_DIR, "kiln", "_numpy", "__init__.py")


class CaptureError(RuntimeError):
    """A graph break where `fullgraph=True` (or export) requires a single graph."""


class BreakRecord:
    """One graph break, for explain(): why, and where in the user's code."""

    def __init__(self, reason: str, hint: str, filename: str, lineno: int, inner=()) -> None:
        # Frames of kiln's own code (inlined nn layers) are left out: the user's line is named.
        (filename, lineno), *inner = user_frames([(filename, lineno), *inner])
        self.reason = reason
        self.hint = hint
        self.filename = filename
        self.lineno = lineno
        self.source_line = linecache.getline(filename, lineno).strip()
        # (filename, lineno) inside the inlined calls, outermost first, when the break comes
        # from a function called at `lineno`.
        self.inner = list(inner)

    @property
    def user_stack(self):
        """(filename, lineno, source line) from the frame's line to the innermost one."""
        return [(self.filename, self.lineno, self.source_line)] + [
            (f, n, linecache.getline(f, n).strip()) for f, n in self.inner]

    def where(self) -> str:
        """The user stack as lines `file:line: source`, innermost last."""
        return "\n".join(f"{f}:{n}: {s}" for f, n, s in self.user_stack)

    def __str__(self) -> str:
        text = f"{self.reason}\n    " + self.where().replace("\n", "\n    ")
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text


class CaptureRecord:
    """What one capture produced (explain() collects these)."""

    def __init__(self, code, graph, guards, break_record, recompile_reason,
                 report=None) -> None:
        self.code = code
        self.graph = graph
        self.guards = guards
        self.break_record = break_record
        self.recompile_reason = recompile_reason
        self.report = report  # the CPU backend's PartitionReport, when it compiled the graph


class CodeState:
    """Python-side state of one code object: resume functions, automatic dynamic shapes, and
    the lock that serializes its captures (see Compiler.callback)."""

    def __init__(self) -> None:
        self.resume_fns: dict = {}
        self.auto_dynamic: dict = {}
        self.seen_strides: dict = {}  # (argument, path) -> strides at the last capture
        self.seen: dict = {}
        self.captures = 0
        self.no_tensor_work = 0  # captures in a row that computed no tensor
        # captures per module instance the code ran for (a layer's forward in a 12-layer model
        # is captured once per layer when a graph break guards `self`'s identity)
        self.captures_by_owner: dict = {}
        # Reentrant: a thread never waits on a capture it is running itself.
        self.lock = threading.RLock()


_code_states: dict = {}
_code_states_lock = threading.Lock()


def _varying_number(value) -> bool:
    """A number argument that goes symbolic when it changes between calls: a Python int or
    float, or a NumPy scalar of these kinds (context.CaptureContext.wrap)."""
    t = type(value)
    return t in (int, float) or (t.__module__ == "numpy" and t.__name__ in NUMPY_NUMBER_NAMES)



def _module_owner(args):
    """The module a method's code runs for (its first argument), or None."""
    first = args[0] if args else None
    return first if isinstance(first, kiln.nn.Module) else None


def code_state(code) -> CodeState:
    state = _code_states.get(code)
    if state is None:
        # Two threads missing at once must share one state, or they would not share its lock.
        with _code_states_lock:
            state = _code_states.get(code)
            if state is None:
                state = _code_states[code] = CodeState()
    return state


def reset_code_states() -> None:
    _code_states.clear()


def _should_skip(code) -> bool:
    filename = code.co_filename
    if filename.startswith(_KILN_DIR + os.sep):
        # The forward of a kiln.nn layer is model code, captured like a user module's
        # (kiln.compile(nn.Sequential(...)) starts in Sequential.forward), and so is
        # wrap_numpy's wrapper (its tensors become arrays without a copy); the rest is library.
        if filename == _WRAP_NUMPY_FILE and code.co_qualname == "wrap_numpy.<locals>.wrapper":
            return False
        return not (filename.startswith(_NN_MODULES_DIR) and code.co_name == "forward")
    if filename.startswith("<kiln-") or filename.startswith("<frozen"):
        return True
    return filename.startswith(library_dirs()) and "site-packages/kiln" not in filename


def _is_generated_helper(func) -> bool:
    """A method that dataclasses or namedtuple generate with exec (file "<string>") for a class
    of kiln or of the standard library: library code, never captured."""
    if not func.__code__.co_filename.startswith("<"):
        return False
    module = func.__globals__.get("__name__") or ""
    return module == "kiln" or module.startswith(("kiln.", "namedtuple_")) or (
        module.split(".")[0] in sys.stdlib_module_names)


class Compiler:
    """Settings of one kiln.compile() call; its `callback` runs on every cache miss."""

    def __init__(self, backend=None, fullgraph=False, dynamic=None, recompile_limit=8,
                 recorder=None, options=None) -> None:
        self.backend = backend
        self.options = dict(options or {})
        self.fullgraph = fullgraph
        self.dynamic = dynamic
        self.recompile_limit = recompile_limit
        self.recorder = recorder
        self.root_codes: set = set()  # the compiled function's (or forward's) code objects

    # -- the hook's callback ---------------------------------------------------------------
    def callback(self, func, args, code):
        if _should_skip(code) or _is_generated_helper(func):
            _C._capture.mark_skip(code)
            return None
        state = code_state(code)
        # One capture of a code object at a time. Threads whose first calls arrive together
        # would each capture their own entry (and soon hit the recompile limit); a thread that
        # waited here looks the cache up again and takes the entry captured meanwhile.
        with state.lock:
            for guards, entry in _C._capture.entries(code):
                if guards.check(args, func):
                    return entry
            if _C._capture.is_no_capture(code):  # another thread hit the limit meanwhile
                return None
            return self._miss(func, args, code, state)

    def _miss(self, func, args, code, state):
        entries = _C._capture.entries(code)
        reason = None
        if entries:
            gm = entries[0][0]
            reason = gm.first_failure(args, func)
            logs.log("recompiles", lambda: f"recompiling {code.co_name} ({code.co_filename}:"
                                           f"{code.co_firstlineno}): guard failed: {reason}"
                                           f"{_now(reason, args, code)}")
            owner = _module_owner(args)
            mine = state.captures_by_owner.get(id(owner), 0) if owner is not None else len(entries)
            # as Dynamo's limits: per module instance a method's code runs for, and overall
            if mine >= self.recompile_limit or len(entries) >= self.recompile_limit * 8:
                _C._capture.mark_no_capture(code)
                warnings.warn(
                    f"kiln.compile: {code.co_name} hit the recompile limit "
                    f"({self.recompile_limit}); it now runs eagerly for new inputs. "
                    f"Last failing guard: {reason}",
                    stacklevel=2,
                )
                return None
        entry = self.capture(func, args, code, state, reason)
        owner = _module_owner(args)
        if entry is not None and owner is not None:
            state.captures_by_owner[id(owner)] = state.captures_by_owner.get(id(owner), 0) + 1
        return entry

    # -- capture ---------------------------------------------------------------------------
    def capture(self, func, args, code, state, recompile_reason):
        start = time.perf_counter()
        try:
            return self._capture(func, args, code, state, recompile_reason)
        finally:
            logs.log("perf", lambda: f"capture of {code.co_name} ({code.co_filename}:"
                                     f"{code.co_firstlineno}): "
                                     f"{(time.perf_counter() - start) * 1e3:.2f} ms")

    def _capture(self, func, args, code, state, recompile_reason):
        labels = _state_labels(code, len(args))
        self._update_auto_dynamic(state, func, args, labels)
        rng = kiln.get_rng_state()
        try:
            try:
                for _ in range(8):
                    ctx_break_at = state.__dict__.setdefault("break_at", {})
                    try:
                        return self._capture_once(func, args, code, state, labels,
                                                  recompile_reason, static=False)
                    except V.BreakAt as e:
                        if e.offset in ctx_break_at:
                            raise V.Unsupported(e.reason, e.hint) from None
                        ctx_break_at[e.offset] = (e.reason, e.hint)
                raise V.Unsupported("too many captures that break later than they started")
            except V.RestartStatic:
                return self._capture_once(func, args, code, state, labels, recompile_reason,
                                          static=True)
        except V.Unsupported as e:  # outside any instruction (wrapping the arguments, codegen)
            if self.fullgraph:
                raise CaptureError(f"kiln.compile(fullgraph=True): cannot capture "
                                   f"{code.co_name} ({code.co_filename}:{code.co_firstlineno}): "
                                   f"{e.reason}") from None
            logs.log("graph_breaks", f"{code.co_name} runs eagerly: {e.reason}")
            if self.recorder is not None and not code.co_name.startswith("__resume_at"):
                # explain() names it: a break of the whole function (a resume function's
                # arguments come from a break explain() already reports)
                record = BreakRecord(f"the whole function runs eagerly: {e.reason}", e.hint,
                                     code.co_filename, code.co_firstlineno)
                self.recorder.append(CaptureRecord(code, Graph(code.co_name), [], record,
                                                   recompile_reason))
            # A frame that cannot be captured at all, twice: every later call runs eagerly
            # without trying again (each try costs a capture).
            state.failures = getattr(state, "failures", 0) + 1
            if state.failures >= 2:
                _C._capture.mark_no_capture(code)
                logs.log("graph_breaks", f"{code.co_name}: not captured again (it runs eagerly "
                                         "from now on)")
            return None
        finally:
            kiln.set_rng_state(rng)

    def _update_auto_dynamic(self, state, func, args, labels) -> None:
        if self.dynamic is False:
            return
        for (index, path), old in list(state.seen.items()):
            value = _fetch(func, args, index, path)
            if _is_tensor_or_array(value) and isinstance(old, tuple):
                if len(value.shape) == len(old):
                    pairs = enumerate(zip(value.shape, old, strict=True))
                    changed = {d for d, (a, b) in pairs if a != b}
                    if changed:
                        key = _source_for(func, index, labels, path)
                        state.auto_dynamic.setdefault(key, set()).update(changed)
                        logs.log("recompiles", f"automatic dynamic: {key} dims "
                                               f"{sorted(changed)} change between calls")
                    elif isinstance(value, kiln.Tensor) and (index, path) in state.seen_strides \
                            and state.seen_strides[(index, path)] != tuple(value.stride()):
                        # same sizes, other strides (a decode loop's x[:, -1:] of a growing
                        # sequence): the entry makes it contiguous, the guard stops checking
                        # (not for a tensor whose layout the code reads or writes through:
                        # "layout", see context.input_contiguous)
                        key = _source_for(func, index, labels, path)
                        marks = state.auto_dynamic.setdefault(key, set())
                        if "layout" not in marks:
                            marks.add("strides")
                        logs.log("recompiles", f"automatic dynamic: {key} strides change "
                                               "between calls (made contiguous)")
            elif _varying_number(value) and type(old) is type(value) and value != old:
                key = _source_for(func, index, labels, path)
                state.auto_dynamic.setdefault(key, set())

    def _capture_once(self, func, args, code, state, labels, recompile_reason, static):
        state.captures += 1
        name = f"{code.co_name}_{state.captures - 1}"
        ctx = CaptureContext(name, labels, False if static else self.dynamic,
                             {} if static else state.auto_dynamic)
        ctx.break_at = state.__dict__.get("break_at", {})  # see V.BreakAt
        ctx.grad_enabled = kiln.is_grad_enabled()
        ctx.graph.grad_enabled = ctx.grad_enabled
        from kiln import _grad_mode

        ctx.guards.flag(_grad_mode._state, "grad_enabled", ctx.grad_enabled,
                        f"grad mode is {'enabled' if ctx.grad_enabled else 'disabled'}")
        autocast_at_entry(ctx)
        from kiln._tensor import default_device_state

        if (where := default_device_state.name) != "cpu":  # factories make tensors there
            ctx.guards.flag(default_device_state, "name", where, f"default device is {where}")
        locals_ = {}
        for i, value in enumerate(args):
            locals_[code.co_varnames[i]] = ctx.wrap(value, ArgSource(i, labels[i]))
        closure = None
        if code.co_freevars:
            closure = []
            for i, cell in enumerate(func.__closure__ or ()):
                try:
                    contents = ctx.wrap(cell.cell_contents,
                                        ClosureSource(i, code.co_freevars[i]))
                except ValueError:
                    contents = None
                closure.append(V.CellVar(contents, ClosureSource(i, code.co_freevars[i])))
        top = TopFrame(ctx, code, func.__globals__, locals_, closure=closure)
        outcome = run_keeping_regions(top)
        for (source, sizes) in ctx.seen_sizes.items():
            path = _path_of(source)
            if path is not None:
                state.seen[path] = sizes
        for (source, strides) in ctx.seen_strides.items():
            path = _path_of(source)
            if path is not None:
                state.seen_strides[path] = strides
        for _, var, example in ctx.input_contiguous:
            if var.example is not example:  # written in place: a contiguous copy would lose it
                ctx.keep_layout(var)
        for source, value in ctx.seen_scalars.items():
            path = _path_of(source)
            if path is not None:
                state.seen[path] = value
        return self._finish(func, code, state, ctx, top, outcome, recompile_reason)

    def _finish(self, func, code, state, ctx, top, outcome, recompile_reason):
        break_record = None
        if isinstance(outcome, Break):
            lineno = outcome.lineno
            hint = outcome.error.hint
            if bytecode.in_loop(code, outcome.inst.offset) or bytecode.in_exception_region(
                code, outcome.inst.offset
            ):  # BreakHandler's native mode: the frame goes on as plain Python from here
                hint = (hint + "; " if hint else "") + (
                    "the break is inside a loop or try block: the rest of this function runs "
                    "uncompiled (compile the loop's body as a function of its own)")
            break_record = BreakRecord(outcome.error.reason, hint, code.co_filename, lineno,
                                       reversed(outcome.error.__dict__.get("frames", ())))
            logs.log("graph_breaks", f"graph break in {code.co_name}: {break_record}")
            if self.fullgraph and isinstance(outcome.error, V.AssertionFailed):
                raise AssertionError(outcome.error.message)  # what eager raises, not a break
            if self.fullgraph:
                raise CaptureError(
                    f"kiln.compile(fullgraph=True): graph break: {outcome.error.reason}\n  "
                    + break_record.where().replace("\n", "\n  ")
                    + (f"\n  hint: {outcome.error.hint}" if outcome.error.hint else "")
                )
            state_vars = list(outcome.stack) + list(outcome.locals.values())
            outputs = codegen.tensors_in(state_vars + side_effects.replayed_values(ctx))
        else:
            outputs = codegen.tensors_in([outcome.value] + side_effects.replayed_values(ctx))
        graph = ctx.graph
        graph.output([v.node for v in outputs])
        graph.erase_unused()
        graph_fn = self._compile_graph(graph, ctx)
        gm = ctx.guards.build()
        if self.recorder is not None:
            self.recorder.append(CaptureRecord(code, graph, ctx.guards.describe(), break_record,
                                               recompile_reason,
                                               getattr(graph_fn, "kiln_report", None)))
        logs.log("graph", lambda: f"captured {graph.name} ({graph.op_count()} ops):\n"
                                  f"{graph.python_source()}")
        logs.log("guards", lambda: f"guards of {graph.name}:\n  "
                                   + "\n  ".join(ctx.guards.describe()))
        if isinstance(outcome, Return):
            entry = codegen.make_entry(ctx, graph_fn, outputs, "return {ret}",
                                       {"ret": outcome.value}, {})
            self._note_no_tensor_work(code, state, ctx, graph)
        else:
            entry = self._break_entry(func, code, state, ctx, graph_fn, outputs, outcome)
        logs.log("output_code", lambda: f"code of {graph.name}:\n{graph.python_source()}\n"
                                        f"entry:\n{entry.kiln_source}")
        _C._capture.add_entry(code, gm, entry)
        return entry

    def _note_no_tensor_work(self, code, state, ctx, graph) -> None:
        """A frame whose captures compute no tensor (a scheduler's `lr_lambda(step)`, called
        from code that runs eagerly): after its second such capture it runs as plain Python,
        as torch.compile skips it, instead of capturing again for every new int it gets."""
        if code in self.root_codes or side_effects.replayed_values(ctx) or any(
                isinstance(n.meta.get("example"), kiln.Tensor) for n in graph.nodes):
            state.no_tensor_work = 0
            return
        state.no_tensor_work += 1
        if state.no_tensor_work >= 2:
            logs.log("recompiles", f"{code.co_name} ({code.co_filename}:{code.co_firstlineno}) "
                                   "computes no tensor: it runs as plain Python from now on")
            _C._capture.mark_no_capture(code)

    def _compile_graph(self, graph, ctx):
        if self.backend == "eager":
            return graph.compile_python()
        if self.backend is None or self.backend == "kiln":
            from kiln._capture import backend_compiled

            if self.backend is None and not backend_compiled.default_backend_enabled():
                return graph.compile_python()
            return backend_compiled.compile_graph(
                graph, fallback=self.options.get("backend_fallback", True))
        if callable(self.backend):
            example_inputs = [n.meta["example"] for n in graph.inputs]
            compiled = self.backend(graph, example_inputs)
            if not callable(compiled):
                raise TypeError("a kiln.compile backend must return a callable")
            return _without_capture(compiled)
        raise ValueError(f"kiln.compile: unknown backend {self.backend!r} "
                         "(expected None, 'eager', 'kiln' or a callable)")

    def _break_entry(self, func, code, state, ctx, graph_fn, outputs, outcome):
        stack, locals_ = outcome.stack, outcome.locals
        cell_names = set(code.co_cellvars)
        plain = {k: v for k, v in locals_.items() if k not in cell_names}
        cells = {k: v for k, v in locals_.items() if k in cell_names}
        for name in cell_names:  # a cell not made yet: MAKE_CELL runs before any break
            cells.setdefault(name, V.CellVar(None))
        result_vars = {f"s{i}": v for i, v in enumerate(stack)}
        result_vars.update({f"l{i}": v for i, v in enumerate(plain.values())})
        result_vars.update({f"c{i}": v for i, v in enumerate(cells.values())})

        def body(e: dict) -> str:  # e: the Python expression rebuilding each variable
            items = ", ".join(e[f"s{i}"] for i in range(len(stack)))
            local_items = ", ".join(f"{k!r}: {e[f'l{i}']}" for i, k in enumerate(plain))
            cell_items = ", ".join(f"{k!r}: {e[f'c{i}']}" for i, k in enumerate(cells))
            return "\n".join([
                f"_stack = [{items}]",
                f"_locals = {{{local_items}}}",
                f"_cells = {{{cell_items}}}",
                f"_set_grad({ctx.grad_enabled!r})",
                # the regions a block inside the code had open at the break
                *(["_set_autocast(_autocast_regions)"] if ctx.autocast != ctx.entry_autocast
                  else []),
                "return _do_break(_func, _stack, _locals, _cells)",
            ])

        handler = BreakHandler(self, func, code, state, outcome)
        from kiln import _grad_mode
        from kiln.amp.autocast import set_regions

        return codegen.make_entry(ctx, graph_fn, outputs, body, result_vars,
                                  {"_do_break": handler, "_set_grad": _grad_mode._set_grad_enabled,
                                   "_set_autocast": set_regions,
                                   "_autocast_regions": dict(ctx.autocast)})


def autocast_at_entry(ctx) -> None:
    """The autocast regions open when the code is called: the capture's starting regions
    (ctx.autocast, which ops.record casts for) and a guard on them."""
    from kiln.amp.autocast import _state as autocast_state

    ctx.autocast = autocast_state.regions()
    ctx.entry_autocast = dict(ctx.autocast)
    regions = ", ".join(f"{d} {t}" for d, t in ctx.autocast.items()) or "none"
    ctx.guards.flag(autocast_state, "key", autocast_state.key, f"autocast regions: {regions}")


def run_keeping_regions(top):
    """top.run_top(), with the C++ autocast regions put back afterwards: a block the code opens
    changes them while it is evaluated (and a break inside it leaves the block open)."""
    from kiln.amp.autocast import regions_kept

    with regions_kept():
        return top.run_top()


def _without_capture(fn):
    """A backend's callable runs with the frame hook off: its own Python code is not captured."""

    def run(*args):
        previous = _C._capture.set_callback(None)
        try:
            return fn(*args)
        finally:
            _C._capture.set_callback(previous)

    return run


class Break:
    def __init__(self, inst, error, stack, locals_, lineno, resume_offset) -> None:
        self.inst = inst
        self.error = error
        self.stack = stack
        self.locals = locals_
        self.lineno = lineno
        self.resume_offset = resume_offset  # where native continuation starts
        self.kw_names = ()  # the KW_NAMES of a breaking CALL


class Return:
    def __init__(self, value) -> None:
        self.value = value


class TopFrame(Frame):
    """The captured frame itself: an Unsupported instruction becomes a graph break."""

    def run_top(self):
        outcome = self._run_top()
        values = [outcome.value] if isinstance(outcome, Return) else (
            list(outcome.stack) + list(outcome.locals.values()))
        made_at = _escaping_generator(values)
        if made_at is not None:  # break at the call that made it: it runs eagerly
            raise V.BreakAt(made_at, "a generator escapes the compiled frame (it would be run "
                            "to the end here)", "consume it inside (list(...), a for loop) or "
                            "create it outside")
        return outcome

    def _run_top(self):
        graph = self.ctx.graph
        break_at = getattr(self.ctx, "break_at", ())
        while True:
            inst = self.insts[self.ip]
            if inst.offset in break_at:
                return self._make_break(inst, V.Unsupported(*break_at[inst.offset]))
            snapshot = self._snapshot(graph)
            try:
                self.step(inst)
            except V.Unsupported as e:
                self._restore(snapshot, graph)
                return self._make_break(inst, e)
            if inst.opname == "RETURN_VALUE":
                return Return(self.return_value)

    def _snapshot(self, graph):
        return Snapshot(self), len(graph.nodes) - len(graph.inputs)

    def _restore(self, snapshot, graph):
        state, calls = snapshot
        state.restore(self)
        while len(graph.nodes) - len(graph.inputs) > calls:
            node = graph.nodes[-1]
            for user in list(node.users):
                graph._erase(user)
            graph._erase(node)

    def _make_break(self, inst, error):
        resume_offset = inst.offset
        if inst.opname == "CALL":  # resume at its PRECALL and KW_NAMES, which set it up
            i = self.index_of[inst.offset]
            if i >= 1 and self.insts[i - 1].opname == "PRECALL":
                i -= 1
                if i >= 1 and self.insts[i - 1].opname == "KW_NAMES":
                    i -= 1
            resume_offset = self.insts[i].offset
        i = self.index_of[resume_offset]
        while i >= 1 and self.insts[i - 1].opname == "EXTENDED_ARG":  # keep the arg's prefix
            i -= 1
        resume_offset = self.insts[i].offset
        outcome = Break(inst, error, list(self.stack), dict(self.locals), self.lineno,
                        resume_offset)
        outcome.kw_names = self.kw_names or ()
        after = self.index_of[inst.offset] + 1  # the instruction after the breaking one
        outcome.next_offset = self.insts[after].offset if after < len(self.insts) else None
        return outcome


def _escaping_generator(values):
    """The `made_at` offset of a generator's iterator reachable from `values`, or None."""
    seen: set = set()
    todo = list(values)
    while todo:
        v = todo.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, V.IteratorVar) and getattr(v, "made_at", None) is not None:
            return v.made_at
        if isinstance(v, (V.ListVar, V.TupleVar, V.IteratorVar)):
            todo += v.items
        elif isinstance(v, V.DictVar):
            todo += v.items.values()
        elif isinstance(v, V.CellVar) and v.contents is not None:
            todo.append(v.contents)
    return None


class BreakHandler:
    """Runs a graph break at run time, then continues the frame in a resume function."""

    def __init__(self, compiler, func, code, state, outcome) -> None:
        self.compiler = compiler
        self.func = func
        self.code = code
        self.state = state
        inst = outcome.inst
        self.inst = inst
        in_region = bytecode.in_loop(code, inst.offset) or bytecode.in_exception_region(
            code, inst.offset)
        self.mode = "native"
        if not in_region and inst.opname == "CALL":
            self.mode = "call"
            self.argc = inst.arg
            self.kw_names = outcome.kw_names
        elif not in_region and inst.opname.startswith(("POP_JUMP", "JUMP_IF")):
            self.mode = "jump"
        self.resume_offset = outcome.resume_offset
        self.next_offset = outcome.next_offset

    def __call__(self, func, stack, locals_, cells):
        if self.mode == "call":
            argc = self.argc
            args = stack[len(stack) - argc:]
            del stack[len(stack) - argc:]
            fn = stack.pop()
            head = stack.pop()
            if head is not codegen.NULL_MARK:
                args = [fn] + args
                fn = head
            kwargs = {}
            if self.kw_names:
                n = len(self.kw_names)
                kwargs = dict(zip(self.kw_names, args[len(args) - n:], strict=False))
                args = args[: len(args) - n]
            result = fn(*args, **kwargs)
            stack.append(result)
            return self._resume(func, self.next_offset, stack, locals_, cells, native=False)
        if self.mode == "jump":
            value = stack[-1]
            op = self.inst.opname
            if "NONE" in op:
                truth = value is None
                want = "NOT_NONE" not in op
            else:
                truth = bool(value)
                want = "TRUE" in op
            taken = truth == want
            if op.startswith("POP_JUMP") or not taken:
                stack.pop()
            offset = self.inst.argval if taken else self.next_offset
            return self._resume(func, offset, stack, locals_, cells, native=False)
        return self._resume(func, self.resume_offset, stack, locals_, cells, native=True)

    def _resume(self, func, offset, stack, locals_, cells, native):
        nulls = frozenset(i for i, v in enumerate(stack) if v is codegen.NULL_MARK)
        unbound = frozenset(n for n in self.code.co_varnames if n not in locals_ and n not in cells)
        key = (offset, len(stack), unbound, native, nulls)
        resume_code = self.state.resume_fns.get(key)
        if resume_code is None:
            # One resume function per key even when threads break here at once: each would be
            # a code object of its own, captured (and cached) separately.
            with self.state.lock:
                resume_code = self.state.resume_fns.get(key)
                if resume_code is None:
                    resume_code = self._make_resume_code(offset, len(stack), key[2], native,
                                                         nulls)
                    self.state.resume_fns[key] = resume_code
        # A new function per call: the running function's closure cells and globals.
        fn = types.FunctionType(resume_code, func.__globals__, resume_code.co_name, None,
                                func.__closure__)
        return fn(*bytecode.resume_args(self.code, locals_, cells, stack))

    def _make_resume_code(self, offset, nstack, unbound, native, nulls):
        _C._capture.skip_enter()  # our own helpers (dis namedtuples) are never captured
        try:
            resume_code = bytecode.make_resume_code(self.code, offset, nstack, unbound, nulls)
        finally:
            _C._capture.skip_exit()
        if native:
            _C._capture.mark_skip(resume_code)
        return resume_code


def _now(reason: str | None, args, code) -> str:
    """What an argument named by a failed guard is now (`L['x']: tensor f32[2, 3] ...` failed:
    ` (now: tensor float32[5, 3] strides (3, 1) requires_grad=True)`), so the log says what
    changed, not only what the capture expected; "" for other guards."""
    m = re.match(r"L\['([^']+)'\][:.]", reason or "")
    if m is None:
        return ""
    labels = _state_labels(code, len(args))
    if m.group(1) not in labels:
        return ""
    v = args[labels.index(m.group(1))]
    if isinstance(v, kiln.Tensor):
        what = (f"tensor {v.dtype}{list(v.shape)} strides {tuple(v.stride())} "
                f"requires_grad={v.requires_grad}")
    elif type(v).__name__ == "ndarray":
        what = f"ndarray {v.dtype}{list(v.shape)} strides {v.strides}"
    else:
        text = repr(v)
        what = f"{type(v).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
    return f" (now: {what})"


def _state_labels(code, n: int) -> list:
    names = list(code.co_varnames[:n])
    if code.co_name.startswith("__resume_at_") and n == len(code.co_varnames):
        names[-1] = "__kiln_resume"
    return names


def _path_of(source):
    """(root, path) of a source read from an argument, a global or a closure cell (a learning
    rate in `G['opt'].param_groups[0]['lr']` changes between calls as one in an argument does);
    None for other sources."""
    from kiln._capture.sources import ArgSource, AttrSource, ClosureSource, GlobalSource, ItemSource

    path = []
    while isinstance(source, (AttrSource, ItemSource)):
        path.append(("attr", source.attr) if isinstance(source, AttrSource) else
                    ("item", source.key))
        source = source.base
    if isinstance(source, ArgSource):
        root = source.index
    elif isinstance(source, GlobalSource):
        root = ("global", source.key)
    elif isinstance(source, ClosureSource):
        root = ("closure", source.index, source.label)
    else:
        return None
    return (root, tuple(reversed(path)))


def _is_tensor_or_array(value) -> bool:
    np = sys.modules.get("numpy")
    return isinstance(value, kiln.Tensor) or np is not None and type(value) is np.ndarray


def _fetch(func, args, root, path):
    try:
        if isinstance(root, int):
            value = args[root] if root < len(args) else None
        elif root[0] == "global":
            value = func.__globals__[root[1]]
        else:
            value = func.__closure__[root[1]].cell_contents
        for kind, key in path:
            value = getattr(value, key) if kind == "attr" else value[key]
    except Exception:
        return None
    return value


def _source_for(func, root, labels, path):
    from kiln._capture.sources import AttrSource, ClosureSource, GlobalSource, ItemSource

    if isinstance(root, int):
        source = ArgSource(root, labels[root])
    elif root[0] == "global":
        source = GlobalSource(root[1])
    else:
        source = ClosureSource(root[1], root[2])
    for kind, key in path:
        source = AttrSource(source, key) if kind == "attr" else ItemSource(source, key)
    return source

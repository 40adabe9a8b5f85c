"""kiln.export: one full graph of a function or module, as an exported program's `.kir` text.

The capture is kiln.compile's symbolic evaluator (convert_frame.Compiler) run once on the
example arguments, without the frame hook: nothing is installed in any code cache, and a graph
break is an error. Dynamic dimensions enter the capture as "changed between calls" dims of their
argument (the automatic-dynamic path), so they become symbols exactly as kiln.compile makes
them; afterwards the guards the program recorded on those symbols say whether it specialized
one (an error) or needs a narrower range than declared (an error suggesting the range).
"""

from __future__ import annotations

import inspect
import types

import kiln
from kiln._capture import codegen
from kiln._capture import variables as V
from kiln._capture.context import CaptureContext
from kiln._capture.convert_frame import (
    BreakRecord,
    CaptureError,
    CodeState,
    Compiler,
    TopFrame,
    _state_labels,
    autocast_at_entry,
    run_keeping_regions,
)
from kiln._capture.graph_build import ExportOptions, build_graph
from kiln._capture.sources import ArgSource, ClosureSource
from kiln._export.dim import Dim
from kiln._export.out_spec import OutSpecError, format_spec

__all__ = ["ExportError", "capture_program"]


class ExportError(ValueError):
    """The function cannot be exported as asked (a specialized Dim, an unsupported output)."""


class _ExportCompiler(Compiler):
    """Captures one frame and keeps the graph instead of installing a cache entry."""

    def __init__(self) -> None:
        super().__init__(backend="eager", fullgraph=True, dynamic=None)
        self.static = False
        self.result = None

    def _capture_once(self, func, args, code, state, labels, recompile_reason, static):
        """Compiler._capture_once without the code state updates
        (kiln.compile's automatic-dynamic history is not touched)."""
        self.static = static  # the capture gave up on symbolic shapes (RestartStatic)
        ctx = CaptureContext(f"{code.co_name}_0", labels, False if static else self.dynamic,
                            {} if static else state.auto_dynamic)
        ctx.break_at = state.__dict__.get("break_at", set())
        ctx.loop_nodes = False
        ctx.grad_enabled = kiln.is_grad_enabled()
        autocast_at_entry(ctx)
        locals_ = {}
        for i, value in enumerate(args):
            locals_[code.co_varnames[i]] = ctx.wrap(value, ArgSource(i, labels[i]))
        closure = None
        if code.co_freevars:
            closure = []
            for i, cell in enumerate(func.__closure__ or ()):
                source = ClosureSource(i, code.co_freevars[i])
                try:
                    contents = ctx.wrap(cell.cell_contents, source)
                except ValueError:
                    contents = None
                closure.append(V.CellVar(contents, source))
        top = TopFrame(ctx, code, func.__globals__, locals_, closure=closure)
        outcome = run_keeping_regions(top)
        return self._finish(func, code, state, ctx, top, outcome, recompile_reason)

    def _finish(self, func, code, state, ctx: CaptureContext, top, outcome, recompile_reason):
        if not hasattr(outcome, "value"):  # a Break
            record = BreakRecord(outcome.error.reason, outcome.error.hint, code.co_filename,
                                 outcome.lineno,
                                 reversed(outcome.error.__dict__.get("frames", ())))
            raise CaptureError(
                f"kiln.export: graph break: {outcome.error.reason}\n  "
                + record.where().replace("\n", "\n  ")
                + (f"\n  hint: {outcome.error.hint}" if outcome.error.hint else ""))
        outputs = codegen.tensors_in([outcome.value])
        ctx.graph.output([v.node for v in outputs])
        ctx.graph.erase_unused()
        self.result = (ctx, outcome.value, [v.node for v in outputs])


def _target(fn_or_module):
    """(function, bound self or None, the module whose parameters name the weights or None)."""
    obj = fn_or_module
    if isinstance(obj, kiln.nn.Module) and "_orig_mod" in obj._modules:  # kiln.compile(module)
        obj = obj._modules["_orig_mod"]
    obj = getattr(obj, "_kiln_original", obj)  # kiln.compile(fn)
    if isinstance(obj, kiln.nn.Module):
        forward = type(obj).forward
        return forward, obj, obj
    if isinstance(obj, types.MethodType) and isinstance(obj.__func__, types.FunctionType):
        owner = obj.__self__
        return obj.__func__, owner, owner if isinstance(owner, kiln.nn.Module) else None
    if isinstance(obj, types.FunctionType):
        return obj, None, None
    raise TypeError(f"kiln.export expects a function, method or kiln.nn.Module, got "
                    f"{type(fn_or_module).__name__}")


def _dims_by_name(dynamic_shapes, names: list[str], example_args) -> dict:
    """{argument name: {dim: Dim}} from torch.export's forms of `dynamic_shapes`."""
    if dynamic_shapes is None:
        return {}
    if isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) != len(names):
            raise ValueError(f"kiln.export: dynamic_shapes has {len(dynamic_shapes)} entries for "
                             f"{len(names)} arguments ({', '.join(names)})")
        dynamic_shapes = dict(zip(names, dynamic_shapes, strict=True))
    if not isinstance(dynamic_shapes, dict):
        raise TypeError("kiln.export: dynamic_shapes must be a dict (argument name -> {dim: Dim}),"
                        " a tuple/list in argument order, or None")
    out = {}
    for name, spec in dynamic_shapes.items():
        if name not in names:
            raise ValueError(f"kiln.export: dynamic_shapes names {name!r}, which is not an "
                             f"argument (arguments: {', '.join(names)})")
        if spec is None:
            continue
        value = example_args[names.index(name)]
        if not isinstance(value, kiln.Tensor):
            raise ValueError(f"kiln.export: dynamic_shapes gives dims for {name!r}, which is a "
                             f"{type(value).__name__}, not a tensor")
        if isinstance(spec, (tuple, list)):
            spec = {d: s for d, s in enumerate(spec) if s is not None}
        if not isinstance(spec, dict):
            raise TypeError(f"kiln.export: dynamic_shapes[{name!r}] must map dims to kiln.Dim")
        dims = {}
        for d, dim in spec.items():
            if not isinstance(dim, Dim):
                raise TypeError(f"kiln.export: dynamic_shapes[{name!r}][{d}] must be a kiln.Dim, "
                                f"got {type(dim).__name__}")
            if type(d) is not int or not -value.dim() <= d < value.dim():
                raise ValueError(f"kiln.export: dim {d} of {name!r} is out of range for a "
                                 f"{value.dim()}-d tensor")
            d %= value.dim()
            size = value.shape[d]
            if not dim.contains(size):
                raise ValueError(f"kiln.export: example input {name!r} has size {size} at dim "
                                 f"{d}, outside {dim.name}'s range {dim.range_text()}")
            dims[d] = dim
        out[name] = dims
    return out


def _bind(func, bound_self, example_args) -> list:
    code = func.__code__
    if code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
        raise TypeError(f"kiln.export: {func.__qualname__} takes *args or **kwargs; export a "
                        "function with named parameters")
    full = ((bound_self,) if bound_self is not None else ()) + tuple(example_args)
    try:
        bound = inspect.signature(func).bind(*full)
    except TypeError as e:
        raise TypeError(f"kiln.export: example_args do not fit {func.__qualname__}: {e}") from None
    bound.apply_defaults()
    return [bound.arguments[n] for n in code.co_varnames[: code.co_argcount
                                                         + code.co_kwonlyargcount]]


def capture_program(fn_or_module, example_args, dynamic_shapes=None):
    """(graph_text, weights {key: contiguous tensor}, program name) of one full capture."""
    if not isinstance(example_args, tuple):
        raise TypeError(f"kiln.export: example_args must be a tuple of positional arguments, got "
                        f"{type(example_args).__name__}")
    for i, a in enumerate(example_args):
        if not isinstance(a, (kiln.Tensor, int, float, bool)):
            raise TypeError(f"kiln.export: example argument {i} is a {type(a).__name__}; "
                            "arguments must be tensors or Python numbers")
    func, bound_self, module = _target(fn_or_module)
    args = _bind(func, bound_self, example_args)
    code = func.__code__
    first = 1 if bound_self is not None else 0
    names = list(code.co_varnames[first : first + len(example_args)])
    dims = _dims_by_name(dynamic_shapes, names, example_args)
    labels = _state_labels(code, len(args))
    state = CodeState()
    for name, by_dim in dims.items():
        i = first + names.index(name)
        state.auto_dynamic[ArgSource(i, labels[i])] = set(by_dim)
    compiler = _ExportCompiler()
    try:
        compiler.capture(func, args, code, state, None)
    except CaptureError as e:
        raise CaptureError(str(e).replace("kiln.compile(fullgraph=True)", "kiln.export")) from None
    ctx, value, outputs = compiler.result
    symbols, ranges = _symbols(ctx, compiler.static, dims, names, first, labels)
    options = ExportOptions(symbols=symbols, ranges=ranges)
    weights = _weights(ctx, module, options, labels, first, len(example_args))
    index = {id(n): k for k, n in enumerate(outputs)}
    try:
        options.out_spec = format_spec(value, lambda node: index[id(node)])
    except OutSpecError as e:
        raise ExportError(f"kiln.export: {e}") from None
    name = type(module).__name__ if module is not None else func.__name__
    ctx.graph.name = name
    try:
        built = build_graph(ctx.graph, options)
    except ValueError as e:
        raise ExportError(f"kiln.export: the captured graph cannot be written as a program: "
                          f"{e}") from None
    # Everything must compile without Python: an op built as an opaque `call` (or any other
    # node the compiler declines) is an error now, not when the program is loaded or compiled.
    ok, _, reason = kiln._C._compiler.can_lower(built, f"{name}.kir")
    if not ok:
        raise ExportError(f"kiln.export: the program cannot run without Python: {reason}")
    return built.text(), weights, name


def _symbols(ctx, static: bool, dims: dict, names, first: int, labels):
    """The symbol renames and ranges of the declared Dims; errors where the program
    specialized a Dim or needs a narrower range than declared."""
    checks = ctx.guards._sym_checks  # (kind, symbol index, constant) -> text
    symbols: dict = {}
    ranges: list = []
    seen: dict = {}
    for name, by_dim in dims.items():
        i = first + names.index(name)
        for d, dim in sorted(by_dim.items()):
            sym = None if static else ctx.sym_by_source.get((ArgSource(i, labels[i]), d))
            where = f"input {name!r} dim {d} (Dim {dim.name!r})"
            if sym is None:
                raise ExportError(f"kiln.export: {where} was specialized to a constant by the "
                                  "program (it uses the size as a fixed number, e.g. in a Python "
                                  "branch or a comparison); mark it static or remove the Dim")
            for kind, s, c in checks:
                if s != sym:
                    continue
                if kind == "eq_const":
                    raise ExportError(f"kiln.export: {where} was specialized to {c} by the "
                                      f"program ({checks[(kind, s, c)]})")
                if kind == "ge_const" and c > dim.min:
                    raise ExportError(f"kiln.export: {where}: the program needs size >= {c}, "
                                      f"but the Dim allows {dim.range_text()}; use "
                                      f"kiln.Dim({dim.name!r}, min={c}, max={dim.max})")
                if kind == "le_const" and (dim.max is None or c < dim.max):
                    raise ExportError(f"kiln.export: {where}: the program needs size <= {c}, "
                                      f"but the Dim allows {dim.range_text()}; use "
                                      f"kiln.Dim({dim.name!r}, min={dim.min}, max={c})")
            other = seen.get(dim.name)
            if other is not None and other is not dim:
                raise ExportError(f"kiln.export: two different Dims are named {dim.name!r}")
            if other is None:
                seen[dim.name] = dim
                ranges.append((dim.name, dim.min, -1 if dim.max is None else dim.max))
            symbols[ctx.symbols[sym][0]] = dim.name
    return symbols, ranges


def _weights(ctx, module, options: ExportOptions, labels, first: int, n_args: int) -> dict:
    """Fills `options` with parameter names and weight keys; returns the weights by key."""
    by_id: dict = {}
    if module is not None:
        for key, t in list(module.named_parameters()) + list(module.named_buffers()):
            by_id.setdefault(id(t), key)
    weights: dict = {}
    constants = 0
    for node, source, baked in zip(ctx.graph.inputs, ctx.input_sources, ctx.input_baked,
                                   strict=True):
        user_arg = (isinstance(source, ArgSource) and baked is None
                    and first <= source.index < first + n_args)
        if user_arg:
            options.input_names[id(node)] = labels[source.index]
            continue
        # A parameter, buffer, global or closure tensor: its value now becomes a weight.
        baked = node.meta.get("example") if baked is None else baked
        if not isinstance(baked, kiln.Tensor):
            raise ExportError(f"kiln.export: the graph reads {node.name} ({source}), a "
                              f"{type(baked).__name__} that is not an argument; only tensors "
                              "can be baked into a program")
        key = by_id.get(id(baked))
        if key is None:
            key = f"_constant{constants}"
            constants += 1
        options.weights[id(node)] = key
        weights[key] = baked.detach().contiguous()
    return weights

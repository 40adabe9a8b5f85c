"""Entries: the Python callables a cache hit runs.

An entry fetches the graph inputs from the frame state (or holds them: parameters of baked
modules), runs the compiled graph, and rebuilds the frame's Python-level result from the graph
outputs: the return value, or at a graph break the stack and locals that the break handler
needs. The entry is generated as Python source so a cache hit costs one call per level, not an
interpreter loop.
"""

from __future__ import annotations

import keyword
import types

from kiln._capture import calls_object, side_effects
from kiln._capture import variables as V
from kiln._capture.sources import KEY_OBJECTS


class _Builder:
    def __init__(self, ctx, outputs_index: dict) -> None:
        self.ctx = ctx
        self.index = outputs_index  # id(node) -> output position
        self.namespace: dict = {}
        self.lines: list = []
        self.cells: dict = {}
        self.objects: dict = {}  # id(NewObjectVar) -> the local holding the built object
        self.arg_names = [f"a{i}" for i in range(len(ctx.state_labels))]

    def const(self, value) -> str:
        if type(value) in (int, float, bool, str) or value is None:
            if type(value) is float and (value != value or value in (float("inf"), -float("inf"))):
                pass
            else:
                return repr(value)
        name = f"_c{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def expr(self, v: V.VT) -> str:
        if isinstance(v, V.TensorVar) and v.numpy:
            array_source = getattr(v, "array_source", None)
            if array_source is not None:  # the caller's array itself (written in place)
                e = array_source.expr(self.arg_names)
                if e is not None:
                    return e
            if id(v.node) in self.index:
                return f"_np_out(_o[{self.index[id(v.node)]}])"
        if isinstance(v, (V.TensorVar, V.SymIntVar, V.RunIntVar)):
            if id(v.node) in self.index:
                return f"_o[{self.index[id(v.node)]}]"
            raise AssertionError(f"{v} is not a graph output")
        source = getattr(v, "source", None)
        if getattr(v, "origin", None) is not None:  # a list/dict from outside (changes replayed)
            return self.const(v.origin)
        if source is not None and not isinstance(source, tuple):
            e = source.expr(self.arg_names)
            if e is not None and isinstance(v, (V.ListVar, V.DictVar, V.ObjectVar, V.ModuleVar,
                                                V.FunctionVar, V.TupleVar)):
                return e
        if isinstance(v, V.ConstVar):
            return self.const(v.value)
        if isinstance(v, V.NullVar):
            return "_NULL"
        if isinstance(v, V.ListVar):
            return self.shared(v, lambda: "[" + ", ".join(self.expr(i) for i in v.items) + "]")
        if isinstance(v, V.TupleVar):
            inner = ", ".join(self.expr(i) for i in v.items)
            if v.tuple_type is tuple:
                return f"({inner}{',' if len(v.items) == 1 else ''})"
            return f"{self.const(v.tuple_type)}({inner})" if hasattr(v.tuple_type, "_fields") \
                else f"{self.const(v.tuple_type)}(({inner}{',' if len(v.items) == 1 else ''}))"
        if isinstance(v, V.DictVar):
            def literal():
                text = "{" + ", ".join(f"{self.const(k)}: {self.expr(x)}"
                                       for k, x in v.items.items()) + "}"  # fmt: skip
                # a dict subclass (an OrderedDict) is rebuilt as one
                return text if v.dict_type is dict else f"{self.const(v.dict_type)}({text})"

            return self.shared(v, literal)
        if isinstance(v, V.SliceVar):
            return f"slice({self.expr(v.start)}, {self.expr(v.stop)}, {self.expr(v.step)})"
        if isinstance(v, V.ObjectVar):
            return self.const(v.value)
        if isinstance(v, V.ModuleVar):
            return self.const(v.module)
        if isinstance(v, V.FunctionVar):
            return self.const(v.fn)
        if isinstance(v, V.BoundMethodVar):
            return f"_MethodType({self.expr(v.fn)}, {self.expr(v.self_var)})"
        if isinstance(v, V.TensorAttrVar):
            return f"{self.expr(v.tensor)}.{v.name}"
        from kiln._capture.calls_access import _ContainerMethod
        from kiln._capture.calls_numpy import NumpyCallVar

        if isinstance(v, _ContainerMethod):
            return f"{self.expr(v.obj)}.{v.name}"
        if isinstance(v, NumpyCallVar):  # `a.sum` about to be called at the break
            return f"{self.expr(v.self_var)}.{v.name}"
        if isinstance(v, V.PartialVar):
            args = "".join(f", {self.expr(a)}" for a in v.args)
            kw = "".join(f", {k}={self.expr(x)}" for k, x in v.kwargs.items())
            return f"_partial({self.expr(v.fn)}{args}{kw})"
        if isinstance(v, V.IteratorVar):
            rest = v.items[v.pos:]
            return "iter([" + ", ".join(self.expr(i) for i in rest) + "])"
        if isinstance(v, V.CellVar):
            return self.cell(v)
        if isinstance(v, V.NewObjectVar):
            return self.new_object(v)
        if isinstance(v, V.NestedFunctionVar):
            defaults = self.expr(v.defaults) if v.defaults is not None else "None"
            closure = "None"
            if v.closure is not None:
                closure = "(" + "".join(self.cell(c) + ", " for c in v.closure) + ")"
            fn = (f"_FunctionType({self.const(v.code)}, {self.const(v.globals)}, "
                  f"{v.name!r}, {defaults}, {closure})")
            if v.kwdefaults is not None:
                fn = f"_with_kwdefaults({fn}, {self.expr(v.kwdefaults)})"
            return fn
        if isinstance(v, V.GradModeExitVar):
            return f"_grad_exit({v.previous!r})"
        if isinstance(v, V.AutocastExitVar):
            return f"_autocast_exit({v.device!r}, {v.previous[0]!r}, {self.const(v.previous[1])})"
        if isinstance(v, V.GradModeVar):
            return f"_grad_mode({v.enabled!r})"
        raise V.Unsupported(f"cannot rebuild a {type(v).__name__} after a graph break")

    def cell(self, c: V.CellVar) -> str:
        if id(c) not in self.cells:
            name = f"_cell{len(self.cells)}"
            self.cells[id(c)] = name
            src = c.source if c.source is not None and not isinstance(c.source, tuple) else None
            existing = src.expr(self.arg_names) if src is not None else None
            if existing is not None:  # a cell of the running frame: keep its identity
                self.lines.append(f"    {name} = {existing}")
            else:
                contents = "" if c.contents is None else self.expr(c.contents)
                self.lines.append(f"    {name} = _CellType({contents})")
        return self.cells[id(c)]

    def shared(self, v, build) -> str:
        """A list or dict made during the capture, built once per entry call however often it
        is referenced, so identity holds (`E` in the locals and `E.append` on the stack at a
        break are one list: appends through either land in it)."""
        if id(v) not in self.objects:
            text = build()
            name = f"_obj{len(self.objects)}"
            self.objects[id(v)] = name
            self.lines.append(f"    {name} = {text}")
        return self.objects[id(v)]

    def new_object(self, v: V.NewObjectVar) -> str:
        """An object created during the capture, built once per entry call (however often it
        is referenced, so identity holds): object.__new__, then its final attributes (named
        before they are set, so an attribute may refer back to the object)."""
        if id(v) not in self.objects:
            name = f"_obj{len(self.objects)}"
            self.objects[id(v)] = name
            if v.mapping is None:
                self.lines.append(f"    {name} = _object_new({self.const(v.cls)})")
            else:  # a dict subclass: made empty by its dict base, its items set through it
                base = self.const(calls_object.mapping_base(v.cls))
                self.lines.append(f"    {name} = {base}.__new__({self.const(v.cls)})")
                for key, value in v.mapping.items.items():
                    self.lines.append(
                        f"    {base}.__setitem__({name}, {self.const(key)}, {self.expr(value)})")
            hooked = v.cls.__setattr__ is not object.__setattr__
            for attr, value in v.attrs.items():
                e = self.expr(value)
                plain = attr.isidentifier() and not keyword.iskeyword(attr)
                if hooked:  # the attributes as they are, not through the class's __setattr__
                    self.lines.append(f"    _object_setattr({name}, {attr!r}, {e})")
                else:
                    self.lines.append(f"    {name}.{attr} = {e}" if plain
                                      else f"    setattr({name}, {attr!r}, {e})")
        return self.objects[id(v)]


def tensors_in(values) -> list:
    """Distinct TensorVar/SymIntVar/RunIntVar reachable from variables, in first-seen order."""
    from kiln._capture.calls_numpy import NumpyCallVar

    found: dict = {}
    seen: set = set()

    def visit(v):
        if id(v) in seen:
            return
        seen.add(id(v))
        if isinstance(v, (V.TensorVar, V.SymIntVar, V.RunIntVar)):
            found.setdefault(id(v.node), v)
        elif isinstance(v, (V.ListVar, V.TupleVar)):
            for i in v.items:
                visit(i)
        elif isinstance(v, V.DictVar):
            for i in v.items.values():
                visit(i)
        elif isinstance(v, V.SliceVar):
            visit(v.start), visit(v.stop), visit(v.step)
        elif isinstance(v, V.IteratorVar):
            for i in v.items[v.pos:]:
                visit(i)
        elif isinstance(v, V.CellVar) and v.contents is not None:
            visit(v.contents)
        elif isinstance(v, V.NewObjectVar):
            for i in v.attrs.values():
                visit(i)
            if v.mapping is not None:
                visit(v.mapping)
        elif isinstance(v, V.BoundMethodVar):
            visit(v.fn), visit(v.self_var)
        elif isinstance(v, V.PartialVar):
            visit(v.fn)
            for a in v.args:
                visit(a)
            for a in v.kwargs.values():
                visit(a)
        elif isinstance(v, V.TensorAttrVar):
            visit(v.tensor)
        elif isinstance(v, NumpyCallVar):  # `a.sum` on the stack at a break
            visit(v.self_var)
        elif isinstance(v, V.NestedFunctionVar):
            for c in v.closure or ():
                visit(c)
            if v.defaults is not None:
                visit(v.defaults)
            if v.kwdefaults is not None:
                visit(v.kwdefaults)

    for v in values:
        visit(v)
    return list(found.values())


def _access_prefixes(expr: str) -> list[str]:
    """The strict prefixes of an attribute/item chain (`a.b[0].c` -> `a`, `a.b`, `a.b[0]`), cut
    before each `.` or `[` outside brackets and string literals; none for an expression with a
    call (evaluating it once instead of at each use could change what it does)."""
    if "(" in expr:
        return []
    out, depth, quote, k = [], 0, None, 0
    while k < len(expr):
        c = expr[k]
        if quote:
            if c == "\\":
                k += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "[":
            if depth == 0 and k:
                out.append(expr[:k])
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "." and depth == 0 and k:
            out.append(expr[:k])
        k += 1
    return out


def hoist_shared_prefixes(exprs: list, fresh) -> tuple[list[str], list]:
    """Lines that read each access chain shared by several of `exprs` once into a local (the
    parameters of an optimizer step: ``opt.param_groups[0]['params']`` once, then each
    ``_s[i]`` for the parameter and its ``.grad``), and `exprs` rewritten to use them. A chain
    is hoisted when it is the longest one read by its set of expressions. `fresh()` names a
    local; None entries stay None."""
    uses: dict[str, int] = {}
    for e in exprs:
        if e is not None:
            for prefix in {*_access_prefixes(e), e}:
                uses[prefix] = uses.get(prefix, 0) + 1
    shared = [p for p, n in uses.items() if n > 1 and ("." in p or "[" in p)]
    # The longest chain for each count: a shorter one read by exactly the same expressions
    # would be evaluated once more for nothing.
    def longest(p: str) -> bool:
        return not any(q != p and q.startswith(p) and uses[q] == uses[p] for q in shared)

    hoisted = sorted(filter(longest, shared), key=len)
    lines, local = [], {}

    def rewrite(e: str) -> str:
        for p in sorted(local, key=len, reverse=True):
            if e == p:
                return local[p]
            if e.startswith(p) and e[len(p)] in ".[":
                return local[p] + e[len(p):]
        return e

    for p in hoisted:
        name = fresh()
        lines.append(f"    {name} = {rewrite(p)}")
        local[p] = name
    return lines, [None if e is None else rewrite(e) for e in exprs]


def make_entry(ctx, graph_fn, output_vars, body: str, result_vars: dict, extra_ns: dict):
    """Builds `entry(func, *state)`. `body` is a format string using `{name}` for each rebuilt
    variable in `result_vars` (name -> VT), or a function of the dict name -> expression; the
    code it gives must `return` the frame's result."""
    index = {id(v.node): i for i, v in enumerate(output_vars)}
    b = _Builder(ctx, index)
    exprs = {name: b.expr(v) for name, v in result_vars.items()}
    inputs, arrays = [], []
    reads = [source.expr(b.arg_names) if source is not None else None
             for source in ctx.input_sources]  # fmt: skip
    counter = iter(range(len(reads)))
    hoisted, reads = hoist_shared_prefixes(reads, lambda: f"_s{next(counter)}")
    for i, e in enumerate(reads):
        if e is not None and i in ctx.input_numpy:
            arrays.append((len(inputs), e))
            e = f"_np_in({e})"
        elif e is not None and any(k == i for k, _, _ in ctx.input_contiguous):
            e = f"({e}).contiguous()"  # its strides vary between calls (guards skip them)
        inputs.append(e if e is not None else b.const(ctx.input_baked[i]))
    params = "".join(", " + a for a in b.arg_names)
    lines = [f"def entry(_func{params}):", *hoisted]  # the hook passes the function first
    if len(arrays) > 1:  # arrays that may be views of one buffer: converted together
        lines.append(f"    _arrays = _np_in_all({', '.join(e for _, e in arrays)})")
        for k, (pos, _) in enumerate(arrays):
            inputs[pos] = f"_arrays[{k}]"
    lines.append(f"    _o = _graph({', '.join(inputs)}{',' if len(inputs) == 1 else ''})")
    replay = side_effects.replay_lines(b, ctx)  # after the graph, before the frame goes on
    lines += b.lines + replay
    text = body(exprs) if callable(body) else body.format(**exprs)
    for line in text.splitlines():
        lines.append("    " + line)
    namespace = dict(b.namespace)
    namespace.update(
        _graph=graph_fn, _MethodType=types.MethodType, _FunctionType=types.FunctionType,
        _CellType=types.CellType, _partial=__import__("functools").partial,
        _with_kwdefaults=_with_kwdefaults, _grad_exit=_grad_exit, _grad_mode=_grad_mode,
        _autocast_exit=_AutocastExit,
        _NULL=NULL_MARK, _object_new=object.__new__, _object_setattr=object.__setattr__,
    )
    namespace.update(side_effects.ENTRY_NAMESPACE, _keys=KEY_OBJECTS)
    namespace.update(extra_ns)
    source = "\n".join(lines) + "\n"
    if "_np_in" in source or "_np_out(" in source:
        from kiln import _numpy

        namespace.update(_np_in=_numpy.to_tensor, _np_in_all=_numpy.to_tensors,
                         _np_out=_numpy.to_ndarray)
    exec(compile(source, f"<kiln-entry {ctx.graph.name}>", "exec"), namespace)
    entry = namespace["entry"]
    entry.kiln_source = source
    return entry


class _NullMark:
    def __repr__(self) -> str:
        return "<NULL>"


NULL_MARK = _NullMark()


def _with_kwdefaults(fn, kwdefaults):
    fn.__kwdefaults__ = kwdefaults
    return fn


class _GradExit:
    def __init__(self, previous: bool) -> None:
        self.previous = previous

    def __call__(self, *exc) -> None:
        from kiln import _grad_mode

        _grad_mode._set_grad_enabled(self.previous)


class _AutocastExit:
    """The `__exit__` of an autocast block a graph break left open: restores the region."""

    def __init__(self, device: str, enabled: bool, dtype) -> None:
        self.device, self.enabled, self.dtype = device, enabled, dtype

    def __call__(self, *exc) -> None:
        from kiln import _C

        _C._autograd._set_autocast_region(self.device, self.enabled, self.dtype)


class InRegions:
    """A node's callable run inside the autocast regions that a block of the compiled code had
    open where it was captured: at run time the regions are the caller's, and an op that runs
    eagerly (an opaque call, a part's eager fallback) casts by them."""

    __module__ = "kiln.compiled"

    def __init__(self, fn, regions: dict) -> None:
        self.fn, self.regions = fn, regions
        self.__name__ = self.__qualname__ = getattr(fn, "__name__", "call")

    def __call__(self, *args, **kwargs):
        from kiln.amp.autocast import regions_kept, set_regions

        with regions_kept():
            set_regions(self.regions)
            return self.fn(*args, **kwargs)


def eager_target(node):
    """The callable that runs `node` eagerly: its target, inside the regions of an autocast block
    the code opened around it (ops.record notes them)."""
    regions = node.meta.get("autocast_block")
    return node.target if regions is None else InRegions(node.target, regions)


def _grad_exit(previous):
    return _GradExit(previous)


def _grad_mode(enabled):
    import kiln

    return kiln.enable_grad() if enabled else kiln.no_grad()

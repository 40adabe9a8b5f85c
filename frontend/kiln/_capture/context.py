"""State shared by every frame of one capture: the graph, its inputs, guards and symbols.

`CaptureContext.wrap` turns a real Python value read from the frame (an argument, a global, an
attribute) into a variable and records the guards that make the capture valid for the next call;
`CaptureContext.call_op` records one tensor op in the graph and computes its example result.
"""

from __future__ import annotations

import collections
import re
import sys
import types
import weakref

import kiln
from kiln._capture import variables as V
from kiln._capture.data_dependent import check_size_read
from kiln._capture.graph import Graph, nodes_in, sym_size
from kiln._capture.graph_build import Val
from kiln._capture.guards import GuardSet
from kiln._capture.sources import ArgSource, AttrSource, BakedSource, ItemSource, root_of

_dynamic_marks: dict = {}  # id(tensor) -> (weakref, {dim: True (dynamic) | False (static)})


def mark_dynamic(t, dim) -> None:
    """Treat `t.size(dim)` as symbolic: one compiled graph serves every size of that dim."""
    _mark(t, dim, True)


def mark_static(t, dim) -> None:
    """Keep `t.size(dim)` static even when `dynamic=True` or automatic dynamic would not."""
    _mark(t, dim, False)


def _mark(t, dims, value: bool) -> None:
    if not isinstance(t, kiln.Tensor):
        raise TypeError(f"mark_dynamic/mark_static expect a kiln.Tensor, got {type(t).__name__}")
    dims = [dims] if isinstance(dims, int) else list(dims)
    entry = _dynamic_marks.get(id(t))
    if entry is None or entry[0]() is not t:
        entry = (weakref.ref(t), {})
        _dynamic_marks[id(t)] = entry
    for d in dims:
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"mark_dynamic: dim {d} out of range for a {t.dim()}-d tensor")
        entry[1][d % t.dim()] = value


def marks_of(t) -> dict:
    entry = _dynamic_marks.get(id(t))
    if entry is None or entry[0]() is not t:
        return {}
    return entry[1]


def _is_namedtuple(t) -> bool:
    return issubclass(t, tuple) and hasattr(t, "_fields")


# NumPy scalar types whose arguments go symbolic when their value changes, as ints and floats do
NUMPY_NUMBER_NAMES = ("float64", "float32", "int64", "int32")
_CONST_TYPES = (int, float, bool, str, bytes, complex, type(None), type(Ellipsis), range)


class CaptureContext:
    """One capture of one segment of one frame."""

    def __init__(self, name: str, state_labels, dynamic, auto_dynamic: dict) -> None:
        self.graph = Graph(name)
        self.guards = GuardSet()
        self.state_labels = list(state_labels)
        self.dynamic = dynamic  # True, False or None (automatic)
        self.auto_dynamic = auto_dynamic  # source -> set of dims that changed between captures
        self.input_sources: list = []  # per graph input: its source (re-read at run time)
        self.input_baked: list = []  # per graph input: the baked value when the source is baked
        self.input_numpy: set = set()  # indices of graph inputs read as NumPy arrays
        self._arrays: list = []  # (ndarray, its tensor): kept alive while the capture runs
        self.seen_sizes: dict = {}  # source -> sizes, recorded for automatic dynamic
        self.seen_strides: dict = {}  # source -> strides, likewise
        # graph inputs made contiguous by the entry (their strides changed between calls, as a
        # decode loop's x[:, -1:] does): (input index, variable, the contiguous example)
        self.input_contiguous: list = []
        self.seen_scalars: dict = {}  # source -> int/float value, for automatic dynamic
        self.input_by_id: dict = {}
        self.symbols: list = []  # (name, hint)
        self.sym_by_source: dict = {}
        self.undo: list = []
        self._containers: dict = {}  # id(list or dict) -> (its variable, the object)
        self.modules_seen: dict = {}
        self.loc = None  # (filename, lineno) of the user's line being evaluated
        self.caller_loc = None  # the line that called the captured code (symbolic.caller_loc)
        self.static_only = dynamic is False
        self.loop_nodes = True  # export unrolls instead: a .kir program has no loop node
        self.autocast: dict = {}  # device type -> dtype of each enabled autocast region
        self.entry_autocast: dict = {}  # the regions open when the captured code was called
        self._typed_upto = 0  # graph.nodes before this index were given to shape inference
        self._int_syms: dict = {}  # id(int node) -> its SymInt text, as the .kir writer spells it

    # -- wrapping real values ------------------------------------------------------------
    def wrap(self, value, source, label: str | None = None) -> V.VT:
        """`label` names values reached through baked modules (`self.fc1.weight`)."""
        if isinstance(value, kiln.Tensor):
            return self._wrap_tensor(value, source, label)
        np = sys.modules.get("numpy")
        if np is not None:
            if type(value) is np.ndarray:
                return self._wrap_ndarray(value, source, label)
            if isinstance(value, np.generic):  # a NumPy scalar: a typed constant
                if source is not None and source.guardable() and (
                        type(value).__name__ in NUMPY_NUMBER_NAMES):
                    self.seen_scalars[source] = value  # for automatic dynamic
                    if self._int_is_dynamic(source) and source.expr(self.state_labels):
                        return self._wrap_numpy_scalar(value, source)
                if source is not None:
                    self.guards.type(source, value)
                    self.guards.equals(source, value)
                return V.ConstVar(value, source)
            if isinstance(value, np.dtype):
                if source is not None:
                    self.guards.equals(source, value)
                return V.ConstVar(value, source)
        if isinstance(value, bool) or type(value) in _CONST_TYPES:
            if source is not None:
                if type(value) in (int, float) and source.guardable():
                    self.seen_scalars[source] = value  # for automatic dynamic
                    if self._int_is_dynamic(source):
                        return self._wrap_sym_int(value, source)
                self.guards.equals(source, value)
            return V.ConstVar(value, source)
        if isinstance(value, (kiln.dtype, kiln.device)):
            if source is not None:
                self.guards.equals(source, value)
            return V.ConstVar(value, source)
        if type(value) in (list, dict, collections.OrderedDict):
            known = self._containers.get(id(value))
            if known is not None:  # one variable per object: changes through it are seen
                var = known[0]
                if source is not None and source != var.source:
                    self.guards.id(source, value)  # the aliasing holds on the next call
                    if var.source is not None:
                        self.guards.id(var.source, value)
                return var
        if type(value) in (tuple, list, kiln.Size) or (
            isinstance(value, tuple) and _is_namedtuple(type(value))
        ):
            if source is not None:
                self.guards.type(source, value)
                self.guards.length(source, len(value))
            items = list(self._wrap_items(value, source, enumerate(value)).values())
            if isinstance(value, list):
                return self._known(_with_origin(V.ListVar(items, source), value), value)
            return V.TupleVar(items, source, type(value))
        if type(value) in (dict, collections.OrderedDict):  # OrderedDict: Module._modules
            if source is not None:
                self.guards.type(source, value)
                self.guards.dict_keys(source, value.keys())
            if not all(_plain_key(k) for k in value):
                raise V.Unsupported("a dict whose keys are not str, int, types or modules")
            items = self._wrap_items(value, source, value.items())
            return self._known(_with_origin(V.DictVar(items, source, type(value)), value), value)
        if isinstance(value, kiln.nn.Module):
            return self._wrap_module(value, source, label)
        if isinstance(value, types.FunctionType):
            if source is not None:
                if value.__closure__ is not None or "<locals>" in value.__qualname__:
                    # A function made at run time (a new object per call): its code decides,
                    # its defaults and closure contents are guarded where inlining reads them.
                    self.guards.id(AttrSource(source, "__code__"), value.__code__)
                else:
                    self.guards.id(source, value)
            return V.FunctionVar(value, source)
        if isinstance(value, types.MethodType):
            if source is not None:
                self.guards.id(AttrSource(source, "__func__"), value.__func__)
            fn_source = AttrSource(source, "__func__") if source is not None else None
            self_source = AttrSource(source, "__self__") if source is not None else None
            return V.BoundMethodVar(
                self.wrap(value.__func__, fn_source), self.wrap(value.__self__, self_source)
            )
        import functools

        if type(value) is functools.partial:
            if source is not None:
                self.guards.type(source, value)
            fn = self.wrap(value.func, AttrSource(source, "func") if source is not None else None)
            args = [self.wrap(a, None) for a in value.args]
            kwargs = {k: self.wrap(v, None) for k, v in value.keywords.items()}
            if source is not None:
                self.guards.equals(AttrSource(source, "args"), value.args) if all(
                    type(a) in _CONST_TYPES for a in value.args
                ) else self.guards.id(source, value)
            return V.PartialVar(fn, args, kwargs, source)
        # Modules, classes, builtins and other objects: tracked by identity.
        if source is not None:
            owner = getattr(value, "__self__", None)
            if _is_bound_builtin(value) and np is not None and isinstance(owner, np.ufunc):
                # `np.add.reduce` passed in: a new object per access; its ufunc and method
                # name decide what it computes
                self.guards.id(AttrSource(source, "__self__"), owner)
                self.guards.equals(AttrSource(source, "__name__"), value.__name__)
            elif _is_bound_builtin(value):
                pass  # `obj.method` of a C type: a new object per access, fixed by type(obj)
            elif np is not None and callable(value) and (
                type(value).__module__ or ""
            ).startswith("numpy"):
                self.guards.id(source, value)  # a ufunc or NumPy function: which one decides
            elif callable(value) and not isinstance(value, (type, types.BuiltinFunctionType)) and (
                type(value).__module__ not in ("builtins", "functools", "operator")
            ):
                self.guards.type(source, value)  # an instance with __call__: opaque, by type
            elif isinstance(value, (types.ModuleType, type, types.BuiltinFunctionType)) or (
                callable(value)
            ):
                self.guards.id(source, value)
            else:
                self.guards.type(source, value)
        return V.ObjectVar(value, source)

    def _known(self, var, value):
        self._containers[id(value)] = (var, value)  # the value is kept alive with its id
        return var

    def _wrap_items(self, container, source, pairs) -> dict:
        """Wraps the items of a list, tuple or dict; one that contains itself is Unsupported
        (e.g. the dict `locals()` returns inside a resume function holds the frame state)."""
        open_ = self.__dict__.setdefault("_open_containers", set())
        if id(container) in open_:
            raise V.Unsupported("a container that contains itself")
        open_.add(id(container))
        try:
            return {k: self.wrap(v, ItemSource(source, k) if source is not None else None)
                    for k, v in pairs}
        finally:
            open_.discard(id(container))

    def _wrap_module(self, module, source, label=None) -> V.VT:
        if source is not None:
            self.guards.id(source, module)
        self.watch_module(module)
        if label is None:
            label = source.name() if source is not None else type(module).__name__
            label = label.replace("L['", "").replace("G['", "").replace("']", "")
        return V.ModuleVar(module, source, label)

    def watch_module(self, module) -> None:
        """Guard the module's attribute version: any attribute assignment (including train())
        bumps it, so parameters, submodules and Python attributes can be baked."""
        if id(module) in self.modules_seen:
            return
        self.modules_seen[id(module)] = module
        version = module.__dict__.get("_kiln_version", 0)
        self.guards.flag(
            module,
            "_kiln_version",
            version,
            f"{type(module).__name__} at 0x{id(module):x}: attributes unchanged "
            f"(version {version})",
        )

    def _int_is_dynamic(self, source) -> bool:
        return not self.static_only and source in self.auto_dynamic

    def _wrap_sym_int(self, value: int, source) -> V.VT:
        self.guards.type(source, value)
        node = self._add_input(source, value)
        if type(value) is int and isinstance(root_of(source), ArgSource):
            # an argument that changes between calls (a decode position): the compiled code
            # reads it as a symbol bound at each call, and sizes computed from it are symbolic
            # in the capture too (size_of). A global or closure int (a config value that
            # changed once) stays its example, checked at each call.
            node.meta["sym"] = self.symbols[self._symbol_for(source, "int", value)][0]
        var = (V.SymIntVar if type(value) is int else V.SymFloatVar)(node, value, None)
        var.source = source
        return var

    def _add_input(self, source, value, sym_sizes=None):
        label = source.name() if source is not None else f"const{len(self.input_sources)}"
        node = self.graph.placeholder(_sanitize(label), value, sym_sizes=sym_sizes)
        self.input_sources.append(source)
        self.input_baked.append(value if source is None or source.expr(self.state_labels) is None
                                else None)
        return node

    def _dynamic_dims(self, t, source) -> set:
        if self.static_only or t.dim() == 0:
            return set()
        marks = marks_of(t)
        dims = set()
        if self.dynamic is True:
            dims = {d for d in range(t.dim())}
        dims |= self.auto_dynamic.get(source, set()) if source is not None else set()
        dims |= {d for d, v in marks.items() if v}
        dims -= {d for d, v in marks.items() if not v}
        # Sizes 0 and 1 stay static (broadcasting and emptiness depend on them).
        return {d for d in dims if type(d) is int and d < t.dim() and t.shape[d] >= 2}

    def _wrap_ndarray(self, arr, source, label=None) -> V.VT:
        """An ndarray: a graph input over the same memory (`kiln._numpy.to_tensor` in the
        entry), guarded on its dtype, sizes and strides, tracked as a NumPy array."""
        from kiln import _numpy

        if id(arr) in self.input_by_id:
            return self.input_by_id[id(arr)]
        if not _numpy._dtypes.supported(arr.dtype):
            raise V.Unsupported(f"a NumPy array of dtype {arr.dtype}: kiln has no such dtype",
                                "NumPy runs this code")
        t = _numpy.to_tensor(arr)
        self._arrays.append((arr, t))
        var = self._wrap_tensor(t, source, label, array=arr)
        var.numpy = True
        var.array_source = source if source is not None and source.guardable() else None
        # An array kiln cannot address (negative strides, read-only) enters as a copy (its
        # strides are guarded, so every call's does): a write into it must run in NumPy.
        var.copied_input = arr.size > 0 and t.data_ptr() != arr.__array_interface__["data"][0]
        return var

    def _wrap_numpy_scalar(self, value, source) -> V.VT:
        """A NumPy scalar argument whose value changed between calls (a particle filter's
        `u0s[t]`): a 0-d array input of its dtype, which NumPy's promotion treats as it treats
        the scalar (both are strongly typed), instead of one capture per value."""
        from kiln import _numpy

        self.guards.type(source, value)
        t = _numpy.to_tensor(value)
        node = self._add_input(source, t)
        self.input_numpy.add(len(self.input_sources) - 1)
        var = V.TensorVar(node, t, source)
        var.numpy = True
        var.array_source = source  # returned as is, it is the caller's scalar
        var.copied_input = True  # a scalar cannot be written into: such code runs in NumPy
        var.dynamic_dims, var.sym_of_dim = set(), {}
        return var

    def _wrap_tensor(self, t, source, label=None, array=None) -> V.VT:
        key = t._impl_id if array is None else id(array)
        if key in self.input_by_id:
            return self.input_by_id[key]
        guard_src = source is not None and source.guardable()
        if source is None or (guard_src and source.expr(self.state_labels) is None):
            # A tensor in a global or closure: guard its identity and bake it.
            if guard_src:
                self.guards.id(source, t if array is None else array)
            if source is None:
                source = BakedSource(label or f"tensor@0x{id(t):x}")
            if isinstance(t, kiln.nn.Parameter) and (self.graph.grad_enabled or
                                                     self.grad_enabled):
                # frozen or unfrozen after the capture. Under no_grad the flag changes nothing
                # the graph computes, and inference calls skip one check per parameter
                self.guards.flag(t, "requires_grad", t.requires_grad,
                                 f"{source.name()}.requires_grad is {t.requires_grad}")
        dyn = self._dynamic_dims(t, source) if guard_src else set()
        sym_sizes = list(t.shape)
        sym_names = {}
        for d in sorted(dyn):
            sym = self._symbol_for(source, d, t.shape[d])
            sym_sizes[d] = self.symbols[sym][0]
            sym_names[d] = self.symbols[sym][0]
        marks = self.auto_dynamic.get(source, ()) if source is not None else ()
        any_strides = (guard_src and array is None and "strides" in marks
                       and "layout" not in marks and not self.static_only)  # fmt: skip
        if guard_src:
            if array is not None:
                self.guards.ndarray(source, array, dyn, sym_names)
            else:
                self.guards.tensor(source, t, dyn, sym_names, any_strides=any_strides)
            self.seen_strides[source] = tuple(t.stride())
            for d in sorted(dyn):
                sym = self._symbol_for(source, d, t.shape[d])
                self.guards.bind_size(source, d, sym, self.symbols[sym][0])
                self.guards.sym("ge_const", sym, 2, f"{self.symbols[sym][0]} >= 2")
            self.seen_sizes[source] = tuple(t.shape)
        if any_strides:  # the graph is compiled for the contiguous layout the entry gives it
            t = t.contiguous()
        node = self._add_input(source, t, sym_sizes if dyn else None)
        if array is not None and self.input_baked[-1] is None:
            self.input_numpy.add(len(self.input_sources) - 1)
        var = V.TensorVar(node, t, source)
        if array is None and not any_strides:
            var.input_object = t
        if any_strides:
            self.input_contiguous.append((len(self.input_sources) - 1, var, t))
        var.dynamic_dims = dyn
        var.sym_of_dim = {d: self._symbol_for(source, d, t.shape[d]) for d in dyn}
        self.input_by_id[key] = var
        return var

    def keep_layout(self, var: V.TensorVar) -> None:
        """`var` came in made contiguous (its strides varied between calls), but the code reads
        its layout or writes into it: capture again with its strides guarded, now and later."""
        if any(v is var for _, v, _ in self.input_contiguous):
            marks = self.auto_dynamic.setdefault(var.source, set())
            marks.discard("strides")
            marks.add("layout")
            raise V.RestartStatic()

    def _symbol_for(self, source, dim: int, hint: int) -> int:
        key = (source, dim)
        if key not in self.sym_by_source:
            self.sym_by_source[key] = len(self.symbols)
            self.symbols.append((f"s{len(self.symbols)}", hint))
        return self.sym_by_source[key]

    @property
    def has_symbols(self) -> bool:
        return bool(self.symbols)

    def size_of(self, tv: V.TensorVar, dim: int) -> V.VT:
        """`t.size(dim)`: a constant, or a run-time int when shapes are symbolic.

        A size that is the same whatever the symbols are is a constant, so code comparing it
        (`if T > block_size`, `embed_dim != self.embed_dim`) keeps the other dims symbolic: a
        static dim of a graph input (its tensor guard checks it), or a size of an intermediate
        that shape inference of the graph so far finds constant. A size that is exactly a symbol
        carries it, so a comparison guards the symbol instead of restarting the capture."""
        check_size_read(tv.node, "the size")
        hint = tv.example.shape[dim]
        if not self.has_symbols:
            return V.ConstVar(hint)
        sym_of_dim = getattr(tv, "sym_of_dim", None)
        if sym_of_dim is not None:  # a graph input: its dynamic dims are known
            if dim not in sym_of_dim:
                return V.ConstVar(hint)
            sym = sym_of_dim[dim]
        else:
            sizes = self._sizes_of(tv.node)
            text = sizes[dim] if sizes is not None and -len(sizes) <= dim < len(sizes) else None
            if text is not None and text == str(hint):
                return V.ConstVar(hint)
            names = {name: i for i, (name, _) in enumerate(self.symbols)}
            sym = names.get(text)
        node = self.graph.call(sym_size, (tv.node, dim), {}, hint, loc=self.loc)
        return V.SymIntVar(node, hint, sym)

    def _guard_assumption(self, relation: str) -> None:
        """A relation the shape rules assumed while typing the graph: the capture relies on the
        sizes they computed (a slice's length read by `len(xb)` is a constant because its end
        was taken to be within the size), so it is guarded, and a call where it fails captures
        again. Not in a loop body, whose index symbol loops_uniform.py settles."""
        if getattr(self.graph, "outer", None) is None:
            self.guard_relation(relation, "assumed by a shape rule")

    def guard_relation(self, relation: str, why: str) -> bool:
        """Guards `relation` (SymRelation text over the entry's symbols) when it holds for this
        call's values; False when it cannot be guarded (a symbol of a loop body, an unreadable
        text) or does not hold."""
        names = sorted(set(re.findall(r"\bs(\d+)\b", relation)), key=int)
        if not names or any(int(k) >= len(self.symbols) for k in names):
            return False
        slots = [(f"s{k}", int(k)) for k in names]
        hints = {f"s{k}": self.symbols[int(k)][1] for k in names}
        try:
            holds = kiln._C._ir.evaluate_relation(relation, hints)
        except Exception:  # noqa: BLE001 - a relation the evaluator cannot read
            return False
        if not holds:
            return False
        int_sources = {sym: source for (source, what), sym in self.sym_by_source.items()
                       if what == "int"}
        for _, k in slots:
            if k in int_sources:  # an int argument's symbol: bound by its own check
                self.guards.bind_int(int_sources[k], k, f"s{k}")
        self.guards.relation(relation, slots, f"{relation} ({why})")
        return True

    def _sizes_of(self, node) -> list | None:
        """The sizes of tensor `node` as SymInt text (`s0`, `8`, `s0*8`), or None if unknown.

        Shape inference types the call nodes recorded since the last query and keeps the result
        in their ``meta["sym_sizes"]``: the .kir writer then spells ints read from them (the `B`
        of ``x.view(B, T, -1)``) symbolically, which later inferences rely on."""
        if "sym_sizes" not in node.meta and node.op == "call":
            nodes = self.graph.nodes
            new = [n for n in nodes[self._typed_upto:] if n.op == "call"]
            self._typed_upto = len(nodes)
            for relation in _annotate_sizes(self.graph.name, new, self._int_syms):
                self._guard_assumption(relation)
        sizes = node.meta.get("sym_sizes")
        example = node.meta.get("example")
        if sizes is None and node.op == "placeholder" and isinstance(example, kiln.Tensor):
            sizes = list(example.shape)
        return [str(s) for s in sizes] if sizes is not None else None


def _annotate_sizes(name: str, nodes: list, int_syms: dict) -> list:
    """Sets ``meta["sym_sizes"]`` of `nodes` (call nodes, in order) to their sizes as the op
    rules type them, from the symbolic types of the values they read (earlier nodes'
    annotations, `int_syms` for ints); records the SymInt text of their int results in
    `int_syms`.

    Values typed only by their example cannot be trusted, since a symbol would show as a
    number: the result of an opaque ``call`` op, of a node left untyped, a tuple. Nodes reading
    one stay untyped (their sizes stay run-time ints), as do the nodes after an int the builder
    could only spell by its example. Returns what the rules assumed about the symbols while
    typing them (relation texts: `s0 >= 100`, a slice's end within its size)."""
    from kiln._capture.backend_compiled import _RunWriter

    if not nodes:
        return []
    inside = {id(n) for n in nodes}
    # A multi-result node (a split) typed earlier is built again with its getitems: a tuple
    # cannot be an input of the graph the writer builds.
    pieces = {id(a): a for n in nodes for a in nodes_in((n.args, n.kwargs))
              if id(a) not in inside and a.op == "call"
              and isinstance(a.meta.get("example"), (tuple, list))}
    if pieces:
        order = {id(n): i for i, n in enumerate(nodes[0].graph.nodes)}
        nodes = sorted(pieces.values(), key=lambda a: order[id(a)]) + list(nodes)
        inside.update(pieces)
    inputs, types = {}, {}
    for n in nodes:
        for a in nodes_in((n.args, n.kwargs)):
            if id(a) in inside or id(a) in inputs:
                continue
            inputs[id(a)] = a
            if a.op == "placeholder":
                continue
            if isinstance(a.meta.get("example"), kiln.Tensor) and "sym_sizes" in a.meta:
                types[id(a)] = (a.meta["sym_sizes"], None)
            elif id(a) in int_syms:
                types[id(a)] = (None, int_syms[id(a)])
            else:
                return []
    writer = _RunWriter(f"{name}_sizes", list(inputs.values()), nodes, [], types)
    try:
        writer.write()
    except Exception:  # noqa: BLE001 - an untyped graph: its sizes stay run-time ints
        return []
    if writer.opaque:
        return []
    ints = {}
    for node in nodes:
        val = writer.values.get(id(node))
        if not isinstance(val, Val):
            continue
        if val.type == "int":
            if val.sym is None or id(node) in writer.example_ints:
                break  # the nodes after it may read it: they stay untyped
            ints[id(node)] = val.sym
            continue
        if val.is_tensor:
            node.meta["sym_sizes"] = [int(s) if s.lstrip("-").isdigit() else s
                                      for s in val.type.sizes]  # fmt: skip
    int_syms.update(ints)
    return writer.builder.assumptions()


def _plain_key(k) -> bool:
    """A dict key the capture can hold and guard: a str or int, a module (by identity), a
    class or a tuple of these (a registry keyed by type pairs, kl_divergence's)."""
    if type(k) in (str, int) or isinstance(k, (kiln.nn.Module, type)):
        return True
    return type(k) is tuple and all(_plain_key(i) for i in k)


def _with_origin(var, value):
    """Remembers the real list/dict behind a variable read from a place without a source (a
    module attribute, a closure of an inlined function): mutating it then breaks the graph and
    a rebuild after a break passes the same object on."""
    if var.source is None:
        var.origin = value
    return var


def _is_bound_builtin(value) -> bool:
    """A method of a C type bound to an instance (`ndarray.sum` of one array, `[].append`)."""
    if not isinstance(value, (types.BuiltinMethodType, types.MethodWrapperType)):
        return False
    owner = getattr(value, "__self__", None)
    if owner is None or isinstance(owner, (types.ModuleType, type)):
        return False
    return type(owner).__name__ != "PyCapsule"  # pybind11 functions are free functions


def _sanitize(label: str) -> str:
    out = []
    for ch in label:
        out.append(ch if ch.isalnum() or ch == "_" else "_")
    text = "".join(out).strip("_")
    while "__" in text:
        text = text.replace("__", "_")
    return text or "arg"

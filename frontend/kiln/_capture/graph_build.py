"""A captured Graph built as a graph-IR graph in memory (``kiln._C._ir.GraphBuilder``).

Each call node becomes the ops.def op its target stands for when lowerings.py knows one
(``kiln.add``, ``kiln.Tensor.add`` and ``operator.add`` all build ``add``), with the torch
argument names as attributes and default values left out; anything else becomes a ``call`` node
that names the target and keeps the non-tensor arguments as text, so every graph builds.

The builder checks every node against the op table as it is added and types its result by the
op's shape rule (dtype, symbolic sizes, view strides), so a lowering reads the sizes of what it
built at once (``w.tensor(x).type.sizes``: ``["s0", "8"]``) and a node the table rejects declines
with the table's reason. Inputs are typed by each placeholder's ``meta["example"]`` and
``meta["sym_sizes"]`` (symbolic sizes such as ``s0``); Python numbers that ops take become
``constant`` nodes; ``call`` results keep the types the capture observed. Python writes no
``.kir``: the C++ printer alone prints a built graph (``Graph.text()``, for dumps and export).
"""

from __future__ import annotations

import operator
import os
import re
from dataclasses import dataclass, field

import kiln
from kiln._capture.graph import Graph, Node, nodes_in, sanitize_name, sym_size, target_name

__all__ = ["Decline", "ExportOptions", "GraphWriter", "Val", "build_graph", "check_type",
           "graph_text"]

_DTYPE_SHORT = {
    "bool": "b8", "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64",
}  # fmt: skip
_SYMBOL = re.compile(r"s[0-9]+\Z")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Decline(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a lowering that cannot express a call as its op; the call becomes ``call``."""


@dataclass
class ExportOptions:
    """How kiln.export writes a graph (frontend/kiln/_export): the program's own form of it.

    Placeholders named in `weights` become ``weight() {name = "<key>"}`` nodes (tensors of the
    program's weights file) instead of parameters; those in `input_names` keep a parameter named
    after the function's argument. `symbols` renames the capture's size symbols (``s0`` ->
    ``batch``), `ranges` adds one ``sym_constrain_range`` per symbol after the parameters
    (max -1: unbounded), and `out_spec` is recorded on the return (how the function packed its
    outputs; ``%k`` is return operand k, so every output must be a single value).
    """

    input_names: dict = field(default_factory=dict)  # id(placeholder) -> parameter name
    weights: dict = field(default_factory=dict)  # id(placeholder) -> weights-file key
    symbols: dict = field(default_factory=dict)  # capture symbol -> exported symbol name
    ranges: list = field(default_factory=list)  # (symbol, min, max or -1)
    out_spec: str | None = None


# --- Types and values ---------------------------------------------------------------------------


def dtype_short(dt) -> str:
    """``f32`` for kiln.float32."""
    return _DTYPE_SHORT[dt.name]


class TensorType:
    """A tensor type: dtype short name, sizes as SymInt text, strides, device, contiguity."""

    __slots__ = ("dtype", "sizes", "strides", "device", "contiguous")

    def __init__(self, dtype: str, sizes: list[str], strides: list, device, contiguous: bool):
        self.dtype, self.sizes, self.strides = dtype, sizes, strides
        self.device, self.contiguous = device, contiguous

    @classmethod
    def of(cls, t: tuple) -> TensorType:
        """From the builder's (dtype, sizes, strides, device, contiguous); contiguous as eager
        says it (the stride of a size-1 dim does not count)."""
        dtype, sizes, strides, device, contiguous = t
        if not contiguous and all(type(v) is int for v in (*sizes, *strides)):
            contiguous, expected = True, 1
            for size, stride in zip(reversed(sizes), reversed(strides), strict=True):
                if size != 1 and stride != expected:
                    contiguous = False
                    break
                expected *= size
        return cls(dtype, [str(s) for s in sizes], list(strides), device, contiguous)

    def spec(self) -> tuple:
        """The builder's input form: strides only when they are not the row-major ones."""
        dense = self.contiguous or self.strides == _symbolic_contiguous(self.sizes)
        return (self.dtype, self.sizes, None if dense else self.strides, self.device)

    def __repr__(self) -> str:
        return f"{self.dtype}[{', '.join(self.sizes)}]"


def _symbolic_contiguous(sizes: list[str]) -> list:
    """Row-major strides as the IR computes them (constant sizes clamped to >= 1); None where a
    symbolic size makes the stride symbolic."""
    strides, acc = [], 1
    for s in reversed(sizes):
        strides.append(acc)
        if acc is not None:
            acc = acc * max(int(s), 1) if re.fullmatch(r"-?[0-9]+", s) else None
    return strides[::-1]


class Val:
    """One value of the graph being built: its builder handle, type, and for ints its SymInt
    text."""

    __slots__ = ("handle", "type", "sym")

    def __init__(self, handle: int, type_, sym: str | None = None):
        self.handle, self.type, self.sym = handle, type_, sym

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.type, TensorType)


def _val(result, sym=None) -> Val:
    handle, t = result
    return Val(handle, TensorType.of(t) if isinstance(t, tuple) else t, sym)


def scalar_type(value) -> str | None:
    """``int``/``float``/``bool`` for a Python number, else None."""
    return {bool: "bool", int: "int", float: "float"}.get(type(value))


# --- The writer ---------------------------------------------------------------------------------


def varies_per_iteration(node: Node) -> bool:
    """Whether an int node is computed from a loop node's index (loops.py): its example is
    one iteration's value, not a constant."""
    if node.meta.get("loop_index"):
        return True
    return node.op == "call" and any(
        type(a.meta.get("example")) is int and varies_per_iteration(a)
        for a in nodes_in((node.args, node.kwargs)))


class GraphWriter:
    """Builds one graph; lowerings.py lowers each call node through its helpers."""

    def __init__(self, graph: Graph, export: ExportOptions | None = None):
        self.graph = graph
        self.export = export
        self.builder = kiln._C._ir.GraphBuilder(sanitize_name(graph.name))
        self.values: dict[int, object] = {}  # id(node) -> Val | tuple of (Val | None) | None
        self._consts: dict[tuple, Val] = {}
        self._symbols: dict[str, str] = {}
        self._canon: dict[str, str] = {}
        self._used_symbols: set[str] = set()
        self.example_ints: set[int] = set()  # int nodes spelled by their example (`_int_sym`)

    # -- symbolic ints ---------------------------------------------------------------------------

    def canonical(self, text: str) -> str:
        """The canonical SymInt text of `text` (the C++ SymInt printer's form)."""
        if re.fullmatch(r"-?[0-9]+|s[0-9]+", text):
            return text
        if text not in self._canon:
            self._canon[text] = kiln._C._ir.canonical_sym_int(text)
        return self._canon[text]

    def _symbol_text(self, entry) -> str:
        if type(entry) is int:
            return str(entry)
        entry = str(entry)
        if self.export is not None and self.export.symbols:
            renamed = self.export.symbols
            entry = re.sub(r"\b[A-Za-z_][A-Za-z0-9_]*\b",
                           lambda m: renamed.get(m.group(0), m.group(0)), entry)
            if entry in renamed.values():
                return entry
        if _SYMBOL.match(entry):
            return entry
        if _IDENT.match(entry):  # a named size: renamed s<k> so the text follows the convention
            if entry not in self._symbols:
                k = len(self._symbols)
                while f"s{k}" in self._used_symbols:
                    k += 1
                self._symbols[entry] = f"s{k}"
                self._used_symbols.add(f"s{k}")
            return self._symbols[entry]
        return self.canonical(entry)

    # -- types -----------------------------------------------------------------------------------

    def tensor_type(self, example, sym_sizes=None) -> TensorType:
        sizes = [str(s) for s in example.shape]
        if sym_sizes is not None and len(sym_sizes) == len(sizes):
            sizes = [self._symbol_text(s) for s in sym_sizes]
        dev = example.device
        device = None if dev.type == "cpu" else str(dev)
        return TensorType(
            dtype_short(example.dtype), sizes, list(example.stride()), device,
            example.is_contiguous(),
        )  # fmt: skip

    def value_type(self, example, sym_sizes=None):
        """The type of a single value, or None when it has none (a string, None, ...)."""
        if isinstance(example, kiln.Tensor):
            return self.tensor_type(example, sym_sizes)
        return scalar_type(example)

    # -- building --------------------------------------------------------------------------------

    @staticmethod
    def _loc(loc):
        return (os.path.basename(str(loc[0])), int(loc[1])) if loc else None

    def emit(self, op: str, operands: list[Val], attrs: dict | None = None, loc=None,
             types: list | None = None) -> list[Val]:
        """Adds ``op(operands) {attrs}`` and returns its results, typed by the op's rule;
        `types` (TensorTypes or scalar type names) only for ops typed as given. A node the op
        table rejects declines with the table's reason."""
        specs = None if types is None else [t.spec() if isinstance(t, TensorType) else t
                                            for t in types]  # fmt: skip
        try:
            results = self.builder.add(op, [v.handle for v in operands], attrs or {},
                                       self._loc(loc), specs)  # fmt: skip
        except (ValueError, TypeError) as e:
            raise Decline(str(e)) from None
        return [_val(r) for r in results]

    def emit_node(self, node: Node, op: str, operands: list[Val], attrs: dict) -> Val:
        """Adds `node` as one `op` node and records its value. The rule's type must agree with
        what eager computed (dtype, rank, constant sizes): a lowering that would change the
        numbers declines instead."""
        number = scalar_type(node.meta.get("example"))
        # A number's type is given too: rules take it where Python's decides (`2 ** -1`).
        (val,) = self.emit(op, operands, attrs, node.meta.get("loc"), [number] if number else None)
        _check_against_example(val, node, op)
        self.values[id(node)] = val
        return val

    def constant(self, value) -> Val:
        """A ``constant`` node holding a Python number (one per distinct value)."""
        key = (type(value), repr(value))
        if key not in self._consts:
            (val,) = self.emit("constant", [], {"value": value}, types=[scalar_type(value)])
            val.sym = str(value) if type(value) is int else None
            self._consts[key] = val
        return self._consts[key]

    def checkpoint(self):
        """What `rollback` restores when a lowering declines halfway."""
        return self.builder.mark(), dict(self._consts)

    def rollback(self, state) -> None:
        mark, self._consts = state
        self.builder.rollback(mark)

    # -- argument access for lowerings -----------------------------------------------------------

    def value_of(self, v):
        """The value of a node argument (Val, tuple of Val, or None when it has none)."""
        return self.values.get(id(v)) if isinstance(v, Node) else None

    def tensor(self, v) -> Val:
        val = self.value_of(v)
        if not isinstance(val, Val) or not val.is_tensor:
            raise Decline("expected a tensor")
        return val

    def operand(self, v) -> Val:
        """A tensor or number operand: a node's value or a constant for a Python number."""
        if isinstance(v, Node):
            val = self.value_of(v)
            if not isinstance(val, Val):
                raise Decline("an operand without a value")
            return val
        if scalar_type(v) is None:
            raise Decline(f"a {type(v).__name__} operand")
        return self.constant(v)

    def sym(self, v) -> str:
        """SymInt text for an int argument (a Python int or an int-valued node)."""
        if type(v) is int:
            return str(v)
        val = self.value_of(v)
        if isinstance(val, Val) and val.sym is not None:
            return val.sym
        raise Decline("expected an int")

    def int_(self, v) -> int:
        """A constant int argument. An int-valued node is a run-time value (a symbolic size, a
        dynamic int argument, a loop index): its example is one call's value, so it counts only
        when shape inference proved it constant."""
        if type(v) is int:
            return v
        if isinstance(v, Node) and type(v.meta.get("example")) is int:
            if varies_per_iteration(v):
                raise Decline("an int that changes between loop iterations where a constant "
                              "is needed")
            val = self.value_of(v)
            sym = val.sym if isinstance(val, Val) else None
            if sym is not None and sym.lstrip("-").isdigit():
                return int(sym)
            raise Decline("a run-time int where the op needs a constant")
        raise Decline("expected a constant int")

    def ints(self, v) -> list[int]:
        if isinstance(v, (tuple, list)):
            return [self.int_(x) for x in v]
        return [self.int_(v)]

    def syms(self, v) -> list[str]:
        if isinstance(v, (tuple, list)):
            return [self.sym(x) for x in v]
        return [self.sym(v)]

    # -- the graph -------------------------------------------------------------------------------

    def _input(self, node: Node, name: str | None = None) -> Val | None:
        example = node.meta.get("example")
        t = self.value_type(example, node.meta.get("sym_sizes"))
        if t is None:
            self.values[id(node)] = None
            return None
        if self.export is not None and id(node) in self.export.weights:
            self.values[id(node)] = Val(-1, t)  # built as a weight node after the parameters
            return None
        sym = None
        if t == "int":  # a dynamic int input names its symbol in meta["sym"] or sym_sizes[0]
            given = node.meta.get("sym") or (node.meta.get("sym_sizes") or [None])[0]
            sym = self._symbol_text(given) if given is not None else str(example)
        if name is None:
            name = node.name
            if self.export is not None:
                name = self.export.input_names.get(id(node), name)
        spec = t.spec() if isinstance(t, TensorType) else t
        val = _val(self.builder.input(name, spec, self._loc(node.meta.get("loc"))), sym)
        self.values[id(node)] = val
        return val

    def _call(self, node: Node) -> None:
        from kiln._capture.lowerings import lower

        if not lower(self, node):
            self.emit_call(node)
        val = self.values.get(id(node))
        if isinstance(val, Val) and val.type == "int" and val.sym is None:
            val.sym = self._int_sym(node)

    def _int_sym(self, node: Node) -> str:
        """The SymInt a node's int result stands for (`s0*2` for ``x.size(0) * 2``)."""
        example, args = node.meta.get("example"), node.args
        try:
            if node.target in (sym_size, kiln.Tensor.size) and len(args) == 2:
                t = self.tensor(args[0])
                return t.type.sizes[self.int_(args[1]) % len(t.type.sizes)]
            fmt = _SYM_OPS.get(id(node.target))
            if fmt is not None and not node.kwargs and len(args) == fmt.count("{}"):
                return self.canonical(fmt.format(*(f"({self.sym(a)})" for a in args)))
        except (Decline, ValueError, IndexError, ZeroDivisionError):
            pass
        if varies_per_iteration(node):
            return None  # no constant stands for it: only its run-time value may be used
        self.example_ints.add(id(node))
        return str(example)

    def emit_call(self, node: Node) -> None:
        """Adds `node` as an opaque ``call`` (target and non-tensor arguments as text)."""
        operands: list[Val] = []
        slots: dict[int, str] = {}

        def slot(val: Val) -> str:
            if id(val) not in slots:
                slots[id(val)] = f"${len(operands)}"
                operands.append(val)
            return slots[id(val)]

        def text(v) -> str:
            if isinstance(v, Node):
                val = self.value_of(v)
                if isinstance(val, Val):
                    return slot(val)
                if isinstance(val, tuple):
                    parts = [slot(x) if x is not None else f"<{v.name}[{i}]>"
                             for i, x in enumerate(val)]  # fmt: skip
                    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"
                return f"<{v.name}>"
            return _arg_text(v, text)

        pos = [text(a) for a in node.args]
        kw = [f"{k}={text(v)}" for k, v in node.kwargs.items()]
        args_text = "(" + ", ".join(pos + kw) + ")"
        attrs = {"target": target_name(node.target)}
        if args_text != "(" + ", ".join(f"${i}" for i in range(len(operands))) + ")":
            attrs["args"] = args_text
        example = node.meta.get("example")
        multi = isinstance(example, (tuple, list))
        if multi:  # a loop node knows its results' symbolic sizes (loops.py)
            each = node.meta.get("result_sym_sizes") or [None] * len(example)
            types = [self.value_type(e, s) for e, s in zip(example, each, strict=True)]
        else:
            types = [self.value_type(example, node.meta.get("sym_sizes"))]
        results = iter(self.emit("call", operands, attrs, node.meta.get("loc"),
                                 [t for t in types if t is not None]))  # fmt: skip
        vals = [next(results) if t is not None else None for t in types]
        if multi:
            self.values[id(node)] = tuple(vals)
        else:
            self.values[id(node)] = vals[0]

    def _export_prologue(self) -> None:
        """The range of each exported symbol, then the weight nodes, in placeholder order."""
        for symbol, lo, hi in self.export.ranges:
            self.emit("sym_constrain_range", [], {"max": hi, "min": lo, "symbol": symbol})
        for node in self.graph.inputs:
            key = self.export.weights.get(id(node))
            if key is None:
                continue
            t = self.values[id(node)].type
            # The file holds it contiguous, whatever view of a tensor the module kept.
            t = TensorType(t.dtype, t.sizes, _symbolic_contiguous(t.sizes), t.device, True)
            (val,) = self.emit("weight", [], {"name": key}, types=[t])
            self.values[id(node)] = val

    def _output_handles(self, outputs) -> list[int]:
        outs: list[int] = []
        for i, v in enumerate(outputs):
            if self.export is not None and len(outs) != i:
                raise ValueError(f"graph output {i - 1} is not a single tensor or number")
            val = self.value_of(v) if isinstance(v, Node) else None
            if isinstance(val, Val):
                outs.append(val.handle)
            elif isinstance(val, tuple):
                outs.extend(x.handle for x in val if x is not None)
            elif not isinstance(v, Node) and scalar_type(v) is not None:
                outs.append(self.constant(v).handle)
        if self.export is not None and len(outs) != len(outputs):
            raise ValueError(f"graph output {len(outputs) - 1} is not a single tensor or number")
        return outs

    def write(self):
        """The built graph (``kiln._C._ir.Graph``)."""
        for node in self.graph.inputs:
            self._used_symbols.update(
                s for s in node.meta.get("sym_sizes") or () if isinstance(s, str)
            )
            if isinstance(node.meta.get("sym"), str):  # a dynamic int input (a loop's bound)
                self._used_symbols.add(node.meta["sym"])
        for node in self.graph.inputs:
            self._input(node)
        if self.export is not None:
            self._export_prologue()
        for node in self.graph.nodes:
            if node.op == "call":
                self._call(node)
        outs = self._output_handles(self.graph.outputs)
        out_spec = self.export.out_spec if self.export is not None else None
        try:
            return self.builder.finish(outs, out_spec)
        except ValueError as e:
            raise ValueError(f"{self.graph.name}: {e}") from None


def _check_against_example(val: Val, node: Node, op: str) -> None:
    check_type(val, node.meta.get("example"), op)


def check_type(val: Val, example, op: str) -> None:
    """Declines unless `val` types as eager's `example` (dtype, rank, constant sizes)."""
    if isinstance(example, kiln.Tensor):
        t = val.type
        agrees = (val.is_tensor and t.dtype == dtype_short(example.dtype)
                  and len(t.sizes) == example.dim()
                  and all(not s.lstrip("-").isdigit() or int(s) == n
                          for s, n in zip(t.sizes, example.shape, strict=True)))  # fmt: skip
        if not agrees:
            raise Decline(f"{op} is typed {t!r} by its rule, but eager gave "
                          f"{dtype_short(example.dtype)}{list(example.shape)}")
    elif scalar_type(example) is not None and val.type != scalar_type(example):
        raise Decline(f"{op} is typed {val.type!r} by its rule, but eager gave a "
                      f"{type(example).__name__}")


_SYM_OPS = {
    operator.add: "{} + {}", operator.sub: "{} - {}", operator.mul: "{} * {}",
    operator.floordiv: "{} floordiv {}", operator.mod: "{} mod {}", operator.neg: "-{}",
    operator.pos: "{}", operator.index: "{}", max: "max({}, {})", min: "min({}, {})",
}  # fmt: skip
_SYM_OPS = {id(k): v for k, v in _SYM_OPS.items()}  # keyed by id: targets need not be hashable


def _arg_text(v, text) -> str:
    """Python-like text of a non-node argument of a ``call`` node (deterministic)."""
    if v is None or type(v) in (bool, int, float, str):
        return repr(v)
    if v is Ellipsis:
        return "..."
    if isinstance(v, tuple):
        inner = ", ".join(text(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, list):
        return "[" + ", ".join(text(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{text(k)}: {text(x)}" for k, x in v.items()) + "}"
    if isinstance(v, slice):
        return f"slice({text(v.start)}, {text(v.stop)}, {text(v.step)})"
    if isinstance(v, kiln.dtype):
        return str(v)
    if isinstance(v, kiln.device):
        return f"kiln.device({str(v)!r})"
    if callable(v):
        return target_name(v)
    return f"<{type(v).__qualname__}>"


def build_graph(graph: Graph, export: ExportOptions | None = None):
    """`graph` built in memory (``kiln._C._ir.Graph``); `export` builds kiln.export's program
    (see ExportOptions). Every result is typed by its op's rule from the graph's inputs, so a
    dynamic capture's results carry its symbols (``f32[s0, 16]`` after an ``f32[s0, 8]`` input)
    instead of the example's sizes."""
    return GraphWriter(graph, export).write()


def graph_text(graph: Graph, export: ExportOptions | None = None) -> str:
    """The .kir text of `graph` as the C++ printer writes it (dumps, goldens, export files)."""
    return build_graph(graph, export).text()

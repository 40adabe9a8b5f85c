"""A captured Graph as `.kir` text, the graph IR's text form (grammar in ir/README.md).

Each call node becomes the ops.def op its target stands for when graph_kir_ops.py knows one
(``kiln.add``, ``kiln.Tensor.add`` and ``operator.add`` all print as ``add``), with the torch
argument names as attributes and default values left out; anything else becomes a ``call`` node
that names the target and keeps the non-tensor arguments as text, so every graph prints.

Types come from each node's ``meta["example"]`` (dtype, sizes, strides when not contiguous,
device) and ``meta["sym_sizes"]`` (symbolic sizes such as ``s0``); Python numbers that ops take
become ``constant`` nodes of type ``int``/``float``/``bool``; locations print as
``loc("model.py":12)``. The shape-infer pass then recomputes every result type from the inputs
(symbolic sizes flow from dynamic inputs to every result). The text is what the C++ printer
writes for the same graph, so it parses and prints back unchanged
(``kiln._C._ir.parse_and_print``).
"""

from __future__ import annotations

import math
import operator
import os
import re
from dataclasses import dataclass, field

import kiln
from kiln._capture.graph import Graph, Node, sanitize_name, sym_size, target_name

__all__ = ["Decline", "ExportOptions", "graph_to_kir"]

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


# --- Text of attribute values (the C++ Attribute::str spellings) --------------------------------


def format_float(v: float) -> str:
    """A double as the C++ printer writes it: shortest round-trip text, always with `.` or `e`."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "-inf" if v < 0 else "inf"
    s = repr(float(v))
    return s if ("." in s or "e" in s) else s + ".0"


def quote(s: str) -> str:
    """A .kir string literal (`\\\\`, `\\"`, `\\n`, `\\t`, `\\xHH` escapes over UTF-8 bytes)."""
    out = ['"']
    for b in s.encode("utf-8"):
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\x{b:02x}")
        else:
            out.append(c)
    return "".join(out) + '"'


def dtype_short(dt) -> str:
    """``f32`` for kiln.float32."""
    return _DTYPE_SHORT[dt.name]


# --- Values ---------------------------------------------------------------------------------------


class TensorType:
    """A tensor type: dtype short name, sizes as SymInt text, concrete strides, device."""

    __slots__ = ("dtype", "sizes", "strides", "device", "contiguous")

    def __init__(self, dtype: str, sizes: list[str], strides: list[int], device, contiguous):
        self.dtype, self.sizes, self.strides = dtype, sizes, strides
        self.device, self.contiguous = device, contiguous

    def text(self) -> str:
        out = f"{self.dtype}[{', '.join(self.sizes)}]"
        if not self.contiguous and self.strides != _symbolic_contiguous(self.sizes):
            out += f" strided [{', '.join(str(s) for s in self.strides)}]"
        return out + (f" on {self.device}" if self.device else "")


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
    """One .kir value: its name (``%x``, ``%3``), type, and for ints its SymInt text."""

    __slots__ = ("ref", "type", "sym")

    def __init__(self, ref: str, type_, sym: str | None = None):
        self.ref, self.type, self.sym = ref, type_, sym

    @property
    def is_tensor(self) -> bool:
        return isinstance(self.type, TensorType)

    def type_text(self) -> str:
        return self.type.text() if self.is_tensor else self.type


def scalar_type(value) -> str | None:
    """``int``/``float``/``bool`` for a Python number, else None."""
    return {bool: "bool", int: "int", float: "float"}.get(type(value))


# --- The writer ---------------------------------------------------------------------------------


class KirWriter:
    """Writes one graph; graph_kir_ops.py lowers each call node through its helpers."""

    def __init__(self, graph: Graph, export: ExportOptions | None = None):
        self.graph = graph
        self.export = export
        self.lines: list[str] = []
        self.values: dict[int, object] = {}  # id(node) -> Val | tuple of (Val | None) | None
        self._count = 0
        self._consts: dict[tuple, Val] = {}
        self._symbols: dict[str, str] = {}
        self._canon: dict[str, str] = {}
        self._used_symbols: set[str] = set()

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
        """The .kir type of a single value, or None when it has none (a string, None, ...)."""
        if isinstance(example, kiln.Tensor):
            return self.tensor_type(example, sym_sizes)
        return scalar_type(example)

    # -- emitting --------------------------------------------------------------------------------

    def fresh(self) -> str:
        ref = f"%{self._count}"
        self._count += 1
        return ref

    def emit_line(self, text: str, loc=None) -> None:
        if loc:
            text += f" loc({quote(os.path.basename(str(loc[0])))}:{int(loc[1])})"
        self.lines.append("  " + text)

    def emit(self, op: str, operands: list[Val], attrs: dict, types: list, loc=None) -> list[Val]:
        """Writes ``%a, %b = op(operands) {attrs} : types`` and returns the new values; `attrs`
        maps names to attribute text, `types` are TensorTypes or scalar type names."""
        results = [Val(self.fresh(), t) for t in types]
        text = ", ".join(r.ref for r in results) + (" = " if results else "")
        text += f"{op}({', '.join(v.ref for v in operands)})"
        if attrs:
            items = (f"{k} = {v}" if _IDENT.match(k) else f"{quote(k)} = {v}" for k, v in attrs)
            text += " {" + ", ".join(items) + "}"
        if types:
            text += " : " + ", ".join(r.type_text() for r in results)
        self.emit_line(text, loc)
        return results

    def emit_node(self, node: Node, op: str, operands: list[Val], attrs: dict) -> Val:
        """Writes `node` as one `op` node typed by its example, and records its value."""
        t = self.value_type(node.meta.get("example"), node.meta.get("sym_sizes"))
        if t is None:
            raise Decline("the result is neither a tensor nor a number")
        (val,) = self.emit(op, operands, sorted(attrs.items()), [t], node.meta.get("loc"))
        self.values[id(node)] = val
        return val

    def constant(self, value) -> Val:
        """A ``constant`` node holding a Python number (one per distinct value)."""
        key = (type(value), repr(value))
        if key not in self._consts:
            text = format_float(value) if type(value) is float else str(value).lower()
            (val,) = self.emit("constant", [], [("value", text)], [scalar_type(value)])
            val.sym = str(value) if type(value) is int else None
            self._consts[key] = val
        return self._consts[key]

    def checkpoint(self):
        """What `rollback` restores when a lowering declines halfway."""
        return len(self.lines), self._count, dict(self._consts)

    def rollback(self, state) -> None:
        n, self._count, self._consts = state
        del self.lines[n:]

    # -- argument access for lowerings -----------------------------------------------------------

    def value_of(self, v):
        """The .kir value of a node argument (Val, tuple of Val, or None when it has none)."""
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
        """A constant int argument (an int-valued node counts as its example value)."""
        if type(v) is int:
            return v
        if isinstance(v, Node) and type(v.meta.get("example")) is int:
            return v.meta["example"]
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

    def _input(self, node: Node) -> str | None:
        example = node.meta.get("example")
        t = self.value_type(example, node.meta.get("sym_sizes"))
        if t is None:
            self.values[id(node)] = None
            return None
        if self.export is not None and id(node) in self.export.weights:
            self.values[id(node)] = Val("", t)  # written as a weight node after the parameters
            return None
        sym = None
        if t == "int":  # a dynamic int input names its symbol in meta["sym"] or sym_sizes[0]
            given = node.meta.get("sym") or (node.meta.get("sym_sizes") or [None])[0]
            sym = self._symbol_text(given) if given is not None else str(example)
        name = node.name
        if self.export is not None:
            name = self.export.input_names.get(id(node), name)
        val = Val(f"%{name}", t, sym)
        self.values[id(node)] = val
        loc = node.meta.get("loc")
        where = f" loc({quote(os.path.basename(str(loc[0])))}:{int(loc[1])})" if loc else ""
        return f"{val.ref}: {val.type_text()}{where}"

    def _call(self, node: Node) -> None:
        from kiln._capture.graph_kir_ops import lower

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
        return str(example)

    def emit_call(self, node: Node) -> None:
        """Writes `node` as ``call`` (target and non-tensor arguments as text)."""
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
        attrs = [("target", quote(target_name(node.target)))]
        if args_text != "(" + ", ".join(f"${i}" for i in range(len(operands))) + ")":
            attrs.insert(0, ("args", quote(args_text)))
        example = node.meta.get("example")
        multi = isinstance(example, (tuple, list))
        types = (
            [self.value_type(e) for e in example]
            if multi
            else [self.value_type(example, node.meta.get("sym_sizes"))]
        )
        results = iter(self.emit("call", operands, attrs, [t for t in types if t is not None],
                                 node.meta.get("loc")))  # fmt: skip
        vals = [next(results) if t is not None else None for t in types]
        if multi:
            self.values[id(node)] = tuple(vals)
        else:
            self.values[id(node)] = vals[0]

    def _export_prologue(self) -> None:
        """The range of each exported symbol, then the weight nodes, in placeholder order."""
        for symbol, lo, hi in self.export.ranges:
            attrs = [("max", str(hi)), ("min", str(lo)), ("symbol", quote(symbol))]
            self.emit("sym_constrain_range", [], attrs, [])
        for node in self.graph.inputs:
            key = self.export.weights.get(id(node))
            if key is None:
                continue
            t = self.values[id(node)].type
            # The file holds it contiguous, whatever view of a tensor the module kept. Lowerings
            # splice these strides into their intermediate types (a getitem's slice chain), so
            # they are the row-major ones, one per dim (weights have static sizes).
            t = TensorType(t.dtype, t.sizes, _symbolic_contiguous(t.sizes), t.device, True)
            (val,) = self.emit("weight", [], [("name", quote(key))], [t])
            self.values[id(node)] = val

    def write(self) -> str:
        params = []
        for node in self.graph.inputs:
            self._used_symbols.update(
                s for s in node.meta.get("sym_sizes") or () if isinstance(s, str)
            )
        for node in self.graph.inputs:
            param = self._input(node)
            if param is not None:
                params.append(param)
        if self.export is not None:
            self._export_prologue()
        for node in self.graph.nodes:
            if node.op == "call":
                self._call(node)
        outs: list[str] = []
        for i, v in enumerate(self.graph.outputs):
            if self.export is not None and len(outs) != i:
                raise ValueError(f"graph output {i - 1} is not a single tensor or number")
            val = self.value_of(v) if isinstance(v, Node) else None
            if isinstance(val, Val):
                outs.append(val.ref)
            elif isinstance(val, tuple):
                outs.extend(x.ref for x in val if x is not None)
            elif not isinstance(v, Node) and scalar_type(v) is not None:
                outs.append(self.constant(v).ref)
        if self.export is not None and len(outs) != len(self.graph.outputs):
            raise ValueError(f"graph output {len(self.graph.outputs) - 1} is not a single tensor "
                             "or number")
        ret = "  return" + (" " + ", ".join(outs) if outs else "")
        if self.export is not None and self.export.out_spec is not None:
            ret += f" {{out_spec = {quote(self.export.out_spec)}}}"
        self.lines.append(ret)
        name = sanitize_name(self.graph.name)
        return f"graph @{name}({', '.join(params)}) {{\n" + "\n".join(self.lines) + "\n}\n"


_SYM_OPS = {
    operator.add: "{} + {}", operator.sub: "{} - {}", operator.mul: "{} * {}",
    operator.floordiv: "{} floordiv {}", operator.mod: "{} mod {}", operator.neg: "-{}",
    operator.pos: "{}", operator.index: "{}", max: "max({}, {})", min: "min({}, {})",
}  # fmt: skip
_SYM_OPS = {id(k): v for k, v in _SYM_OPS.items()}  # keyed by id: targets need not be hashable


def _arg_text(v, text) -> str:
    """Python-like text of a non-node argument of a ``call`` node (deterministic)."""
    if v is None or type(v) in (bool, int, str):
        return repr(v)
    if type(v) is float:
        return repr(v) if math.isfinite(v) else format_float(v)
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


def graph_to_kir(graph: Graph, export: ExportOptions | None = None) -> str:
    """The .kir text of `graph` (one ``graph @name(...) { ... }`` block).

    The writer types each result by its example value; the shape-infer pass
    (``kiln._C._ir.infer_shapes``) then recomputes every result type from the graph's inputs, so
    a dynamic capture's results carry its symbols (``f32[s0, 16]`` after an ``f32[s0, 8]``
    input) instead of the example's sizes. ``call`` results keep the types the capture observed.
    `export` writes the graph as kiln.export's program (see ExportOptions).
    """
    return kiln._C._ir.infer_shapes(KirWriter(graph, export).write(), f"{graph.name}.kir")

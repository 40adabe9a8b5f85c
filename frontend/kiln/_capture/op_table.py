"""The capture mapping derived from the op table (``ir/ops.def``'s KILN_SPELLING rows, read
through ``kiln._C._ir.op_table()``): every spelling of a table op is written as that op's node,
with no hand-written entry here.

Each row gives the op's torch schema and its spellings. A call binds its Python arguments to the
schema (torch's defaults apply); Tensor and Scalar arguments become the node's operands, the
arguments named like the op's attributes become attributes (left out at their defaults), and
any other argument must keep its default, else the call stays an opaque ``call``. A spelling in
place (``Tensor.add_``, ``operator.iadd``, ``inplace=True``) writes the op, then ``copy_`` of
the result into its first operand; a reflected dunder (``Tensor.__radd__``) swaps the first two
operands. Irregular spellings (``Tensor.where``'s argument order, ``var``'s legacy positional
``unbiased``) keep their own lowerings in lowerings*.py, which take precedence.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from kiln._capture.graph_build import Decline, dtype_short

__all__ = ["Spelling", "signature", "spellings"]

_OPERAND_TYPES = ("Tensor", "Tensor?", "Scalar", "Scalar?")


def signature(args: list[dict]) -> tuple[inspect.Signature, dict[str, str]]:
    """The Python signature of a row's schema and each argument's type, from the arguments
    ``op_table()`` exports (parsed once, in C++: ir/op_schema.h)."""
    params, types = [], {}
    for a in args:
        kind = (inspect.Parameter.KEYWORD_ONLY if a["kw_only"]
                else inspect.Parameter.POSITIONAL_OR_KEYWORD)  # fmt: skip
        params.append(inspect.Parameter(a["name"], kind,
                                        default=a.get("default", inspect.Parameter.empty)))
        types[a["name"]] = a["type"]
    return inspect.Signature(params), types


@dataclass(frozen=True)
class Spelling:
    """One callable of a table row: where it lives and how its call becomes the op's node."""

    path: str  # dotted: kiln.sin, kiln.Tensor.add_, operator.iadd
    op: str
    signature: inspect.Signature
    types: dict
    attrs: dict  # attribute name -> kind name (ops.def)
    fixed: tuple  # (name, value) every call has
    inplace: bool
    reflected: bool

    def lower(self, w, node, args: dict) -> None:
        operands, attrs = [], dict(self.fixed)
        scale = None
        for name, param in self.signature.parameters.items():
            v = args[name]
            if name == "inplace":
                continue
            if name == "alpha" and self.op in ("add", "sub") and not _same(v, param.default):
                scale = v  # add(x, y, alpha=a) is x + a * y
                continue
            if name in self.attrs:
                if v is not None and not _same(v, param.default):
                    value = _attr_value(w, self.attrs[name], v)
                    if value is not None:
                        attrs[name] = value
            elif self.types[name] in _OPERAND_TYPES and param.kind is not param.KEYWORD_ONLY:
                if v is None and self.types[name].endswith("?"):
                    continue
                operands.append(w.operand(v))
            elif not _same(v, param.default):
                raise Decline(f"argument '{name}' other than its default {param.default!r}")
        if self.reflected:
            operands[0], operands[1] = operands[1], operands[0]
        if scale is not None:
            factor = w.constant(scale) if type(scale) in (int, float, bool) else w.operand(scale)
            (operands[1],) = w.emit("mul", [operands[1], factor], {}, node.meta.get("loc"))
        if not (self.inplace or args.get("inplace") is True):
            w.emit_node(node, self.op, operands, attrs)
            return
        x = operands[0]
        if not x.is_tensor:  # `n += 1` on a Python number
            w.emit_node(node, self.op, operands, attrs)
            return
        example = node.meta.get("example")
        if getattr(example, "dtype", None) is None or dtype_short(example.dtype) != x.type.dtype:
            raise Decline("an in-place op whose result dtype is not its operand's")
        first = next(iter(self.signature.parameters))
        if unobserved(node, args[first]):
            w.emit_node(node, self.op, operands, attrs)
            return
        (tmp,) = w.emit(self.op, operands, attrs, node.meta.get("loc"))
        w.emit_node(node, "copy_", [x, tmp], {})


def _same(v, default) -> bool:
    """Whether argument value `v` is the parameter's default (1 and 1.0 alike)."""
    if default is inspect.Parameter.empty:
        return False
    if isinstance(default, (list, tuple)):
        return isinstance(v, (list, tuple)) and list(v) == list(default)
    if default is None or isinstance(default, bool):
        return v is default
    if isinstance(default, (int, float)):
        return type(v) in (int, float) and v == default
    return type(v) is type(default) and v == default


def _attr_value(w, kind: str, v):
    """An argument as the value of an attribute of `kind` (None: leave it out)."""
    from kiln._capture.graph import Node

    if isinstance(v, Node) and kind in ("float", "bool", "string", "dtype"):
        raise Decline(f"a {kind} attribute computed at run time (compiled code takes it as a "
                      "constant)")
    if kind == "int":
        return w.int_(v)
    if kind == "float":
        return float(v)
    if kind == "bool":
        return bool(v)
    if kind == "string":
        if not isinstance(v, str):
            raise Decline(f"a {type(v).__name__} where the op takes a string")
        return v
    if kind == "dtype":
        return dtype_short(v)
    if kind == "number":
        return v if type(v) in (float, bool) else w.int_(v)
    if kind == "int list":
        return w.ints(v) or None
    if kind == "symbolic int":
        return w.sym(v)
    if kind == "symbolic int list":
        return w.syms(v)
    raise Decline(f"an attribute of kind {kind}")


def unobserved(node, x) -> bool:
    """Whether `node` mutating `x` in place is invisible to the rest of the program: `x` is a
    value the graph computes, `node` is its only reader, and no value before `node` shares its
    storage (a base it is a view of, or a view of it). Then the pure op is enough."""
    import kiln
    from kiln._capture.graph import Node

    if not isinstance(x, Node) or x.op != "call" or x.users != [node]:
        return False
    example = x.meta.get("example")
    if not isinstance(example, kiln.Tensor):
        return False
    if example.numel() == 0:
        return True
    ptr = example._storage_ptr()
    for n in node.graph.nodes:
        if n is node:
            break
        e = n.meta.get("example")
        if n is not x and isinstance(e, kiln.Tensor) and e.numel() and e._storage_ptr() == ptr:
            return False
    return True


_PREFIXES = {"Tensor": "kiln.Tensor", "F": "kiln.nn.functional"}


def _path(spelling: str) -> str:
    head, dot, rest = spelling.partition(".")
    if not dot:
        return f"kiln.{spelling}"
    return f"{_PREFIXES.get(head, head)}.{rest}"


def spellings() -> list[Spelling]:
    """Every spelling of every table row, in table order."""
    from kiln import _C

    out = []
    for row in _C._ir.op_table():
        sig, types = signature(row["args"])
        fixed = tuple(row["fixed_values"].items())
        for spelling in row["spellings"].split():
            inplace, reflected = row["forms"][spelling]  # the C++ rule (ir::spellingForm)
            out.append(Spelling(_path(spelling), row["op"], sig, types, dict(row["attrs"]), fixed,
                                inplace, reflected))  # fmt: skip
    return out

"""The out_spec text: how an exported function packed its outputs.

``(%0, None)``, ``{'logits': %0, 'loss': None}``, ``%0``: Python-literal syntax where ``%k`` is
the program's output k. Leaves are outputs, None, bool, int, float (finite) and str; containers
are tuple, list and dict with str keys. Reading it never evaluates code: the text is parsed with
``ast.parse(mode="eval")`` and walked by a whitelist that accepts exactly those forms.
"""

from __future__ import annotations

import ast
import math
import re

from kiln._capture import variables as V

__all__ = ["OutSpecError", "format_spec", "parse_spec", "pack", "output_indices"]

_LEAF_TYPES = (type(None), bool, int, float, str)
# `%k` outside string literals: strings are matched first so their contents are skipped.
_OUTPUT_REF = re.compile(r"""("(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')|%([0-9]+)""")
_PLACEHOLDER = "__kiln_output_"


class OutSpecError(ValueError):
    """An output that export cannot describe, or an out_spec text that is not a valid spec."""


class Output:
    """Output `index` of the program (a leaf of a parsed spec)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __eq__(self, other) -> bool:
        return isinstance(other, Output) and other.index == self.index

    def __hash__(self) -> int:
        return hash(("Output", self.index))

    def __repr__(self) -> str:
        return f"%{self.index}"


def _leaf_text(value) -> str:
    if type(value) is float and not math.isfinite(value):
        raise OutSpecError(f"cannot export a non-finite float output ({value})")
    return repr(value)


def format_spec(value: V.VT, index_of) -> str:
    """The spec text of the captured return value `value`; `index_of(node)` is the output
    index of a graph node."""
    if isinstance(value, (V.TensorVar, V.SymIntVar)):
        return f"%{index_of(value.node)}"
    if isinstance(value, V.ConstVar) and type(value.value) in _LEAF_TYPES:
        return _leaf_text(value.value)
    if isinstance(value, V.TupleVar):
        items = [format_spec(v, index_of) for v in value.items]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if isinstance(value, V.ListVar):
        return "[" + ", ".join(format_spec(v, index_of) for v in value.items) + "]"
    if isinstance(value, V.DictVar):
        parts = []
        for k, v in value.items.items():
            if type(k) is not str:
                raise OutSpecError(f"cannot export a dict output with a {type(k).__name__} key "
                                   f"({k!r}); keys must be str")
            parts.append(f"{k!r}: {format_spec(v, index_of)}")
        return "{" + ", ".join(parts) + "}"
    what = type(value.value).__name__ if isinstance(value, V.ConstVar) else type(value).__name__
    raise OutSpecError(f"cannot export an output of type {what} (outputs may be tensors, "
                       "numbers, str, None, and tuples, lists and str-keyed dicts of them)")


def parse_spec(text: str):
    """The spec tree of `text`: tuples, lists, dicts, leaf values and Output markers."""
    if not isinstance(text, str):
        raise OutSpecError(f"out_spec must be a string, got {type(text).__name__}")

    def mark(m):
        return m.group(1) if m.group(1) is not None else f"{_PLACEHOLDER}{m.group(2)}"

    try:
        tree = ast.parse(_OUTPUT_REF.sub(mark, text), mode="eval")
    except SyntaxError as e:
        raise OutSpecError(f"out_spec {text!r} is not valid: {e.msg}") from None
    return _walk(tree.body, text)


def _walk(node, text: str):
    if isinstance(node, ast.Name) and node.id.startswith(_PLACEHOLDER):
        return Output(int(node.id[len(_PLACEHOLDER):]))
    if isinstance(node, ast.Constant) and type(node.value) in _LEAF_TYPES:
        return node.value
    if (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
            and isinstance(node.operand, ast.Constant)
            and type(node.operand.value) in (int, float)):
        return -node.operand.value
    if isinstance(node, ast.Tuple):
        return tuple(_walk(e, text) for e in node.elts)
    if isinstance(node, ast.List):
        return [_walk(e, text) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if not (isinstance(k, ast.Constant) and type(k.value) is str):
                raise OutSpecError(f"out_spec {text!r}: dict keys must be str literals")
            out[k.value] = _walk(v, text)
        return out
    raise OutSpecError(f"out_spec {text!r}: {type(node).__name__} is not allowed (only outputs "
                       "%k, None, bool, int, float, str, tuple, list and dict)")


def output_indices(spec) -> list[int]:
    """Every output index the spec mentions, in order."""
    found: list[int] = []

    def visit(s):
        if isinstance(s, Output):
            found.append(s.index)
        elif isinstance(s, (tuple, list)):
            for x in s:
                visit(x)
        elif isinstance(s, dict):
            for x in s.values():
                visit(x)

    visit(spec)
    return found


def pack(spec, outputs):
    """The Python value `spec` describes, with `outputs[k]` for each %k."""
    if isinstance(spec, Output):
        return outputs[spec.index]
    if isinstance(spec, tuple):
        return tuple(pack(s, outputs) for s in spec)
    if isinstance(spec, list):
        return [pack(s, outputs) for s in spec]
    if isinstance(spec, dict):
        return {k: pack(s, outputs) for k, s in spec.items()}
    return spec

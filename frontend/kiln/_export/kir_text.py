"""What an exported program's `.kir` text declares about its interface.

The C++ driver reads it (``kiln._C._compiler.program_interface``: parse, shape-infer, verify,
then the graph's parameters, ``weight`` and ``sym_constrain_range`` nodes, the return's operands
and ``out_spec``), so Python never parses `.kir` itself; this module only gives the result
Python types.
"""

from __future__ import annotations

from dataclasses import dataclass

import kiln

__all__ = ["KirInterface", "TypeText", "read_interface"]


@dataclass(frozen=True)
class TypeText:
    """A value's type: kind ``tensor`` (dtype name, sizes: int or symbolic text) or a scalar
    kind ``int``/``float``/``bool`` (dtype None, no sizes)."""

    kind: str
    dtype: str | None = None
    sizes: tuple = ()


@dataclass
class KirInterface:
    name: str
    params: list  # (name, TypeText)
    ranges: dict  # symbol -> (min, max | None)
    weights: list  # (key, TypeText)
    outputs: list  # (value name, TypeText)
    out_spec: str | None


def read_interface(text: str, filename: str = "<kir>") -> KirInterface:
    """The interface of the one graph of `text` (ValueError for invalid text)."""
    d = kiln._C._compiler.program_interface(text, filename)

    def typed(pairs):
        return [(name, TypeText(*t)) for name, t in pairs]

    return KirInterface(d["name"], typed(d["params"]), dict(d["ranges"]), typed(d["weights"]),
                        typed(d["outputs"]), d["out_spec"])

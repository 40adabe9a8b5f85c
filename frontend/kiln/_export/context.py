"""Symbolic sizes of an exported graph's intermediates, for the .kir writer.

The capture types the sizes it reads (a static size is a Python int, a symbolic one a run-time
int carrying its symbol); the writer still spells some attributes from a node's example sizes.
annotate_symbolic_sizes gives every node the sizes shape inference of the whole graph finds,
so those attributes come out symbolic in the exported program.
"""

from __future__ import annotations

import kiln
from kiln._capture.graph_kir import KirWriter, Val

__all__ = ["annotate_symbolic_sizes"]


def _flatten_sizes(node, sizes_of) -> list | None:
    """Symbolic sizes of ``flatten(input, start_dim, end_dim)`` from its input's: the .kir
    writer spells flatten as a reshape to the node's own sizes, so they cannot come from shape
    inference of that reshape."""
    args = list(node.args) + [None] * 3
    src = node.kwargs.get("input", args[0])
    start = node.kwargs.get("start_dim", args[1] if args[1] is not None else 0)
    end = node.kwargs.get("end_dim", args[2] if args[2] is not None else -1)
    sizes = sizes_of(src)
    if sizes is None or type(start) is not int or type(end) is not int:
        return None
    if not sizes:
        return ["1"]
    start, end = start % len(sizes), end % len(sizes)
    merged = "*".join(f"({s})" for s in sizes[start : end + 1])
    return sizes[:start] + [kiln._C._ir.canonical_sym_int(merged)] + sizes[end + 1 :]


def annotate_symbolic_sizes(graph, rounds: int = 8) -> None:
    """Sets every call node's ``meta["sym_sizes"]`` to its sizes as shape inference types the
    whole graph, so the .kir writer spells sizes read from intermediates (and the attributes
    lowerings compute from them) symbolically. Repeats until nothing changes: a node written
    from its own sizes (flatten) is right only once its input is."""
    flattens = (id(kiln.flatten), id(kiln.Tensor.flatten))
    for _ in range(rounds):
        writer = KirWriter(graph)
        try:
            sizes = kiln._C._compiler.value_sizes(writer.write(), f"{graph.name}.kir")
        except Exception:  # noqa: BLE001 - leave the example sizes; the compiler checks them
            return

        def sizes_of(node, writer=writer, sizes=sizes):
            val = writer.values.get(id(node)) if hasattr(node, "meta") else None
            return sizes.get(val.ref) if isinstance(val, Val) else None

        changed = False
        for node in graph.nodes:
            if node.op != "call":
                continue
            val = writer.values.get(id(node))
            if not isinstance(val, Val) or not val.is_tensor:
                continue
            new = _flatten_sizes(node, sizes_of) if id(node.target) in flattens else sizes_of(node)
            if new is None or len(new) != len(val.type.sizes):
                continue
            new = [int(s) if s.lstrip("-").isdigit() else s for s in new]
            if node.meta.get("sym_sizes") != new:
                node.meta["sym_sizes"] = new
                changed = True
        if not changed:
            return

"""The capture context of kiln.export: sizes that are static stay Python ints.

kiln.compile's capture does not track which sizes of intermediate tensors are symbolic, so once
any input is dynamic every ``t.size(d)`` is a run-time int, and using one as a plain number (a
comparison, ``range``) restarts the capture with static shapes. An exported program must keep
its declared dims symbolic, so here a size is a constant when it is one: a static dim of an
input, or a size that shape inference of the graph so far (the C++ shape-infer pass over the
.kir text, as the compiler will type it) finds constant. A size that is exactly a symbol keeps
that symbol, so a comparison on it becomes a guard on the symbol (checked against the Dim's
range) instead of a restart.
"""

from __future__ import annotations

import kiln
from kiln._capture import variables as V
from kiln._capture.context import CaptureContext
from kiln._capture.graph_kir import KirWriter, Val

__all__ = ["ExportContext"]


class ExportContext(CaptureContext):
    def size_of(self, tv: V.TensorVar, dim: int) -> V.VT:
        hint = tv.example.shape[dim]
        if not self.has_symbols:
            return V.ConstVar(hint)
        if hasattr(tv, "sym_of_dim"):  # a graph input: its dynamic dims are known
            if dim not in tv.sym_of_dim:
                return V.ConstVar(hint)
            return super().size_of(tv, dim)
        sizes = self._symbolic_sizes(tv.node)
        text = sizes[dim] if sizes is not None and 0 <= dim < len(sizes) else None
        if text is not None and text.lstrip("-").isdigit():
            return V.ConstVar(hint)
        var = super().size_of(tv, dim)
        names = {name: i for i, (name, _) in enumerate(self.symbols)}
        if text in names and isinstance(var, V.SymIntVar):
            var.sym = names[text]
        return var

    def _symbolic_sizes(self, node) -> list | None:
        """The sizes of `node` as shape inference types them (`s0`, `s0*2`, `8`), or None.

        They are also kept in ``meta["sym_sizes"]``, so the .kir writer types the node and the
        ints read from its sizes (a ``view`` of ``x.size(0)``) symbolically, not by example."""
        try:
            writer = KirWriter(self.graph)
            sizes = kiln._C._compiler.value_sizes(writer.write(), f"{self.graph.name}.kir")
        except Exception:  # noqa: BLE001 - untyped: the size stays a run-time int
            return None
        val = writer.values.get(id(node))
        if not isinstance(val, Val):
            return None
        found = sizes.get(val.ref)
        if found is not None and len(found) == len(val.type.sizes):
            node.meta["sym_sizes"] = [int(s) if s.lstrip("-").isdigit() else s for s in found]
        return found


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

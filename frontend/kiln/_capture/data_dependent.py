"""Which captured values have a size that depends on the data: a boolean-mask selection
(``x[mask]``, ``x[:, mask]``, ``masked_select``) has as many elements as the mask has true
values, and so does what is computed from it in that shape (``order[1:]``, ``boxes[order]``,
``y * 2``). The capture records such a node with its example's size, which holds for that call
only: reading the size (``y.shape[0]``, ``len(y)``, ``y.numel()``, iterating or splitting y)
is a graph break, never a constant baked into the graph. A value that merely reads one (``x *
y.mean()``, ``loss[mask].sum()``) keeps the size of its other operands.
"""

from __future__ import annotations

import operator

import kiln
from kiln._capture.graph import Node, nodes_in

_KEY = "data_dependent_size"
_SELECTIONS = (kiln.masked_select, kiln.Tensor.masked_select)


def _bool_index(index) -> bool:
    items = index if isinstance(index, (tuple, list)) else (index,)
    for item in items:
        ex = item.meta.get("example") if isinstance(item, Node) else None
        if isinstance(ex, kiln.Tensor) and ex.dtype == kiln.bool and ex.dim() > 0:
            return True
    return False


def has_data_dependent_size(node) -> bool:
    """Whether `node`'s example size is one call's data-dependent count (see the module)."""
    if not isinstance(node, Node) or node.op != "call":
        return False
    known = node.meta.get(_KEY)
    if known is not None:
        return known
    if node.target is operator.getitem and len(node.args) == 2 and _bool_index(node.args[1]):
        result = True
    elif node.target in _SELECTIONS:
        result = True
    else:
        inputs = [a for a in nodes_in((node.args, node.kwargs))
                  if isinstance(a.meta.get("example"), kiln.Tensor)]
        dependent = [a for a in inputs if has_data_dependent_size(a)]
        example = node.meta.get("example")
        shape = tuple(getattr(example, "shape", ()))
        # its size is that of an operand whose size is known (a broadcast against it)
        result = bool(dependent) and isinstance(example, kiln.Tensor) and not any(
            tuple(a.meta["example"].shape) == shape for a in inputs if a not in dependent)
    node.meta[_KEY] = result
    return result


def check_size_read(node, what: str) -> None:
    """Raises Unsupported (a graph break) when `what` reads a data-dependent size of `node`."""
    from kiln._capture import variables as V

    reads = getattr(getattr(node, "graph", None), "size_reads", None)
    if reads is not None:  # a loop body: a size read as a Python value is one iteration's
        reads.append(node)
    if has_data_dependent_size(node):
        raise V.Unsupported(f"{what} of a boolean-mask selection (or of a value computed from "
                            "one) depends on the data")

"""Which nodes of a captured graph a compiled part can hold, and why the others run on their
eager kernels: the partitioner's per-node rules (backend_compiled.py)."""

from __future__ import annotations

import operator

import kiln
from kiln._capture import lowerings, lowerings_random
from kiln._capture.graph import (
    Node,
    draws_random,
    has_effects,
    inplace_flag,
    is_impure,
    target_name,
)
from kiln._capture.loops import LoopCall


def requires_grad_of(node: Node) -> bool:
    """Whether a node's value (any tensor of it) required grad when the capture computed it."""
    example = node.meta.get("example")
    values = example if isinstance(example, (tuple, list)) else (example,)
    return any(getattr(v, "requires_grad", False) for v in values)


def needs_grad(part) -> bool:
    """Whether some input of a part requires grad (as the capture's examples say)."""
    return any(requires_grad_of(n) for n in part.inputs)


def kernel_random(node: Node) -> bool:
    """A random call that kernels compute themselves from the default generator's counters
    (the calls lowerings_random.py lowers: dropout, rand, ...), or one that draws nothing
    (evaluation-mode dropout); its lowering declines the forms it cannot draw in eager's order."""
    return (target_name(node.target) in lowerings_random.TARGETS
            and node.kwargs.get("generator") is None)


def compilable_mutation(node: Node) -> bool:
    """An in-place call the capture mapping writes as its op plus ``copy_`` (only mutation, no
    randomness or other effect, no ``out=``): functionalization makes its part pure."""
    if node.kwargs.get("out") is not None or has_effects(node):
        return False
    return lowerings.lowers(node.target)


SMALL_WRITE = ("a write of a few elements into a large input array that the graph reads whole "
               "or returns after the write: the eager kernel writes them in place, where "
               "compiled code rewrites the whole array")
SMALL_WRITE_ELEMENTS = 4096  # arrays from this size up, written by at most 1/16 of them


def small_write_into_input(node: Node, position: dict) -> bool:
    """`A[i, j] -= v` into an array the graph takes as an input, when the graph reads all of the
    array or returns it after the write (`position`: each call's index in the graph):
    functionalized, the part computes the whole new array, and a loop over its rows becomes
    quadratic. A basic-index write after which only parts of the array are read (a time loop's
    `hist[t] = row`) compiles: the program computes the row and the runner stores it into the
    array in place (a region write)."""
    if node.target is operator.setitem and len(node.args) == 3:
        target, value = node.args[0], node.args[2]
        if _masked(node.args[1]):
            return False  # `x[x < 0] = 0`: any number of elements, one masked pass compiled
        basic = _basic_index(node.args[1])
    elif mutates(node) and _basic_view_base(node.args[0]) is not None:
        # `A[:, j] -= v`: an in-place op on a view of the array, the same small write
        target, value = _basic_view_base(node.args[0]), node.args[0]
        basic = True
    else:
        return False
    if not (isinstance(target, Node) and target.op == "placeholder"):
        return False
    big = target.meta.get("example")
    if not isinstance(big, kiln.Tensor):
        return False
    if basic and not _read_after(target, node, position):
        return False
    small = value.meta.get("example") if isinstance(value, Node) else None
    written = small.numel() if isinstance(small, kiln.Tensor) else 1
    if _symbolic(target) and not (isinstance(value, Node) and _symbolic(value)):
        # the array's size is a run-time one (the example of a small first call says little)
        # and the write's is fixed: the row of a time loop over however many steps
        return written * 16 <= SMALL_WRITE_ELEMENTS
    if big.numel() < SMALL_WRITE_ELEMENTS:
        return False
    return written * 16 <= big.numel()


def _masked(index) -> bool:
    """Whether a subscript holds a boolean mask."""
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, Node) and isinstance(i.meta.get("example"), kiln.Tensor) and
               i.meta["example"].dtype == kiln.bool for i in items)


def _basic_index(index) -> bool:
    """Whether a subscript is basic indexing (integers, slices, ...), which selects a region."""
    items = index if isinstance(index, tuple) else (index,)
    return all(i is Ellipsis or isinstance(i, (int, slice))
               or (isinstance(i, Node) and not isinstance(i.meta.get("example"), kiln.Tensor))
               for i in items)


def _element_index(index, ndim: int) -> bool:
    """Whether a subscript picks one element by integers (`A[j, j]` of a matrix)."""
    items = index if isinstance(index, tuple) else (index,)
    return len(items) == ndim and all(
        type(i) is int or (isinstance(i, Node) and type(i.meta.get("example")) is int)
        for i in items)


def _read_after(array: Node, write: Node, position: dict) -> bool:
    """Whether a node after `write` reads more of `array` than single elements, or the graph
    returns it. A later write into it is no such read, and neither is
    `A[j, j]` after `A[i, j] -= x` (`A[i, j] /= A[j, j]`): the compiled graph reads that element
    where it is used, and the writes still land as regions. A slab read (`ccol[:, :, k - 1]`
    after a write of `ccol[:, :, k]`) would make the program hold the whole array as the write
    left it: the write stays eager."""
    at = position[id(write)]
    # a loop node runs outside compiled parts: the writes have landed by then, and what reads
    # the array after it reads it from memory
    until = min((position.get(id(u), at) for u in array.users
                 if u.op == "call" and isinstance(u.target, LoopCall)
                 and position.get(id(u), -1) > at), default=None)
    for user in array.users:
        if user.op != "call":
            return True
        where = position.get(id(user), -1)
        if where <= at or (until is not None and where >= until):
            continue
        if user.target is operator.setitem and user.args[0] is array and \
                _basic_index(user.args[1]):
            continue
        if user.target is operator.getitem and user.args[0] is array and \
                _element_index(user.args[1], array.meta["example"].dim()):
            continue
        return True
    return False


def _basic_view_base(node) -> Node | None:
    """The graph input that `node` is a basic-indexing view of (`A[:, j]`, `A[i]`, `A[1:-1]`
    and chains of them), else None."""
    while isinstance(node, Node) and node.op == "call" and node.target is operator.getitem:
        index = node.args[1]
        items = index if isinstance(index, tuple) else (index,)
        if any(isinstance(i, Node) and isinstance(i.meta.get("example"), kiln.Tensor)
               for i in items):
            return None  # advanced indexing: a copy, not a view
        node = node.args[0]
    return node if isinstance(node, Node) and node.op == "placeholder" else None


def _symbolic(node: Node) -> bool:
    return any(not isinstance(s, int) for s in node.meta.get("sym_sizes") or ())


def impure_reason(node: Node) -> str:
    """Why a node with effects runs on its eager kernel (explain's and the logs' fallbacks)."""
    if node.kwargs.get("out") is not None:
        return "a call with out= (writes a tensor the program does not own)"
    if draws_random(node):
        return "a random draw with no in-kernel sampler for these arguments (eager's stream)"
    if has_effects(node):
        return "an effect (printing, global state, an assertion) that runs as the code runs it"
    return "an in-place call with no lowering (it mutates its operand on the eager kernel)"


def mutates(node: Node) -> bool:
    """Whether a call node is an in-place op: its value is its mutated first operand."""
    if not (node.args and isinstance(node.args[0], Node)):
        return False
    if kernel_random(node):  # random, so impure either way: in place by name or when asked
        return target_name(node.target).endswith("_") or inplace_flag(node.target, node.args,
                                                                        node.kwargs)
    return is_impure(node) and not has_effects(node)


def assertions_later(calls: list[Node]) -> list[Node]:
    """`calls` with each tensor assertion (``kiln._assert`` of a tensor condition: a graph break
    avoided, an eager node that reads one value) moved past the pure nodes after it, so the
    compiled nodes around it form one part, and the assertions run together after it. An
    assertion stays before anything with an effect or a mutation: it still raises before any
    of those happens."""
    out: list[Node] = []
    waiting: list[Node] = []
    for n in calls:
        if n.target is kiln._assert:
            waiting.append(n)
            continue
        if waiting and (is_impure(n) or mutates(n)):
            out += waiting
            waiting = []
        out.append(n)
    return out + waiting


def is_multi_result(node: Node) -> bool:
    """A node whose value is a tuple or list of tensors, read through getitem nodes."""
    return isinstance(node.meta.get("example"), (tuple, list))


def storage_of(value) -> int:
    if isinstance(value, kiln.Tensor) and value.numel() > 0:
        return value._storage_ptr()
    return 0

"""Whether one evaluation of a loop body stands for the iterations at other index values.

The body is evaluated at the first index. A slice bounded by the index (`x[s:s + batch]`,
`x[k * step:k * step + w]`) has that iteration's length everywhere the capture used it: in the
graph, and in Python values taken from it (`len(xb)`, `xb.size`, `np.arange(len(xb))`), which
are constants. Where the last slices are clipped by the end of the array, those iterations are
different programs. This module finds them: the shapes of the body's index-dependent values are
worked out again at another index value, on stand-ins (zero-stride tensors of the examples'
shapes, so no data is read or written), and compared with the first iteration's. The loop
node then covers the iterations up to the first that differs, and the rest run unrolled.
"""

from __future__ import annotations

import operator

import kiln
from kiln._capture.graph import Node, is_impure, replace_nodes

_DIFFERS = object()  # a shape or int changed, or an evaluation failed where the first passed


class Unverified(Exception):
    """The stand-in evaluation failed at the first index itself: nothing can be compared."""


def _loop_index(body) -> Node | None:
    """The body's input that is the loop index, if the body reads it."""
    return next((n for n in body.inputs if n.meta.get("loop_index")), None)


def _dependent_calls(body, index: Node, dep: set, value: int):
    """Each index-dependent call node of `body` with its arguments when the index is `value`
    (values the caller put in `env` for earlier nodes, stand-ins for the rest), and `env`."""
    env: dict = {id(index): value}

    def arg(n: Node):
        return env[id(n)] if id(n) in env else _stand_in(n.meta.get("example"))

    for node in body.nodes:
        if node.op == "call" and id(node) in dep:
            yield node, replace_nodes(node.args, arg), replace_nodes(node.kwargs, arg), env


def _inner_loop(node: Node) -> bool:
    """Whether a body node is an inner loop node or one of its results: it keeps the shapes of
    what it carries at every index (its capture checked that), so the stand-in evaluations
    neither run it nor compare it, and the typing leaves it out."""
    from kiln._capture.loops import LoopCall

    if node.op != "call":
        return False
    if node.target is operator.getitem and isinstance(node.args[0], Node):
        node = node.args[0]
    return node.op == "call" and isinstance(node.target, LoopCall)


def _dependents(body, index: Node) -> set:
    """The ids of the body nodes computed from the index."""
    dep = {id(index)}
    for node in body.nodes:
        if node.op != "call":
            continue
        found = []
        replace_nodes((node.args, node.kwargs), lambda n: found.append(id(n) in dep) or n)
        if any(found):
            dep.add(id(node))
    return dep


def _reads_int_of_index(node: Node, dep: set) -> bool:
    """Whether a call takes a Python value (an int) computed from the index: its result's shape
    may then differ between iterations."""
    found = []

    def visit(n: Node) -> Node:
        found.append(id(n) in dep and not isinstance(n.meta.get("example"), kiln.Tensor))
        return n

    replace_nodes((node.args, node.kwargs), visit)
    return any(found)


def _stand_in(example):
    """A tensor of the example's dtype and shape whose data does not matter: small ones real
    (any op takes them), large ones one element seen through zero strides."""
    if isinstance(example, kiln.Tensor):
        if example.numel() <= 1 << 16:
            return kiln.zeros(tuple(example.shape), dtype=example.dtype)
        return kiln.zeros((), dtype=example.dtype).expand(*example.shape)
    return example


def _shape(value):
    if isinstance(value, kiln.Tensor):
        return tuple(value.shape)
    if type(value) in (tuple, list):
        return tuple(_shape(v) for v in value)
    return None


def signature(body, index: Node, dep: set, value: int) -> list | object:
    """The shapes of the index-dependent values with the index at `value` (in node order), or
    _DIFFERS when a dependent tensor's shape already differs from its example's."""
    shapes = []
    for node, args, kwargs, env in _dependent_calls(body, index, dep, value):
        if _inner_loop(node):
            env[id(node)] = _stand_in(node.meta.get("example"))
            continue
        if is_impure(node):  # not run: the region it writes, and what it writes, are compared
            if node.target is operator.setitem:
                try:
                    shapes.append((_shape(args[0][args[1]]), _shape(args[2])))
                except Exception:  # noqa: BLE001 - out of range here: not the same program
                    return _DIFFERS
            else:
                shapes.append(_shape((args, kwargs)))
            env[id(node)] = _stand_in(node.meta.get("example"))
            continue
        if not _reads_int_of_index(node, dep):
            # only tensors computed from the index, whose shapes are the examples' so far: the
            # result's shape is the example's too (nothing runs)
            shapes.append(_shape(node.meta.get("example")))
            env[id(node)] = _stand_in(node.meta.get("example"))
            continue
        try:
            out = node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - fails at this index: not the same program
            return _DIFFERS
        example = node.meta.get("example")
        if _shape(out) != _shape(example) or (
                type(example) is int and type(out) is not int):
            return _DIFFERS
        shapes.append(_shape(out))
        env[id(node)] = out
    return shapes


def slices_by_index(body) -> bool:
    """Whether the body slices by the index (`x[s:s + batch]`, `x.narrow(0, k, w)`): where the
    sizes or the loop's bounds are run-time, which iterations an array's end clips changes from
    call to call, so it cannot be settled once at capture."""
    index = _loop_index(body)
    if index is None:
        return False
    dep = _dependents(body, index)
    # (x[t] selects, `x[t] * t` scales: their shapes do not follow the index)
    return any(node.op == "call" and node.target in _INDEXING and id(node) in dep
               and _slice_by_index(node.args[1:], dep) for node in body.nodes)


_INDEXING = (operator.getitem, operator.setitem, kiln.Tensor.__getitem__, kiln.Tensor.__setitem__)


def _slice_by_index(value, dep: set) -> bool:
    if isinstance(value, slice):
        return any(isinstance(b, Node) and id(b) in dep
                   for b in (value.start, value.stop, value.step))
    if type(value) in (tuple, list):
        return any(_slice_by_index(v, dep) for v in value)
    return False


def uniform_until(body, items: list, first: int) -> int:
    """The position in `items` (the loop's index values) of the first iteration that the body
    evaluated at items[first] does not stand for, or len(items). Iterations that differ are
    taken to be a suffix (slices clipped by the end of an array), found by bisection."""
    index = _loop_index(body)
    if index is None:
        return len(items)
    dep = _dependents(body, index)
    if len(dep) == 1:
        return len(items)
    reference = signature(body, index, dep, items[first].const())
    if reference is _DIFFERS:
        raise Unverified("the body's shapes could not be worked out at other index values")

    def same(k: int) -> bool:
        return signature(body, index, dep, items[k].const()) == reference

    last = len(items) - 1
    if same(last):
        if same((first + last) // 2):
            return len(items)
        raise Unverified("an iteration between the first and the last is another program")
    lo, hi = first, last  # items[lo] is the first's program, items[hi] is not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if same(mid):
            lo = mid
        else:
            hi = mid
    return hi


# --- bodies whose sizes follow the index ------------------------------------------------------
# A triangular loop (`x[i] = (b[i] - L[i, :i] @ x[:i]) / L[i, i]`, a Cholesky or Gram-Schmidt
# column) is a different program at every index as far as shapes go, but one program when its
# sizes are written with the index as a symbol. The body is typed that way by the op table's
# shape rules; the stand-in shapes at other index values must be what those sizes give there,
# the carried values must keep their shapes, and the sizes the capture read as Python numbers
# must not follow the index (one iteration's number would be baked in).

def index_sized(body, items: list, first: int) -> bool:
    """Whether the body, typed with the loop index as a size symbol, stands for the iterations
    at every index in `items[first:]` (ints, or the range's items)."""
    index = _loop_index(body)
    if index is None or len(items) - first < 3:
        return False
    items = [v if type(v) is int else v.const() for v in items]
    dep = _dependents(body, index)
    if any(id(n) in dep for n in body.size_reads):
        return False
    typed = _typed(body, index)
    if typed is None:
        return False
    sizes, symbol, assumptions = typed
    last = len(items) - 1
    # index values checked besides the first: the second, two inside, the last
    picks = sorted({first + 1, (first + last) // 2, first + (last - first) // 4, last})
    outputs = [n for n in body.outputs
               if isinstance(n, Node) and isinstance(n.meta.get("example"), kiln.Tensor)]
    for k in picks:
        value = items[k]
        values = {symbol: value}
        try:
            if not all(kiln._C._ir.evaluate_relation(r, values) for r in assumptions):
                return False
        except ValueError:  # a relation over another symbol (an enclosing loop's index)
            return False
        shapes = _run_shapes(body, index, dep, value)
        if shapes is None:
            return False
        for key, got in shapes.items():
            want = sizes.get(key)
            if want is None or not _sizes_match(want, got, values):
                return False
        if any(shapes.get(id(n), tuple(n.meta["example"].shape)) != tuple(n.meta["example"].shape)
               for n in outputs):
            return False  # a carried value would change shape
    return True


def empty_at_capture(body) -> bool:
    """Whether a value computed from the index is empty at the index the body was captured at
    because of its index-dependent size (`L[i, :i]` at i = 0; not `A[i, :0]`, empty at every
    index, what an inner loop's peeled first iteration reads)."""
    index = _loop_index(body)
    dep = _dependents(body, index) if index is not None else set()
    empty = [n for n in body.nodes if id(n) in dep and
             isinstance(n.meta.get("example"), kiln.Tensor) and n.meta["example"].numel() == 0]
    if not empty:
        return False
    typed = _typed(body, index)
    if typed is None:
        return True
    sizes, symbol, _ = typed
    return any(id(n) not in sizes or
               any(not str(d).lstrip("-").isdigit() for d in sizes[id(n)]) for n in empty)


def _typed(body, index: Node):
    """The body's call nodes typed by the shape rules with the index as a symbol: {id(node):
    sizes as SymInt text (an int's value as a one-element list)}, the index's symbol, and the
    relations the rules assumed; None when some index-dependent value cannot be typed."""
    from kiln._capture.backend_compiled import _RunWriter
    from kiln._capture.graph_build import Val

    calls = [n for n in body.nodes if n.op == "call" and not _inner_loop(n)]
    loops = {id(n) for n in body.nodes if _inner_loop(n)}
    for n in calls:  # a value an inner loop computes has no type here
        found = []
        replace_nodes((n.args, n.kwargs), lambda a: found.append(id(a) in loops) or a)
        if any(found):
            return None
    writer = _RunWriter(f"{body.name}_sizes", list(body.inputs), calls, [], {})
    try:
        writer.write()
    except Exception:  # noqa: BLE001 - a body the rules cannot type: not this kind of loop
        return None
    symbol = writer._symbols.get(index.meta["sym"])
    if symbol is None or writer.opaque:
        return None
    sizes = {}
    for node in calls:
        val = writer.values.get(id(node))
        if isinstance(val, Val) and val.is_tensor:
            sizes[id(node)] = list(val.type.sizes)
        elif isinstance(val, Val) and val.type == "int" and val.sym is not None:
            sizes[id(node)] = [val.sym]
    return sizes, symbol, list(writer.builder.assumptions())


def _sizes_match(want: list, got, values: dict) -> bool:
    if type(got) is int:
        got = (got,)
    if not isinstance(got, tuple) or len(got) != len(want) or \
            not all(type(g) is int for g in got):
        return False
    return all(w == str(g) or kiln._C._ir.evaluate_relation(f"{w} == {g}", values)
               for w, g in zip(want, got, strict=True))


def _run_shapes(body, index: Node, dep: set, value: int) -> dict | None:
    """The shape (an int's value) of each index-dependent call node with the index at
    `value`, worked out on stand-ins; None when a node fails there."""
    shapes: dict = {}
    for node, args, kwargs, env in _dependent_calls(body, index, dep, value):
        if _inner_loop(node):  # not run (see _inner_loop)
            env[id(node)] = _stand_in(node.meta.get("example"))
            continue
        if is_impure(node):  # not run: the region written must exist and take the value
            target = args[0]
            try:
                if node.target is operator.setitem:
                    target, values = target[args[1]], args[2:]
                else:  # an in-place op (`y[:k] += v`): its value is its operand
                    values = [*args[1:], *kwargs.values()]
                if not isinstance(target, kiln.Tensor):
                    return None
                for v in values:
                    if isinstance(v, kiln.Tensor) and \
                            tuple(kiln.broadcast_shapes(target.shape, v.shape)) != \
                            tuple(target.shape):
                        return None
            except Exception:  # noqa: BLE001 - out of range at this index
                return None
            if node.target is not operator.setitem:
                shapes[id(node)] = tuple(target.shape)
                env[id(node)] = target
            continue
        try:
            out = node.target(*args, **kwargs)
        except Exception:  # noqa: BLE001 - fails at this index: not the same program
            return None
        if type(out) is int or isinstance(out, kiln.Tensor):
            shapes[id(node)] = out if type(out) is int else tuple(out.shape)
        elif not isinstance(out, (bool, float)):
            return None
        env[id(node)] = out
    return shapes

"""Python `for` loops over a long `range`, captured as one loop node instead of unrolled.

Unrolled, a 1,000-step time loop records its body 1,000 times: a graph of thousands of nodes
that takes seconds to compile and is captured again for every other step count. Here the body
is evaluated once into a graph of its own (`BodyGraph`): the locals it rebinds (the loop-carried
values) are its inputs and outputs, and the values it reads from outside the loop are lifted to
inputs. The outer graph gets one `LoopCall` node, which runs the body graph `trips` times,
feeding the carried outputs back; the backend compiles the body like any graph
(backend_compiled.py). Writes into arrays that live outside the loop (NumPy's
`B[1:-1, 1:-1] = ...`) go into their memory on every iteration, as the Python loop's would.

One evaluation stands for every iteration only when nothing but the index differs between
them (the index, when read, is a run-time int input of the body, kept out of anything compiled
as a constant), so a loop is captured this way when: it runs at least `MIN_TRIPS` times (or
its bounds are run-time ints); its index is not needed as a Python value (a branch on it); it
has no `return`, `yield`, `try` or `with`, and at most one `break`, as `if <tensor>: break`
with no tensor written after the test (the node tests the condition on each iteration and,
when it breaks, returns what the locals held at the test); it changes no Python object made
before it (lists, dicts, attributes, cells, globals); it records at least one tensor op; and
every local it rebinds keeps its dtype, shape and kind (a tensor) or its value (anything
else). Any other loop is unrolled as before, which is always correct; so is a constant loop
whose unrolled graph stays small (`UNROLL_OPS`), which fuses across iterations. The shapes
that depend on the index are checked at other index values (`loops_uniform.py`): iterations
whose slices an array's end clips (a shorter last chunk) are not the first one's program, so
the node stops before them and they run unrolled. A body whose slice lengths follow the index
(`L[i, :i] @ x[:i]`, a triangular solve) is one program when typed with the index as a size
symbol: when the shape rules' sizes match the stand-in shapes at other indices, the node covers
every iteration (`loops_uniform.index_sized`); the first iteration is peeled off when its slices
are empty.
"""

from __future__ import annotations

import copy
import operator

import kiln
from kiln._capture import logs
from kiln._capture import variables as V
from kiln._capture.graph import Graph, Node, nodes_in, replace_nodes

MIN_TRIPS = 8
# A loop of a constant count whose unrolled graph has at most UNROLL_OPS ops, on tensors of
# fewer than SMALL_ELEMENTS elements, is unrolled: an iteration's work is then a few
# microseconds, which the node's call per iteration would add to. Larger tensors run faster as
# a node (each iteration's kernels stay small and cache-friendly) and compile faster.
UNROLL_OPS = 1024
SMALL_ELEMENTS = 1 << 16
# ... and whose writes that follow the index (`out[:, i, j, :] = v`) number at most
# UNROLL_MOVING_WRITES over the unrolled iterations: unrolled, n writes into distinct regions of
# one array lower to a chain of n region tests per element of it (quadratic work, and code that
# compiles for seconds); as a node each iteration writes its region in place.
UNROLL_MOVING_WRITES = 16
# Iterations after the node that the body does not stand for (slices clipped by an array's end)
# are unrolled when they record at most TAIL_OPS ops; else the whole loop unrolls.
TAIL_OPS = 1024

_REJECTED_OPS = {
    "RETURN_VALUE": "returns from inside the loop",
    "YIELD_VALUE": "yields inside the loop",
    "STORE_GLOBAL": "assigns a global",
    "STORE_DEREF": "assigns a closure variable",
    "DELETE_FAST": "deletes a local",
    "STORE_NAME": "assigns a name",
    "LOAD_CLOSURE": "makes a closure",
    "BEFORE_WITH": "enters a with block",
    "PUSH_EXC_INFO": "handles an exception",
}


INDEX = "the loop index"  # BodyGraph.sources entry of the index input


class NotALoopNode(Exception):  # noqa: N818 - a signal: unroll the loop instead
    pass


MAX_PEELED = 4  # iterations a loop node may leave unrolled before it for an inner loop's sake


class SlicesNeedStaticSizes(NotALoopNode):
    """The body slices by the index while sizes or bounds are run-time: the capture starts
    again with static sizes (guarded, so another size captures again) and the iterations an
    array's end clips are settled at capture."""


class PeelFirst(NotALoopNode):
    """The body's sizes follow the index, and at the first index some are 0 (`L[i, :i]` at
    i = 0): the capture may take shortcuts for empty values (an in-place op on one is
    invisible) that other iterations must not take. The first iteration runs unrolled and the
    body is captured at the second."""


class BecomesTensor(NotALoopNode):
    """A local that starts as a Python number and is a tensor after one iteration (`b = 0.0`,
    then `b = b - lr * grad`): after the first iteration, which runs unrolled, every iteration
    is the same and the rest may be a node."""

    def __init__(self, name: str, after: V.TensorVar) -> None:
        super().__init__(f"{name!r} starts as a number and becomes a tensor")
        self.name, self.after = name, after


def _as_zero_dim(frame, number: V.VT, like: V.TensorVar) -> V.VT:
    """`number` as a 0-d tensor (or array) of `like`'s dtype, recorded in the enclosing graph."""
    from kiln._capture import ops

    if like.example.dim() != 0:
        raise NotALoopNode("a number becomes a tensor of more than 0 dims")
    var = ops.record(frame.ctx, kiln.full, [V.ConstVar(()), number],
                     {"dtype": V.ConstVar(like.example.dtype)})
    var.numpy = like.numpy
    return var


def _number(v: V.VT) -> bool:
    return isinstance(v, V.ConstVar) and type(v.value) in (int, float) or (
        isinstance(v, V.SymIntVar))


class BodyGraph(Graph):
    """The graph of one iteration: carried values are inputs made up front (`carried`), and a
    node of an enclosing graph used by a call is lifted to an input the first time."""

    def __init__(self, outer: Graph, name: str, symbolic: bool = False) -> None:
        super().__init__(name)
        self.outer = outer
        self.symbolic = symbolic  # the enclosing graph has symbolic sizes
        self.grad_enabled = outer.grad_enabled
        self.lifted: dict[int, Node] = {}
        self.size_reads: list[Node] = []  # body values whose sizes the capture read as numbers
        # an inner loop of run-time length `range(index)` peeled its first iteration: the node
        # stands only for indices above this (checked where the node is made)
        self.index_above: int | None = None
        # per input: the enclosing graph's node, None for a carried value, or INDEX
        self.sources: list = []

    def placeholder(self, name: str, example, sym_sizes=None) -> Node:
        # A value first read inside the loop (an array global) is an input of the enclosing
        # graph; calls lift it from there like any outside value.
        return self.outer.placeholder(name, example, sym_sizes)

    def carried(self, name: str, example, outer_node: Node) -> Node:
        self.sources.append(None)
        return super().placeholder(f"{name}_in", example, self._sizes_from(outer_node))

    def _sizes_from(self, node: Node):
        """The symbolic sizes of an enclosing graph's tensor. The body is compiled for these
        sizes whatever the example's are, so one the enclosing graph could not type (an opaque
        call's result) while it has symbols makes the loop unroll instead."""
        sizes = node.meta.get("sym_sizes")
        example = node.meta.get("example")
        if sizes is None and self.symbolic and node.op == "call" and \
                isinstance(example, kiln.Tensor) and example.dim() > 0:
            raise NotALoopNode(f"the sizes of {node.name}, read by the body, are not known "
                               "symbolically")
        return sizes

    def index(self, name: str, example: int) -> Node:
        """The loop index as an int input with a symbol of its own: sizes and values computed
        from it stay run-time (graph_build.varies_per_iteration keeps it out of constants)."""
        self.sources.append(INDEX)
        node = super().placeholder(name, example)
        node.meta["sym"] = f"loop_{name}"
        node.meta["loop_index"] = True
        return node

    def lift(self, node: Node) -> Node:
        if node.graph is self:
            return node
        found = self.lifted.get(id(node))
        if found is None:
            example = node.meta.get("example")
            if type(example) in (int, float) and node.op == "placeholder":
                # a number the entry passes in (a tolerance that changed between calls, a
                # dynamic count): the same number on every iteration
                found = super().placeholder(node.name, example)
                if node.meta.get("sym") is not None:
                    found.meta["sym"] = node.meta["sym"]
                self.lifted[id(node)] = found
                self.sources.append(node)
                return found
            if not isinstance(example, kiln.Tensor):
                raise NotALoopNode("the body reads a Python value computed from tensors")
            found = super().placeholder(node.name, example, self._sizes_from(node))
            self.lifted[id(node)] = found
            self.sources.append(node)
        return found

    def call(self, target, args: tuple, kwargs: dict, example, loc=None) -> Node:
        lift = self.lift
        return super().call(target, replace_nodes(args, lift), replace_nodes(kwargs, lift),
                            example, loc)

    def output(self, values: list) -> Node:
        return super().output(replace_nodes(list(values), self.lift))


class LoopCall:
    """A graph node's target: the runs of `body` a `range(start, stop, step)` loop makes (the
    node's first three arguments, ints known at run time), on the node's other arguments (the
    body graph's inputs, in order), each run's first outputs replacing the carried inputs at
    `carried_slots` and the index going to `index_slot` when the body reads it. Returns the
    last run's outputs (the carried inputs when it makes no run). `run_body` is the body as the
    backend compiled it; without a backend (a custom one, KILN_BACKEND=eager) the body runs as
    Python. A body the backend compiled to one part has `kiln_loop`: the iterations run in C++
    up to the first whose inputs the compiled body does not take, and the rest here."""

    __module__ = "kiln.compiled"

    def __init__(self, body: BodyGraph, carried_slots: list[int], index_slot: int | None,
                 breaks_when: bool | None = None, run_body=None):
        self.body = body
        self.carried_slots = carried_slots
        self.index_slot = index_slot
        self.breaks_when = breaks_when  # a break test's value that ends the loop, or None
        self.run_body = run_body
        self.__name__ = self.__qualname__ = "kiln_loop"

    def with_body(self, run_body) -> LoopCall:
        loop = LoopCall(self.body, self.carried_slots, self.index_slot, self.breaks_when,
                        run_body)
        loop.index_out = self.index_out
        return loop

    # (the index's name, its value before the loop or _UNBOUND) when the node also returns the
    # index it stopped at (read after a loop that breaks or has a run-time length)
    index_out = None

    def __call__(self, start: int, stop: int, step: int, *args):
        run = self.run_body if self.run_body is not None else self.body.forward
        args = list(args)
        outputs = tuple(args[slot] for slot in self.carried_slots)
        index_slot = self.index_slot
        breaks_when = self.breaks_when
        last = self.index_out[1] if self.index_out is not None else None
        whole = getattr(run, "kiln_loop", None)  # the body is one compiled part: loop in C++
        native = None
        if whole is not None and start != stop:
            native = whole(start, stop, step, args, self.carried_slots,
                           -1 if index_slot is None else index_slot, breaks_when)
        if native is not None:
            at, ran, broke = native
            if broke:  # the run at `at` met the break: its break values are the loop's
                n = (len(ran) - 1) // 2
                return self._with_index(tuple(ran[1 + n:]), at)
            if ran is not None:
                n = (len(ran) - 1) // 2
                outputs = ran if breaks_when is None else ran[1:1 + n]
                last = at - step
            start = at  # where an iteration's inputs did not fit the compiled body, if any
        for i in range(start, stop, step):
            last = i
            if index_slot is not None:
                args[index_slot] = i
            outputs = run(*args)
            if breaks_when is not None:  # (test, the iteration's results, the break's)
                n = (len(outputs) - 1) // 2
                if bool(outputs[0]) == breaks_when:
                    return self._with_index(tuple(outputs[1 + n:]), last)
                outputs = outputs[1:1 + n]
            for k, slot in enumerate(self.carried_slots):
                args[slot] = outputs[k]
        return self._with_index(tuple(outputs), last)

    def _with_index(self, outputs: tuple, last) -> tuple:
        if self.index_out is None:
            return outputs
        if last is _UNBOUND:  # no trips, and the index had no value: Python's error
            raise UnboundLocalError(f"cannot access local variable {self.index_out[0]!r} where "
                                    "it is not associated with a value")
        return (*outputs, last)

    def __repr__(self) -> str:
        return f"<kiln loop of {self.body.name}>"


# --- capture ----------------------------------------------------------------------------------


class BreakPoint:
    """The one `if cond: break` of a loop body: the conditional jump before the break block,
    whether a true condition breaks, and, once the iteration passed it, the condition and the
    locals there (what the loop leaves when it breaks)."""

    def __init__(self, offset: int, breaks_when: bool, break_is_fallthrough: bool) -> None:
        self.offset = offset
        self.breaks_when = breaks_when
        self.break_is_fallthrough = break_is_fallthrough
        self.cond = None
        self.locals: dict | None = None
        self.nodes_before = 0  # body nodes recorded before the condition was tested


def _body_instructions(frame, for_index: int, exit_offset: int):
    """The loop body's instructions (after FOR_ITER, up to the exit), checked for a shape that
    one evaluation can stand for, and its BreakPoint if it has one `if cond: break`."""
    head = for_index  # a jump back lands on the EXTENDED_ARGs of a long loop's FOR_ITER
    while head > 0 and frame.insts[head - 1].opname == "EXTENDED_ARG":
        head -= 1
    start = frame.insts[head].offset
    body = []
    for inst in frame.insts[for_index + 1:]:
        if inst.offset >= exit_offset:
            break
        if inst.opname in _REJECTED_OPS:
            raise NotALoopNode(f"the loop {_REJECTED_OPS[inst.opname]}")
        body.append(inst)
    from kiln._capture.bytecode import in_exception_region

    if any(in_exception_region(frame.code, inst.offset) for inst in body):
        raise NotALoopNode("the loop is inside or holds a try block")
    breaks = [k for k, inst in enumerate(body)
              if "JUMP" in inst.opname and not (start <= inst.argval < exit_offset)]
    if not breaks:
        return body, None
    if len(breaks) > 1:
        raise NotALoopNode("the loop has more than one break")
    return body, _break_point(body, breaks[0], exit_offset)


def _break_point(body: list, k: int, exit_offset: int) -> BreakPoint:
    """`POP_JUMP_IF_x; POP_TOP; JUMP exit` (the break block falls through from the test) or a
    test jumping to `POP_TOP; JUMP exit`: CPython 3.11's `if cond: break`."""
    jump = body[k]
    if jump.opname != "JUMP_FORWARD" or jump.argval != exit_offset or k < 1 or \
            body[k - 1].opname != "POP_TOP":
        raise NotALoopNode("the loop breaks in a way other than `if cond: break`")
    block = body[k - 1].offset
    tests = ("POP_JUMP_FORWARD_IF_TRUE", "POP_JUMP_FORWARD_IF_FALSE")
    before = body[k - 2] if k >= 2 else None
    if before is not None and before.opname in tests and before.argval == jump.offset + 2:
        # falls through into the break block: a true test breaks unless it jumps on true
        return BreakPoint(before.offset, before.opname.endswith("FALSE"), True)
    into = [i for i in body if i.opname in tests and i.argval == block]
    if len(into) != 1:
        raise NotALoopNode("the loop breaks in a way other than `if cond: break`")
    return BreakPoint(into[0].offset, into[0].opname.endswith("TRUE"), False)


def record_break(frame, cond: V.VT, inst) -> None:
    """The loop body reached its break test: remember the condition and the locals, and go on
    along the path that does not break (what the rest of the iteration computes)."""
    bp = frame.loop_break
    if not isinstance(cond, V.TensorVar) or bp.cond is not None:
        raise NotALoopNode("the break test is not a tensor condition tested once per iteration")
    bp.cond = cond
    bp.locals = dict(frame.locals)
    bp.nodes_before = len(frame.ctx.graph.nodes)
    if bp.break_is_fallthrough:
        frame.jump_to(inst.argval)


def _index_name(frame, body: list) -> tuple[str, bool]:
    """The loop index's name, and whether the body reads it."""
    first = body[0] if body else None
    if first is None or first.opname != "STORE_FAST":
        raise NotALoopNode("the loop unpacks its index")
    name = first.argval
    if name in frame.code.co_cellvars:
        raise NotALoopNode("the loop index is a closure variable")
    return name, any(i.opname == "LOAD_FAST" and i.argval == name for i in body)


def iterated_next(frame) -> bool:
    """Whether the value a call returns is iterated by a `for` loop right away (GET_ITER,
    FOR_ITER follow the call)."""
    following = [i.opname for i in frame.insts[frame.ip:frame.ip + 2]]
    return following == ["GET_ITER", "FOR_ITER"]


def _read_outside(frame, names: list, body: list) -> set:
    """The names among `names` that code outside the loop body reads, but for reads of another
    loop's index inside that loop (`for j in range(i)` then `for j in range(i, n)`: the second
    loop's body reads its own j)."""
    inside = {id(i) for i in body}
    insts = frame.insts
    here = body[0].offset if body else -1
    own = []  # (first offset, end offset, index name) of each other `for name in ...` body
    for k, i in enumerate(insts[:-1]):
        if i.opname == "FOR_ITER" and insts[k + 1].opname == "STORE_FAST" and \
                not insts[k + 1].offset <= here < i.argval:  # not a loop around this one
            own.append((insts[k + 1].offset, i.argval, insts[k + 1].argval))
    return {i.argval for i in insts
            if i.opname == "LOAD_FAST" and i.argval in names and id(i) not in inside and
            not any(lo < i.offset < hi and name == i.argval for lo, hi, name in own)}


def _same_kind(before: V.VT, after: V.VT) -> bool:
    """Whether a rebound local is the same for every iteration: a tensor of the same dtype, shape
    and kind (array or tensor), or the same Python value."""
    if isinstance(before, V.TensorVar) or isinstance(after, V.TensorVar):
        if not (isinstance(before, V.TensorVar) and isinstance(after, V.TensorVar)):
            return False
        a, b = before.example, after.example
        return (a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
                and a._device_str == b._device_str and before.numpy == after.numpy
                and a.requires_grad == b.requires_grad)
    if after is before:
        return True
    if isinstance(before, V.ConstVar) and isinstance(after, V.ConstVar):
        return type(before.value) is type(after.value) and before.value == after.value
    return False


def try_capture(frame, inst, it: V.IteratorVar) -> bool:
    """At a FOR_ITER over a fresh `range`: records the whole loop as one node and continues
    after it (True), or leaves everything as it was so the loop unrolls (False)."""
    ctx = frame.ctx
    if not ctx.loop_nodes:
        return False
    symbolic = it.sym_bounds is not None
    first = it.pos  # 1 after a peeled first iteration
    trips = len(it.items) - first
    if first != it.peeled or trips <= 0 or (trips < MIN_TRIPS and not symbolic):
        return False
    for_index = frame.ip - 1
    loop_loc, loop_line = ctx.loc, frame.lineno
    try:
        body_insts, brk = _body_instructions(frame, for_index, inst.argval)
        index_name, index_read = _index_name(frame, body_insts)
        stored = list(dict.fromkeys(i.argval for i in body_insts if i.opname == "STORE_FAST"))
        live = _read_outside(frame, stored, body_insts)
        if index_name in live and any(i.opname == "STORE_FAST" and i.argval == index_name
                                      for i in body_insts[1:]):
            # what the loop leaves is the body's last value of it, not the range's
            raise NotALoopNode("the body assigns the loop index, which is read after the loop")
        # after a loop whose length only the run knows, the index is what the node returns
        returns_index = (symbolic or brk is not None) and index_name in live
        index_default = _index_before(frame, index_name) if returns_index else None
    except NotALoopNode as e:
        logs.log("graph", f"loop at line {loop_line} unrolled: {e}")
        return False
    stored.remove(index_name)
    from kiln._capture.symbolic import Snapshot

    saved = Snapshot(frame)
    outer = ctx.graph
    if ctx.has_symbols:  # type the enclosing graph: the body's inputs take its symbolic sizes
        last = next((n for n in reversed(outer.nodes) if n.op == "call"), None)
        if last is not None:
            ctx._sizes_of(last)
    typing = ctx._typed_upto, dict(ctx._int_syms)  # the enclosing graph's shape inference
    loops = sum(isinstance(n.target, LoopCall) for n in outer.nodes)
    body = BodyGraph(outer, f"{outer.name}_loop{loops}", ctx.has_symbols)
    before = {name: frame.locals[name] for name in stored if name in frame.locals}
    carried = [name for name, v in before.items() if isinstance(v, V.TensorVar)]
    first_serial = next(V.VT._serials)
    outer_break = frame.loop_break  # an enclosing loop node's break test, in this same frame
    try:
        ctx.graph, ctx._typed_upto = body, 0
        for name in carried:
            var = copy.copy(before[name])
            var.source = var.array_source = None  # which array it is differs per iteration
            var.node = body.carried(name, var.example, var.node)
            frame.locals[name] = var
        index = it.items[first]
        if index_read:  # a run-time int of the body, set by the node on each iteration
            index = V.SymIntVar(body.index(index_name, index.const()), index.const(), None)
        frame.push(index)
        frame.loop_break = brk
        while frame.ip != for_index:
            frame.step(frame.insts[frame.ip])
        frame.loop_break = outer_break
        results = _check_iteration(frame, saved, stored, before, carried, live, symbolic, body,
                                   first_serial, trips, brk)
        until = _uniform_until(body, it, first, symbolic, brk) if index_read else len(it.items)
        if body.index_above is not None and not _indices_above(it, first, until,
                                                               body.index_above):
            raise NotALoopNode("an inner loop's peeled first iteration needs an index above "
                               f"{body.index_above}")
        # the results' sizes as symbols, so what reads them after the loop stays symbolic
        sizes = [ctx._sizes_of(v.node) if ctx.has_symbols else None for _, v in results]
    except (V.Unsupported, V.RestartStatic, NotALoopNode) as e:
        frame.loop_break = outer_break
        ctx.graph, ctx.loc, frame.lineno = outer, loop_loc, loop_line
        saved.restore(frame)
        ctx._typed_upto, ctx._int_syms = typing
        why = str(e) or "the loop index is needed as a Python value"  # RestartStatic
        if isinstance(e, V.RestartAllStatic):
            raise  # an inner loop's: the whole capture starts again
        if isinstance(e, SlicesNeedStaticSizes) and not ctx.static_only:
            logs.log("graph", f"loop at line {loop_line}: slices by the index over run-time "
                              "sizes; captured again with static sizes")
            raise V.RestartAllStatic() from None
        if isinstance(e, BecomesTensor) and first == 0 and brk is not None and not symbolic \
                and not it.promoted:
            # An unrolled first iteration would meet the break test as a Python branch on a
            # tensor: the number becomes the 0-d array the loop makes of it instead (exact: the
            # constant range runs at least once, so the loop always rebinds it)
            it.promoted = True
            frame.locals[e.name] = _as_zero_dim(frame, before[e.name], e.after)
            logs.log("graph", f"loop at line {loop_line}: {e}; it starts as a 0-d array")
            return try_capture(frame, inst, it)
        if isinstance(e, (BecomesTensor, PeelFirst)) and first == 0:
            it.peeled = 1  # the first iteration runs unrolled, the others may be a node
            why += "; the first iteration is peeled off"
        elif isinstance(e, V.ShortExample) and first < MAX_PEELED and trips > MIN_TRIPS:
            # an inner loop of run-time length (`range(i)`) too short at this index to capture:
            # this iteration runs unrolled, and the next one is tried as the node's body
            it.peeled = first + 1
            why = "an inner loop is too short at this index to capture; the iteration is peeled off"
        logs.log("graph", f"loop at line {loop_line} unrolled: {why}")
        return False
    except BaseException:
        frame.loop_break = outer_break
        ctx.graph, ctx.loc, frame.lineno = outer, loop_loc, loop_line
        saved.restore(frame)
        ctx._typed_upto, ctx._int_syms = typing
        raise
    ctx.graph, ctx.loc, frame.lineno = outer, loop_loc, loop_line
    ctx._typed_upto, ctx._int_syms = typing
    for name in stored:  # temporaries nobody reads after the loop
        if name not in before and name not in live:
            frame.locals.pop(name, None)
    if index_name in live:
        frame.locals[index_name] = it.items[until - 1]
    else:
        frame.locals.pop(index_name, None)
    _record(frame, it, body, before, carried, results, sizes, inst, brk, until,
            (index_name, index_default) if returns_index else None)
    return True


_UNBOUND = object()  # the index had no value before the loop (a loop of no trips leaves none)


def _index_before(frame, name: str):
    """The loop index's value before the loop (what a loop of no trips leaves): an int or
    _UNBOUND; anything else makes the loop unroll."""
    v = frame.locals.get(name)
    if v is None:
        return _UNBOUND
    if isinstance(v, V.ConstVar) and type(v.value) is int:
        return v.value
    raise NotALoopNode("the loop index had a value other than an int before the loop")


def _uniform_until(body: BodyGraph, it: V.IteratorVar, first: int, symbolic: bool,
                   brk: BreakPoint | None) -> int:
    """Where the iterations the body stands for end (loops_uniform.py); the ones after it, a
    short tail, run unrolled after the node."""
    from kiln._capture import loops_uniform

    def index_sized_node(what: str) -> int:
        """A node over every iteration, its sizes following the index; unless the first
        iteration's slices are empty at capture, which peels it off."""
        if not loops_uniform.empty_at_capture(body):
            logs.log("graph", f"loop node {what} with sizes that follow the index")
            return len(it.items)
        if first == 0:
            raise PeelFirst("the first iteration's slices are empty")
        return -1

    if (symbolic or body.symbolic) and loops_uniform.slices_by_index(body):
        # sizes that follow the index, with bounds only the run knows (the inner loop of a
        # Cholesky step, `range(i)`): checked at index values past the example's, and at run
        # time by the compiled body's assumptions on every iteration
        if symbolic and not body.symbolic and _index_sized_any_length(body, it, first) and \
                index_sized_node("of run-time length") >= 0:
            return len(it.items)
        raise SlicesNeedStaticSizes()
    try:
        until = loops_uniform.uniform_until(body, it.items, first)
    except loops_uniform.Unverified as e:
        raise NotALoopNode(str(e)) from None
    tail = len(it.items) - until
    if tail and loops_uniform.index_sized(body, it.items, first) and \
            index_sized_node("(a triangular loop)") >= 0:
        return len(it.items)
    if tail and (symbolic or brk is not None or until - first < 2
                 or tail * body.op_count() > TAIL_OPS):
        raise NotALoopNode(f"the iteration at index {it.items[until].const()} is not the first "
                           "one's program (a slice clipped by an array's end)")
    if tail:
        logs.log("graph", f"loop node stops before index {it.items[until].const()}: the last "
                          f"{tail} iteration(s) differ (a slice clipped by an array's end) and "
                          "run unrolled")
    return until


def bounded_by_index(ctx, it: V.IteratorVar) -> int | None:
    """The constant start c of a `range(i)` / `range(c, i)` whose stop i is the index of the
    loop node whose body is being captured, else None."""
    body = ctx.graph
    bounds = it.sym_bounds
    if not isinstance(body, BodyGraph) or it.range is None or it.range.step != 1 or \
            not bounds or len(bounds) not in (1, 2):
        return None
    start, stop = (0, bounds[0]) if len(bounds) == 1 else bounds
    if isinstance(start, V.ConstVar):
        start = start.const()
    if type(start) is not int or not isinstance(stop, V.SymIntVar) or \
            not stop.node.meta.get("loop_index") or stop.node.graph is not body:
        return None
    return start


def peel_run_time_length(ctx, it: V.IteratorVar) -> bool:
    """A loop of run-time length `range(i)` / `range(c, i)` over the enclosing loop node's index
    i peels its first iteration: only right when it has one, `i > c`. True when the enclosing
    body records that, for the node to check over its index values; False when the bounds are
    not that form (the caller makes them Python ints)."""
    start = bounded_by_index(ctx, it)
    if start is None:
        return False
    body = ctx.graph
    body.index_above = start if body.index_above is None else max(body.index_above, start)
    return True


def _indices_above(it: V.IteratorVar, first: int, until: int, bound: int) -> bool:
    """Whether every index the node covers is above `bound`."""
    if it.sym_bounds is None:
        return all(v.const() > bound for v in it.items[first:until])
    # a run-time length: the first index and a step up
    return it.range is not None and it.range.step > 0 and \
        it.range.start + first * it.range.step > bound


def _index_sized_any_length(body, it: V.IteratorVar, first: int) -> bool:
    """loops_uniform.index_sized for a range whose bounds are run-time ints: at the example's
    index values and the next ones past them (the example's range may be one trip long)."""
    from kiln._capture import loops_uniform

    step = it.range.step if it.range is not None else 1
    values = [v.const() for v in it.items[first:]]
    start = values[0] if values else (it.range.start + first * step if it.range else first)
    while len(values) < 4:
        values.append(start + len(values) * step)
    return loops_uniform.index_sized(body, values, 0)


def _unrolled_ops(graph) -> int:
    """The ops of `graph` with each inner loop node as its body's ops times its trips at the
    example (what unrolling the enclosing loop would unroll it into)."""
    total = 0
    for n in graph.nodes:
        if n.op != "call":
            continue
        if not isinstance(n.target, LoopCall):
            total += 1
            continue
        start, stop, step = (b.meta.get("example") if isinstance(b, Node) else b
                             for b in n.args[:3])
        trips = len(range(start, stop, step)) if all(type(b) is int for b in
                                                       (start, stop, step)) else UNROLL_OPS
        total += max(trips, 1) * _unrolled_ops(n.target.body)
    return total


def _moving_writes(body) -> int:
    """The item assignments of `body` whose index reads the loop index (directly or through
    values computed from it); inner loop nodes write their regions in place and count none."""
    follows = {n for n in body.inputs if n.meta.get("loop_index")}
    count = 0
    for n in body.nodes:
        if n.op != "call" or n in follows:
            continue
        used = nodes_in((n.args, n.kwargs))
        if n.target is operator.setitem and len(n.args) > 1 and \
                any(u in follows for u in nodes_in(n.args[1])):
            count += 1
        if not isinstance(n.target, LoopCall) and any(u in follows for u in used):
            follows.add(n)
    return count


def _check_iteration(frame, saved, stored, before, carried, live, symbolic, body,
                     first_serial: int, trips: int, brk: BreakPoint | None):
    """The values the iteration leaves, checked to stand for every iteration; returns the
    body's outputs (carried values first, then the temporaries read after the loop) as
    (name, variable) pairs."""
    if len(frame.stack) != len(saved.stack) or frame.ctx.grad_enabled != saved.grad_enabled:
        raise NotALoopNode("the iteration changes the evaluation stack or the grad mode")
    if saved.iterators_moved():
        raise NotALoopNode("the body advances an iterator made before the loop")
    if any(obj.serial < first_serial for obj, _, _ in frame.ctx.undo[saved.undo_len:]):
        raise NotALoopNode("the body changes a Python object made before the loop (a list, "
                           "dict, attribute or cell)")
    temporaries = []
    for name in stored:
        after = frame.locals.get(name)
        if name in carried and isinstance(after, V.TensorVar) and \
                after.node is body.inputs[carried.index(name)]:
            # Rebound to itself (`w -= lr * grad`): the same array on every iteration, updated
            # in its memory, as aliases of it see it; passed in, not fed back.
            body.sources[carried.index(name)] = before[name].node
            continue
        if after is None and name not in live:
            continue  # an inner loop node's index, read nowhere but in that loop's body
        if name in before:
            if not _same_kind(before[name], after):
                if _number(before[name]) and isinstance(after, V.TensorVar):
                    raise BecomesTensor(name, after)
                raise NotALoopNode(f"{name!r} changes from one iteration to the next")
        elif name not in live:
            continue
        elif symbolic:
            raise NotALoopNode(f"{name!r} is read after a loop of run-time length")
        elif isinstance(after, V.TensorVar):
            temporaries.append(name)
        elif not isinstance(after, V.ConstVar):
            raise NotALoopNode(f"{name!r} is a {type(after).__name__} made in the loop")
    if body.op_count() == 0:
        raise NotALoopNode("the body records no tensor op")
    # (a loop that breaks on a tensor stays a node: unrolled, its test would break the graph;
    # a loop node inside counts as the iterations it would unroll into)
    if not symbolic and brk is None and trips * _unrolled_ops(body) <= UNROLL_OPS and \
            _largest(body) < SMALL_ELEMENTS and \
            trips * _moving_writes(body) <= UNROLL_MOVING_WRITES:
        raise NotALoopNode(f"unrolled, {trips} x {body.op_count()} ops on small tensors")
    for node in body.nodes:  # (inputs may require grad: under no_grad nothing records)
        ex = node.meta.get("example")
        if node.op == "call" and isinstance(ex, kiln.Tensor) and ex.requires_grad:
            raise NotALoopNode(f"the body computes values that require grad ({node.name})")
    fed_back = [name for k, name in enumerate(carried) if body.sources[k] is None]
    for name in carried:
        if name not in fed_back:
            frame.locals[name] = before[name]
    results = [(name, frame.locals[name]) for name in fed_back + temporaries]
    if brk is None:
        body.output([v.node for _, v in results])
        return results
    body.output([brk.cond.node] + [v.node for _, v in results]
                + [v.node for v in _break_values(brk, results, before, body)])
    return results


def _break_values(brk: BreakPoint, results: list, before: dict, body: BodyGraph) -> list:
    """What each result holds when the loop breaks: its value at the break test, checked to be
    this iteration's (or the iteration's input, for a carried value not yet rebound), and the
    body checked to write nothing after the test (it runs whole on the breaking iteration)."""
    from kiln._capture.graph import is_impure

    if brk.cond is None:
        raise NotALoopNode("the iteration did not reach the break test")
    if any(is_impure(n) for n in body.nodes[brk.nodes_before:]):
        raise NotALoopNode("the body writes into a tensor after its break test")
    values = []
    for name, var in results:
        at_break = brk.locals.get(name)
        if not (isinstance(at_break, V.TensorVar) and at_break.node.graph is body):
            raise NotALoopNode(f"{name!r} at the break is not a value of the iteration")
        if not _same_kind(var, at_break):
            raise NotALoopNode(f"{name!r} differs between the break and the iteration's end")
        values.append(at_break)
    return values


def _largest(body: BodyGraph) -> int:
    """The element count of the body's largest tensor."""
    sizes = [n.meta["example"].numel() for n in body.nodes
             if isinstance(n.meta.get("example"), kiln.Tensor)]
    return max(sizes, default=0)


def _record(frame, it, body: BodyGraph, before: dict, carried: list, results: list,
            sizes: list, inst, brk: BreakPoint | None, until: int,
            index_out: tuple | None) -> None:
    """The loop node in the enclosing graph for the iterations before `until`, its results
    bound to the locals, and the frame moved past the loop as if it had run (or back to the
    loop's head, to unroll the iterations from `until` on)."""
    import operator

    ctx = frame.ctx
    outer = ctx.graph
    if it.sym_bounds is None:
        start, stop, step = it.range.start, it.range.stop, it.range.step
        start += it.pos * step  # past a peeled first iteration
        if until < len(it.items):
            stop = it.items[until].const()
    else:  # range(stop), range(start, stop) or range(start, stop, step)
        bounds = [b.node if isinstance(b, V.SymIntVar) else b.const() for b in it.sym_bounds]
        start, stop, step = [0, *bounds, 1] if len(bounds) == 1 else [*bounds, 1][:3]
        if it.pos:  # past a peeled first iteration (peel_run_time_length: a constant start)
            start += it.pos * step
    initial = iter(before[name].node for k, name in enumerate(carried)
                   if body.sources[k] is None)
    args = tuple(next(initial) if src is None else start if src is INDEX else src
                 for src in body.sources)
    slots = [k for k, src in enumerate(body.sources) if src is None]
    index_slot = body.sources.index(INDEX) if INDEX in body.sources else None
    examples = tuple(v.example for _, v in results)
    breaks_when = brk.breaks_when if brk is not None else None
    loop = LoopCall(body, slots, index_slot, breaks_when)
    if index_out is not None:
        loop.index_out = index_out
        examples += (it.items[until - 1].const(),)
    node = outer.call(loop, (start, stop, step, *args), {}, examples, loc=ctx.loc)
    node.meta["result_sym_sizes"] = sizes
    for k, (name, var) in enumerate(results):
        item = outer.call(operator.getitem, (node, k), {}, var.example, loc=ctx.loc)
        if sizes[k] is not None:
            item.meta["sym_sizes"] = sizes[k]
        out = copy.copy(var)
        out.node, out.source = item, None
        frame.locals[name] = out
    if index_out is not None:
        item = outer.call(operator.getitem, (node, len(results)), {}, examples[-1], loc=ctx.loc)
        frame.locals[index_out[0]] = V.RunIntVar(item)
    it.pos = until
    if until < len(it.items):
        frame.jump_to(inst.offset)  # FOR_ITER again: the tail unrolls
        return
    frame.pop()  # the iterator
    frame.jump_to(inst.argval)

"""The symbolic evaluator: walks CPython 3.11 bytecode over variables instead of values.

`Frame.run()` interprets one code object. Tensor operations go into the capture's graph; Python
values are constants or symbols; calls to Python functions are inlined as child frames. When an
instruction cannot be captured, the handler raises `Unsupported`; in an inlined frame that
unwinds to the top frame's call, and the top frame turns it into a graph break at that
instruction (see `TopFrame`).
"""

from __future__ import annotations

import dis
import functools
import operator
import os
import sys

import kiln
from kiln._capture import logs, loops, side_effects
from kiln._capture import variables as V
from kiln._capture.calls import CallMixin
from kiln._capture.sources import GlobalSource, held_container_source

_BINARY = [
    operator.add, operator.and_, operator.floordiv, operator.lshift, operator.matmul,
    operator.mul, operator.mod, operator.or_, operator.pow, operator.rshift, operator.sub,
    operator.truediv, operator.xor,
    operator.iadd, operator.iand, operator.ifloordiv, operator.ilshift, operator.imatmul,
    operator.imul, operator.imod, operator.ior, operator.ipow, operator.irshift, operator.isub,
    operator.itruediv, operator.ixor,
]
_COMPARE = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
    ">": operator.gt, ">=": operator.ge,
}
MAX_INLINE_DEPTH = 48


_DECODED: dict = {}
_KILN_DIR = os.path.dirname(os.path.abspath(kiln.__file__)) + os.sep


@functools.lru_cache(maxsize=4096)
def is_kiln_file(filename: str) -> bool:
    """Code of the kiln package itself (its nn modules' forwards are inlined like user code,
    but a diagnostic should name the user's line that called them), or kiln's generated
    entries."""
    return filename.startswith("<kiln-") or os.path.abspath(filename).startswith(_KILN_DIR)


def caller_loc():
    """(filename, lineno) of the innermost Python frame running now outside kiln: the user's
    line that called the compiled function or module (or kiln.export)."""
    f = sys._getframe(1)
    while f is not None and is_kiln_file(f.f_code.co_filename):
        f = f.f_back
    return (f.f_code.co_filename, f.f_lineno) if f is not None else None


def user_frames(stack: list) -> list:
    """The (filename, lineno) frames of `stack` (outermost first) outside kiln; when all are
    kiln's (a compiled nn.Sequential of kiln layers), the user's line that called into kiln."""
    kept = [f for f in stack if not is_kiln_file(f[0])]
    if kept:
        return kept
    caller = caller_loc()
    return [caller] if caller is not None else list(stack[-1:])


def _decoded(code):
    """The instructions of `code` and their index by offset, decoded once per code object
    (inlining a layer's forward twelve times should not decode it twelve times)."""
    cached = _DECODED.get(code)
    if cached is None or cached[0] is not code:
        insts = list(dis.get_instructions(code))
        cached = (code, insts, {inst.offset: i for i, inst in enumerate(insts)})
        if len(_DECODED) > 4096:
            _DECODED.clear()
        _DECODED[code] = cached
    return cached[1], cached[2]


class ReturnSignal(Exception):
    def __init__(self, value: V.VT) -> None:
        self.value = value


class Snapshot:
    """What evaluating instructions of `frame` can change, to put back when they turn out not
    to be capturable: its position, stack and locals, the grad mode and autocast regions, the
    Python objects changed since (the capture's undo log) and the positions of the iterators its
    frames hold."""

    def __init__(self, frame) -> None:
        self.ip, self.kw_names = frame.ip, frame.kw_names
        self.stack, self.locals = list(frame.stack), dict(frame.locals)
        self.grad_enabled, self.undo_len = frame.ctx.grad_enabled, len(frame.ctx.undo)
        self.autocast = dict(frame.ctx.autocast)
        self.iterators = []
        f = frame
        while f is not None:
            self.iterators += [(v, v.pos) for v in [*f.stack, *f.locals.values()]
                               if isinstance(v, V.IteratorVar)]
            f = f.parent

    def iterators_moved(self) -> bool:
        return any(it.pos != pos for it, pos in self.iterators)

    def restore(self, frame) -> None:
        frame.ip, frame.kw_names = self.ip, self.kw_names
        frame.stack, frame.locals = self.stack, self.locals
        ctx = frame.ctx
        ctx.grad_enabled = self.grad_enabled
        if ctx.autocast != self.autocast:
            from kiln._capture.calls import autocast_region

            for device in set(ctx.autocast) | set(self.autocast):
                dtype = self.autocast.get(device, ctx.autocast.get(device))
                autocast_region(ctx, device, device in self.autocast, dtype)
        for it, pos in self.iterators:
            it.pos = pos
        while len(ctx.undo) > self.undo_len:
            obj, attr, old = ctx.undo.pop()
            setattr(obj, attr, old)


class Frame(CallMixin):
    """One code object being evaluated symbolically."""

    def __init__(self, ctx, code, globals_, locals_: dict, parent=None, closure=None) -> None:
        self.ctx = ctx
        self.code = code
        self.globals = globals_
        builtins = globals_.get("__builtins__", __builtins__)
        self.builtins = builtins if isinstance(builtins, dict) else builtins.__dict__
        self.locals = locals_  # name -> VT (CellVar for cell variables)
        self.closure = closure  # list of CellVar for co_freevars, or None
        self.parent = parent
        self.depth = 0 if parent is None else parent.depth + 1
        self.stack: list = []
        self.insts, self.index_of = _decoded(code)
        self.ip = 0
        self.kw_names = None
        self.lineno = code.co_firstlineno
        self.yields = None  # a list when running a generator function to completion
        self.loop_break = None  # the BreakPoint of the loop body being captured (loops.py)
        # The innermost frame of user code: graph nodes recorded inside kiln's own module code
        # (an inlined nn.ReLU.forward) take the location of the user's line that called it.
        self.user_frame = self if not is_kiln_file(code.co_filename) else (
            parent.user_frame if parent is not None else None)

    # -- stack helpers -----------------------------------------------------------------
    def push(self, v: V.VT) -> None:
        self.stack.append(v)

    def pop(self) -> V.VT:
        return self.stack.pop()

    def popn(self, n: int) -> list:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def jump_to(self, offset: int) -> None:
        self.ip = self.index_of[offset]

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> V.VT:
        while True:
            inst = self.insts[self.ip]
            self.step(inst)
            if inst.opname == "RETURN_VALUE":
                return self.return_value

    def step(self, inst) -> None:
        if inst.positions is not None and inst.positions.lineno is not None:
            self.lineno = inst.positions.lineno
        user = self.user_frame
        if user is not None:
            self.ctx.loc = (user.code.co_filename, user.lineno)
        else:  # every frame so far is kiln's: the line that called the compiled code
            loc = self.ctx.caller_loc
            if loc is None:
                loc = self.ctx.caller_loc = caller_loc() or (self.code.co_filename, self.lineno)
            self.ctx.loc = loc
        if logs.enabled("bytecode"):
            logs.log("bytecode", f"{'  ' * self.depth}{self.code.co_name} "
                                 f"{self.code.co_filename.rsplit('/', 1)[-1]}:{self.lineno} "
                                 f"@{inst.offset} {inst.opname} {inst.argrepr}".rstrip())
        handler = getattr(self, "op_" + inst.opname, None)
        if handler is None:
            raise V.Unsupported(f"bytecode {inst.opname} is not supported")
        self.ip += 1
        handler(inst)

    # -- no-ops ------------------------------------------------------------------------
    def op_NOP(self, inst):
        pass

    op_RESUME = op_NOP
    op_PRECALL = op_NOP
    op_CACHE = op_NOP
    op_EXTENDED_ARG = op_NOP  # dis already folds it into the next instruction's arg

    def op_KW_NAMES(self, inst):
        self.kw_names = self.code.co_consts[inst.arg]

    def op_PUSH_NULL(self, inst):
        self.push(V.NULL)

    def op_POP_TOP(self, inst):
        self.pop()

    def op_COPY(self, inst):
        self.push(self.stack[-inst.arg])

    def op_SWAP(self, inst):
        i = inst.arg
        self.stack[-i], self.stack[-1] = self.stack[-1], self.stack[-i]

    # -- variables ---------------------------------------------------------------------
    def op_LOAD_CONST(self, inst):
        self.push(V.ConstVar(inst.argval))

    def op_LOAD_FAST(self, inst):
        name = inst.argval
        if name not in self.locals:
            raise V.Unsupported(f"local variable {name!r} referenced before assignment")
        value = self.locals[name]
        if isinstance(value, V.CellVar) and name in self.code.co_cellvars:
            raise V.Unsupported("LOAD_FAST of a cell")
        self.push(value)

    def op_STORE_FAST(self, inst):
        value = self.pop()
        if inst.argval in self.code.co_cellvars and isinstance(value, V.ObjectVar):
            import types

            if isinstance(value.value, types.CellType):  # a resume prologue installs a cell
                cell = value.value
                from kiln._capture.sources import AttrSource

                contents = None
                try:
                    contents = self.ctx.wrap(cell.cell_contents,
                                             AttrSource(value.source, "cell_contents"))
                except ValueError:
                    contents = None
                self.locals[inst.argval] = V.CellVar(contents, value.source)
                return
        self.locals[inst.argval] = value

    def op_DELETE_FAST(self, inst):
        self.locals.pop(inst.argval, None)

    def op_MAKE_CELL(self, inst):
        name = inst.argval
        current = self.locals.get(name)
        if isinstance(current, V.CellVar):
            return
        self.locals[name] = V.CellVar(current)

    def op_COPY_FREE_VARS(self, inst):
        for i, name in enumerate(self.code.co_freevars):
            self.locals[name] = self.closure[i]

    def _cell(self, name) -> V.CellVar:
        cell = self.locals.get(name)
        if not isinstance(cell, V.CellVar):
            raise V.Unsupported(f"closure variable {name!r} is not a cell here")
        return cell

    def op_LOAD_DEREF(self, inst):
        cell = self._cell(inst.argval)
        if cell.contents is None:
            raise V.Unsupported(f"free variable {inst.argval!r} referenced before assignment")
        self.push(cell.contents)

    op_LOAD_CLASSDEREF = op_LOAD_DEREF

    def op_STORE_DEREF(self, inst):
        cell = self._cell(inst.argval)
        if cell.source is not None:
            raise V.Unsupported("assignment to a nonlocal variable of an enclosing function")
        self.ctx.undo.append((cell, "contents", cell.contents))
        cell.contents = self.pop()

    def op_LOAD_CLOSURE(self, inst):
        self.push(self._cell(inst.argval))

    def op_LOAD_GLOBAL(self, inst):
        if inst.arg & 1:
            self.push(V.NULL)
        self.push(self.load_global(inst.argval))

    def load_global(self, name: str) -> V.VT:
        if name in self.globals:
            value = self.globals[name]
            if self.parent is None or self.is_top_globals():
                source = GlobalSource(name)
            else:  # another module's globals: only a container it may change gets a path
                source = held_container_source(value, self.globals, "__globals__", name)
            return self.ctx.wrap(value, source)
        if name in self.builtins:
            return self.ctx.wrap(self.builtins[name], None)
        raise V.Unsupported(f"name {name!r} is not defined")

    def is_top_globals(self) -> bool:
        top = self
        while top.parent is not None:
            top = top.parent
        return top.globals is self.globals

    def op_STORE_GLOBAL(self, inst):
        raise V.Unsupported(f"assignment to the global {inst.argval!r}")

    # -- attributes and items ----------------------------------------------------------
    def op_LOAD_ATTR(self, inst):
        obj = self.pop()
        self.push(self.get_attr(obj, inst.argval))

    def op_LOAD_METHOD(self, inst):
        obj = self.pop()
        self.push(V.NULL)
        self.push(self.get_attr(obj, inst.argval))

    def op_STORE_ATTR(self, inst):
        obj = self.pop()
        value = self.pop()
        self.set_attr(obj, inst.argval, value)

    def op_BINARY_SUBSCR(self, inst):
        index = self.pop()
        obj = self.pop()
        self.push(self.get_item(obj, index))

    def op_STORE_SUBSCR(self, inst):
        index = self.pop()
        obj = self.pop()
        value = self.pop()
        self.set_item(obj, index, value)

    def op_DELETE_SUBSCR(self, inst):
        index = self.pop()
        obj = self.pop()
        if isinstance(obj, (V.ListVar, V.DictVar)):
            key = self.const_index(index)
            side_effects.will_mutate(self.ctx, obj, "del")
            del obj.items[key]
            return
        raise V.Unsupported(f"del on {type(obj).__name__}")

    # -- operators ---------------------------------------------------------------------
    def op_BINARY_OP(self, inst):
        b = self.pop()
        a = self.pop()
        self.push(self.binary(_BINARY[inst.arg], a, b))

    def op_COMPARE_OP(self, inst):
        b = self.pop()
        a = self.pop()
        self.push(self.binary(_COMPARE[inst.argval], a, b))

    def op_UNARY_NEGATIVE(self, inst):
        self.push(self.unary(operator.neg, self.pop()))

    def op_UNARY_POSITIVE(self, inst):
        self.push(self.unary(operator.pos, self.pop()))

    def op_UNARY_INVERT(self, inst):
        self.push(self.unary(operator.invert, self.pop()))

    def op_UNARY_NOT(self, inst):
        self.push(V.ConstVar(not self.truth(self.pop())))

    def op_IS_OP(self, inst):
        b = self.pop()
        a = self.pop()
        result = self.identical(a, b)
        self.push(V.ConstVar(result != bool(inst.arg)))

    def op_CONTAINS_OP(self, inst):
        container = self.pop()
        item = self.pop()
        result = self.contains(container, item)
        self.push(V.ConstVar(result != bool(inst.arg)))

    # -- building values ---------------------------------------------------------------
    def op_BUILD_TUPLE(self, inst):
        self.push(V.TupleVar(self.popn(inst.arg)))

    def op_BUILD_LIST(self, inst):
        self.push(V.ListVar(self.popn(inst.arg)))

    def op_BUILD_SET(self, inst):
        items = self.popn(inst.arg)
        self.push(V.ConstVar({i.const() for i in items}))

    def op_BUILD_MAP(self, inst):
        flat = self.popn(2 * inst.arg)
        self.push(V.DictVar({flat[i].const(): flat[i + 1] for i in range(0, len(flat), 2)}))

    def op_BUILD_CONST_KEY_MAP(self, inst):
        keys = self.pop().const()
        values = self.popn(inst.arg)
        self.push(V.DictVar(dict(zip(keys, values, strict=False))))

    def op_BUILD_SLICE(self, inst):
        items = self.popn(inst.arg)
        if len(items) == 2:
            items.append(V.ConstVar(None))
        self.push(V.SliceVar(*items))

    def op_BUILD_STRING(self, inst):
        parts = self.popn(inst.arg)
        if any(isinstance(p, V.LazyTextVar) for p in parts):
            self.push(V.LazyTextVar("".join(p.example if isinstance(p, V.LazyTextVar)
                                            else p.const() for p in parts)))  # fmt: skip
            return
        self.push(V.ConstVar("".join(p.const() for p in parts)))

    def op_FORMAT_VALUE(self, inst):
        spec = self.pop().const() if inst.arg & 0x04 else ""
        value = self.pop()
        if isinstance(value, V.TensorVar):
            raise V.Unsupported("formatting a tensor into a string")
        conv = inst.arg & 0x03
        if not value.is_const():  # a symbolic size (or a shape holding one): run-time text
            from kiln._capture.ops import to_example

            v = to_example(value)
            v = {0: v, 1: str(v), 2: repr(v), 3: ascii(v)}[conv] if conv else v
            self.push(V.LazyTextVar(format(v, spec)))
            return
        v = value.const()
        v = {0: v, 1: str(v), 2: repr(v), 3: ascii(v)}[conv] if conv else v
        self.push(V.ConstVar(format(v, spec)))

    def op_LIST_APPEND(self, inst):  # a comprehension's list: undone with a loop node's try
        value = self.pop()
        target = self.stack[-inst.arg]
        self.ctx.undo.append((target, "items", target.items.copy()))
        target.items.append(value)

    def op_SET_ADD(self, inst):
        value = self.pop()
        target = self.stack[-inst.arg]
        target.value.add(value.const())

    def op_MAP_ADD(self, inst):
        value = self.pop()
        key = self.pop()
        target = self.stack[-inst.arg]
        self.ctx.undo.append((target, "items", target.items.copy()))
        target.items[key.const()] = value

    def op_LIST_EXTEND(self, inst):
        items = self.unpack_iterable(self.pop())
        target = self.stack[-inst.arg]
        self.ctx.undo.append((target, "items", target.items.copy()))
        target.items.extend(items)

    def op_LIST_TO_TUPLE(self, inst):
        self.push(V.TupleVar(self.pop().items))

    def op_DICT_UPDATE(self, inst):
        other = self.pop()
        if not isinstance(other, V.DictVar):
            raise V.Unsupported("dict.update with a non-dict")
        target = self.stack[-inst.arg]
        self.ctx.undo.append((target, "items", target.items.copy()))
        target.items.update(other.items)

    op_DICT_MERGE = op_DICT_UPDATE

    def op_UNPACK_SEQUENCE(self, inst):
        items = self.unpack_iterable(self.pop())
        if len(items) != inst.arg:
            raise V.Unsupported(f"cannot unpack {len(items)} values into {inst.arg}")
        self.stack.extend(reversed(items))

    def op_UNPACK_EX(self, inst):
        items = self.unpack_iterable(self.pop())
        before, after = inst.arg & 0xFF, inst.arg >> 8
        if len(items) < before + after:
            raise V.Unsupported("not enough values to unpack")
        middle = V.ListVar(items[before: len(items) - after])
        result = items[:before] + [middle] + items[len(items) - after:]
        self.stack.extend(reversed(result))

    # -- control flow ------------------------------------------------------------------
    def op_JUMP_FORWARD(self, inst):
        self.jump_to(inst.argval)

    op_JUMP_BACKWARD = op_JUMP_FORWARD
    op_JUMP_BACKWARD_NO_INTERRUPT = op_JUMP_FORWARD

    def _pop_jump(self, inst, when: bool):
        brk = self.loop_break
        if brk is not None and inst.offset == brk.offset:  # a loop node's `if cond: break`
            loops.record_break(self, self.pop(), inst)
            return
        value = self.stack[-1]
        if isinstance(value, V.TensorVar) and when and self._assert_on_tensor(inst, value):
            return
        if self.truth(value) == when:
            self.pop()
            self.jump_to(inst.argval)
        else:
            self.pop()

    def _assert_on_tensor(self, inst, cond: V.TensorVar) -> bool:
        """`assert <tensor>` / `assert <tensor>, "message"`: a check node, as kiln._assert, where
        a Python `if` on a tensor would break the graph (torch.compile's _assert_async)."""
        following = [i for i in self.insts[self.ip:self.ip + 6]]
        names = [i.opname for i in following]
        if names[:2] == ["LOAD_ASSERTION_ERROR", "RAISE_VARARGS"]:
            message = "assertion failed"
        elif names[:5] == ["LOAD_ASSERTION_ERROR", "LOAD_CONST", "PRECALL", "CALL",
                           "RAISE_VARARGS"] and isinstance(following[1].argval, str):
            message = following[1].argval
        else:
            return False
        self.kiln_assert([cond, V.ConstVar(message)], {})
        self.pop()
        self.jump_to(inst.argval)
        return True

    def op_POP_JUMP_FORWARD_IF_TRUE(self, inst):
        self._pop_jump(inst, True)

    def op_POP_JUMP_FORWARD_IF_FALSE(self, inst):
        self._pop_jump(inst, False)

    op_POP_JUMP_BACKWARD_IF_TRUE = op_POP_JUMP_FORWARD_IF_TRUE
    op_POP_JUMP_BACKWARD_IF_FALSE = op_POP_JUMP_FORWARD_IF_FALSE

    def _pop_jump_none(self, inst, when: bool):
        value = self.pop()
        if self.is_none(value) == when:
            self.jump_to(inst.argval)

    def op_POP_JUMP_FORWARD_IF_NONE(self, inst):
        self._pop_jump_none(inst, True)

    def op_POP_JUMP_FORWARD_IF_NOT_NONE(self, inst):
        self._pop_jump_none(inst, False)

    op_POP_JUMP_BACKWARD_IF_NONE = op_POP_JUMP_FORWARD_IF_NONE
    op_POP_JUMP_BACKWARD_IF_NOT_NONE = op_POP_JUMP_FORWARD_IF_NOT_NONE

    def op_JUMP_IF_TRUE_OR_POP(self, inst):
        if self.truth(self.stack[-1]):
            self.jump_to(inst.argval)
        else:
            self.pop()

    def op_JUMP_IF_FALSE_OR_POP(self, inst):
        if not self.truth(self.stack[-1]):
            self.jump_to(inst.argval)
        else:
            self.pop()

    def op_GET_ITER(self, inst):
        value = self.pop()
        if isinstance(value, V.IteratorVar):
            self.push(value)
            return
        if isinstance(value, V.ConstVar) and type(value.value) is range:
            it = V.IteratorVar(V.RangeItems(value.value))
        else:
            it = V.IteratorVar(self.unpack_iterable(value))
        if isinstance(value, V.ConstVar) and type(value.value) is range:
            it.range = value.value  # a long one may become a loop node (loops.py)
            it.sym_bounds = getattr(value, "sym_bounds", None)
        self.push(it)

    def op_FOR_ITER(self, inst):
        it = self.stack[-1]
        if not isinstance(it, V.IteratorVar):
            raise V.Unsupported(f"iteration over {type(it).__name__}")
        if it.range is not None and it.pos == it.peeled:
            if loops.try_capture(self, inst, it):
                return
            if it.sym_bounds and it.pos >= len(it.items) and \
                    loops.bounded_by_index(self.ctx, it) is not None:
                # nothing (left) to capture the node's body at: the enclosing node may try a
                # later iteration of its own
                raise V.ShortExample()
            if it.peeled and it.sym_bounds and it.pos == 0 and \
                    loops.peel_run_time_length(self.ctx, it):
                pass  # the first iteration runs unrolled; the rest may be a node
            else:
                for bound in it.sym_bounds or ():  # unrolled: for these bounds only
                    if isinstance(bound, V.SymIntVar):
                        self.concrete_int(bound)
                if it.peeled:  # the rest may be a node over the constant range
                    it.sym_bounds = None
        item = it.next_item()
        if item is None:
            self.pop()
            self.jump_to(inst.argval)
        else:
            self.push(item)

    def op_RETURN_VALUE(self, inst):
        self.return_value = self.pop()

    def op_LOAD_ASSERTION_ERROR(self, inst):
        self.push(V.ObjectVar(AssertionError))

    def op_RAISE_VARARGS(self, inst):
        raise V.Unsupported("raise statement reached (the frame raises at run time)")

    # -- functions ---------------------------------------------------------------------
    def op_MAKE_FUNCTION(self, inst):
        code = self.pop().const()
        closure = self.pop().items if inst.arg & 0x08 else None
        self.pop() if inst.arg & 0x04 else None  # annotations
        kwdefaults = self.pop() if inst.arg & 0x02 else None
        defaults = self.pop() if inst.arg & 0x01 else None
        self.push(V.NestedFunctionVar(code, self.globals, code.co_name, defaults, kwdefaults,
                                      closure))

    def op_CALL(self, inst):
        argc = inst.arg
        args = self.popn(argc)
        callable_ = self.pop()
        head = self.pop()
        if not isinstance(head, V.NullVar):
            # LOAD_METHOD pushed (method, self): the callable slot holds self.
            args = [callable_] + args
            callable_ = head
        kwargs = {}
        if self.kw_names:
            names = self.kw_names
            kwargs = dict(zip(names, args[len(args) - len(names):], strict=False))
            args = args[: len(args) - len(names)]
        self.kw_names = None
        self.push(self.call(callable_, args, kwargs))

    def op_CALL_FUNCTION_EX(self, inst):
        kwargs = self.pop() if inst.arg & 1 else None
        args = self.pop()
        fn = self.pop()
        if self.stack and isinstance(self.stack[-1], V.NullVar):
            self.pop()
        args = self.unpack_iterable(args)
        kw = {}
        if kwargs is not None:
            if not isinstance(kwargs, V.DictVar):
                raise V.Unsupported("**kwargs that is not a dict")
            kw = dict(kwargs.items)
        self.push(self.call(fn, args, kw))

    # -- with blocks -------------------------------------------------------------------
    def op_BEFORE_WITH(self, inst):
        mgr = self.pop()
        if isinstance(mgr, V.ObjectVar) and isinstance(mgr.value, kiln.autocast):
            from kiln._capture.calls import autocast_region

            region = mgr.value
            previous = tuple(kiln._C._autograd._autocast_region(region.device))
            dtype = region.fast_dtype if region._enabled else previous[1]
            autocast_region(self.ctx, region.device, region._enabled, dtype)
            self.push(V.AutocastExitVar(region.device, previous))
            self.push(V.ConstVar(None))
            return
        if not isinstance(mgr, V.GradModeVar):
            raise V.Unsupported(f"with-block over {type(mgr).__name__}")
        previous = self.ctx.grad_enabled
        self.ctx.grad_enabled = mgr.enabled
        self.push(V.GradModeExitVar(previous))
        self.push(V.ConstVar(None))

    # -- generators run to completion when inlined -------------------------------------
    def op_RETURN_GENERATOR(self, inst):
        if self.yields is None:
            raise V.Unsupported("generator outside of an inlined call")
        self.push(V.ConstVar(None))

    def op_YIELD_VALUE(self, inst):
        if self.yields is None:
            raise V.Unsupported("yield outside of an inlined generator")
        self.yields.append(self.pop())
        self.push(V.ConstVar(None))  # the value sent back in

    def op_GET_LEN(self, inst):
        self.push(V.ConstVar(len(self.unpack_iterable(self.stack[-1]))))

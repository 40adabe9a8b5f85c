"""Symbolic values ("variables") the bytecode evaluator keeps on its stack and in its locals.

Tensors are graph values (`TensorVar`); Python values the graph depends on are constants
(`ConstVar`, guarded where they came from) or symbolic sizes (`SymIntVar`); containers hold
variables; functions, modules and other objects are tracked by identity so calls can be inlined
or recorded. Every variable can be rebuilt into a real Python value at run time
(`reconstruct`), which is how state crosses a graph break.
"""

from __future__ import annotations

import collections.abc
import itertools


class Unsupported(Exception):
    """The evaluator cannot capture this instruction; the frame breaks the graph here."""

    def __init__(self, reason: str, hint: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.hint = hint


class AssertionFailed(Unsupported):
    """A kiln._assert whose condition is false at capture time. The graph breaks there rather
    than raising now, so that eager code raises at run time: after the ops before it (their
    side effects happen) and inside the user's try blocks. fullgraph=True raises `message` as
    an AssertionError at capture time instead, as eager would have."""

    def __init__(self, message) -> None:
        super().__init__("assertion failed: kiln._assert() of a false condition (raises at "
                         "run time)")
        self.message = message


class RestartStatic(Exception):
    """A symbolic size had to become a Python int: capture again with static shapes."""


class RestartAllStatic(RestartStatic):
    """A loop body needs static sizes (loops.SlicesNeedStaticSizes): the whole capture starts
    again with static shapes; an enclosing loop node's capture passes it on."""


class ShortExample(RestartStatic):
    """A loop of run-time length had no iteration left to capture as a node after its peeled
    first one (`range(i)` at i = 1): an enclosing loop node may capture its body at a later
    iteration, where the example is longer (loops.py)."""


class BreakAt(Exception):
    """Capture again, breaking at the top frame's instruction `offset`: what it made cannot be
    captured, as found only later (a generator that escapes the frame; a NumPy view kiln
    holds as a copy, written through)."""

    def __init__(self, offset: int, reason: str, hint: str = "") -> None:
        super().__init__(reason)
        self.offset, self.reason, self.hint = offset, reason, hint


class VT:
    """Base of all symbolic values. `source` says where a value read from outside came from;
    `serial` orders their creation (loops.py tells the values a loop body made from older ones)."""

    source = None
    _serials = itertools.count()

    def __new__(cls, *args, **kwargs):
        obj = super().__new__(cls)
        obj.serial = next(VT._serials)
        return obj

    def python_type(self):
        raise Unsupported(f"type of {self!r} is unknown")

    def is_const(self) -> bool:
        return False

    def const(self):
        """The Python value, for values fixed at capture time; Unsupported otherwise."""
        raise Unsupported(f"{type(self).__name__} is not a Python constant here")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class NullVar(VT):
    """The NULL that PUSH_NULL / LOAD_GLOBAL put below a callable."""


NULL = NullVar()


class ConstVar(VT):
    """A Python value fixed at capture time (numbers, strings, None, dtypes, ranges, ...)."""

    def __init__(self, value, source=None) -> None:
        self.value = value
        self.source = source

    def python_type(self):
        return type(self.value)

    def is_const(self) -> bool:
        return True

    def const(self):
        return self.value

    def __repr__(self) -> str:
        return f"ConstVar({self.value!r})"


class TensorVar(VT):
    """A tensor: the graph node that computes it and an example value for its metadata.

    `numpy` marks a NumPy array (an ndarray argument, or what NumPy code computed from one):
    its functions, methods and operators follow NumPy (`calls_numpy.py`), and it leaves the
    compiled code as an ndarray."""

    numpy = False
    # A graph input's tensor as the caller gave it (`example` becomes a copy when the code
    # changes the input in place); None for values computed in the graph.
    input_object = None

    def __init__(self, node, example, source=None) -> None:
        self.node = node
        self.example = example
        self.source = source

    def python_type(self):
        if self.numpy:
            import numpy

            if self.example.dim() == 0 and self.example.is_cpu:
                # a 0-d result is a NumPy scalar, as the entry returns it (to_ndarray) and as
                # NumPy's reductions and ufuncs make it: `isinstance(err, float)` holds
                return self.example.numpy().dtype.type
            return numpy.ndarray
        return type(self.example)

    def __repr__(self) -> str:
        return f"TensorVar({self.node.name})"


class SymIntVar(VT):
    """An int computed at run time from symbolic sizes; `sym` is set for an input symbol."""

    def __init__(self, node, hint: int, sym: int | None = None) -> None:
        self.node = node
        self.hint = hint
        self.sym = sym

    def python_type(self):
        return int

    def __repr__(self) -> str:
        return f"SymIntVar({self.node.name}, hint={self.hint})"


class RunIntVar(VT):
    """An int only the run knows (the index a loop node stopped at): the compiled code can
    return it or hand it to the code after a graph break, and any other use breaks the graph
    there, where the resumed code has the real int."""

    def __init__(self, node) -> None:
        self.node = node

    def python_type(self):
        return int

    def __repr__(self) -> str:
        return f"RunIntVar({self.node.name})"


class SymFloatVar(SymIntVar):
    """A float that varies between calls (e.g. the result of `.item()` before a resume point):
    a graph input rather than a guarded constant, so new values do not recompile."""

    def python_type(self):
        return float

    def __repr__(self) -> str:
        return f"SymFloatVar({self.node.name}, hint={self.hint})"


class ListVar(VT):
    def __init__(self, items, source=None) -> None:
        self.items = list(items)
        self.source = source

    def python_type(self):
        return list

    def is_const(self) -> bool:
        return all(i.is_const() for i in self.items)

    def const(self):
        return [i.const() for i in self.items]


class TupleVar(VT):
    def __init__(self, items, source=None, tuple_type=tuple) -> None:
        self.items = list(items)
        self.source = source
        self.tuple_type = tuple_type  # a namedtuple class keeps its type

    def python_type(self):
        return self.tuple_type

    def is_const(self) -> bool:
        return all(i.is_const() for i in self.items)

    def const(self):
        values = [i.const() for i in self.items]
        if not hasattr(self.tuple_type, "_fields"):  # tuple, kiln.Size: built from an iterable
            return self.tuple_type(values)
        return self.tuple_type(*values)


class DictVar(VT):
    """A dict with constant keys (in insertion order) and variable values."""

    def __init__(self, items: dict, source=None, dict_type=dict) -> None:
        self.items = dict(items)
        self.source = source
        self.dict_type = dict_type

    def python_type(self):
        return self.dict_type

    def is_const(self) -> bool:
        return all(v.is_const() for v in self.items.values())

    def const(self):
        return self.dict_type((k, v.const()) for k, v in self.items.items())


class SliceVar(VT):
    def __init__(self, start: VT, stop: VT, step: VT) -> None:
        self.start, self.stop, self.step = start, stop, step

    def python_type(self):
        return slice

    def is_const(self) -> bool:
        return self.start.is_const() and self.stop.is_const() and self.step.is_const()

    def const(self):
        return slice(self.start.const(), self.stop.const(), self.step.const())


class RangeItems(collections.abc.Sequence):
    """A range's items as constants, made when read: a time loop's `range(100_000)` becomes a
    loop node without 100,000 variables made at capture."""

    def __init__(self, r: range) -> None:
        self.range = r

    def __len__(self) -> int:
        return len(self.range)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [ConstVar(v) for v in self.range[k]]
        return ConstVar(self.range[k])


class IteratorVar(VT):
    """An iterator over a sequence known at capture time (lists, tuples, ranges, zip, ...)."""

    range = None  # the range iterated over, when it is one
    sym_bounds = None  # its bounds as variables when some is a run-time int
    peeled = 0  # iterations of a range run unrolled before a loop node (loops.py)
    promoted = False  # a loop node was tried with a number carried as a 0-d array (loops.py)

    def __init__(self, items, py_type: type | None = None) -> None:
        self.items = items if isinstance(items, RangeItems) else list(items)
        self.pos = 0
        self.py_type = py_type  # the type eager code would see, where one is known

    def python_type(self):
        return self.py_type if self.py_type is not None else super().python_type()

    def next_item(self):
        if self.pos >= len(self.items):
            return None
        self.pos += 1
        return self.items[self.pos - 1]


class CellVar(VT):
    """A closure cell created in the captured code (MAKE_CELL) or read from a closure."""

    def __init__(self, contents: VT | None = None, source=None) -> None:
        self.contents = contents
        self.source = source


class FunctionVar(VT):
    """A Python function defined outside the captured code: inlined when called."""

    def __init__(self, fn, source=None) -> None:
        self.fn = fn
        self.source = source

    def python_type(self):
        return type(self.fn)


class NestedFunctionVar(VT):
    """A function (lambda, closure, comprehension) created while capturing (MAKE_FUNCTION)."""

    def __init__(self, code, globals_, name, defaults, kwdefaults, closure) -> None:
        self.code = code
        self.globals = globals_
        self.name = name
        self.defaults = defaults  # TupleVar or None
        self.kwdefaults = kwdefaults  # DictVar or None
        self.closure = closure  # list[CellVar] or None

    def python_type(self):
        import types

        return types.FunctionType


class BoundMethodVar(VT):
    """`obj.method` for a Python-level method: `fn` (a function variable) with `self` bound."""

    def __init__(self, fn: VT, self_var: VT) -> None:
        self.fn = fn
        self.self_var = self_var


class PartialVar(VT):
    """functools.partial(fn, *args, **kwargs)."""

    def __init__(self, fn: VT, args, kwargs: dict, source=None) -> None:
        self.fn = fn
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.source = source


class TensorAttrVar(VT):
    """A method of a tensor looked up but not yet called (`x.view` before `(...)`)."""

    def __init__(self, tensor: TensorVar, name: str) -> None:
        self.tensor = tensor
        self.name = name


class ModuleVar(VT):
    """A kiln.nn.Module instance; its parameters become graph inputs and `forward` is inlined."""

    def __init__(self, module, source=None, label: str = "module") -> None:
        self.module = module
        self.source = source
        self.label = label  # the attribute path, for naming parameters in the graph

    def python_type(self):
        return type(self.module)


class ObjectVar(VT):
    """Any other object known by identity: Python modules, classes, builtins, kiln functions,
    instances of plain classes (attributes read through guards)."""

    def __init__(self, value, source=None) -> None:
        self.value = value
        self.source = source

    def python_type(self):
        return type(self.value)

    def __repr__(self) -> str:
        return f"ObjectVar({type(self.value).__name__})"


class NewObjectVar(VT):
    """An instance of a plain Python class created while capturing (`Plain(2.5)`): no real
    object exists yet. `attrs` holds its instance attributes as variables (what `__init__` and
    later assignments stored); if it outlives the capture (returned, live at a graph break) the
    entry builds it once with object.__new__ and these attributes."""

    def __init__(self, cls_var: ObjectVar) -> None:
        self.cls_var = cls_var  # the class as read (guarded by identity at its source)
        self.cls = cls_var.value
        self.attrs: dict = {}
        self.mapping: DictVar | None = None  # the items of a dict subclass's instance

    def python_type(self):
        return self.cls

    def __repr__(self) -> str:
        return f"NewObjectVar({self.cls.__name__})"


class LazyTextVar(VT):
    """A string formatted from values known only at run time (an f-string of a symbolic shape:
    `f"got {x.shape}"`). An assertion's message may be one (it is shown only when the check
    fails, which then runs eagerly); any other use is a graph break. `example` is the text the
    capture's values give."""

    def __init__(self, example: str) -> None:
        self.example = example


class GradModeVar(VT):
    """`kiln.no_grad()` / `enable_grad()` / `set_grad_enabled(b)`: a context manager."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled


class AutocastExitVar(VT):
    """The `__exit__` of a `kiln.autocast` block opened in compiled code: puts back the region
    of `device` the block replaced (`previous`: enabled, dtype)."""

    def __init__(self, device: str, previous: tuple) -> None:
        self.device = device
        self.previous = previous


class GradModeExitVar(VT):
    """The `__exit__` a with-block keeps on the stack: restores the previous grad mode."""

    def __init__(self, previous: bool) -> None:
        self.previous = previous

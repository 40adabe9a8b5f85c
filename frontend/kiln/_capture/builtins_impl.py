"""Python builtins evaluated at capture time: len, isinstance, range, zip, sum, getattr, ...

Each handler takes the frame and the argument variables and returns a variable; anything it
cannot decide statically raises `Unsupported`.
"""

from __future__ import annotations

import builtins
import collections
import dataclasses
import functools
import itertools
import operator

import kiln
from kiln._capture import calls_object, loops
from kiln._capture import variables as V


def _type_of(frame, value: V.VT):
    if isinstance(value, V.TensorVar):
        return value.python_type()
    return value.python_type()


def _len(frame, args, kwargs):
    (value,) = args
    if isinstance(value, V.TensorVar):
        if value.example.dim() == 0:
            raise V.Unsupported("len() of a 0-d tensor")
        return frame.ctx.size_of(value, 0)
    if isinstance(value, V.ModuleVar):
        return V.ConstVar(len(value.module))
    if isinstance(value, V.NewObjectVar):
        return calls_object.length(frame, value)
    return V.ConstVar(len(frame.unpack_iterable(_no_consume(value))))


def _no_consume(value):
    if isinstance(value, V.IteratorVar):
        raise V.Unsupported("len() of an iterator")
    return value


def _isinstance(frame, args, kwargs):
    value, classes = args
    classes = _obj(classes)  # a class, or a tuple of classes (ObjectVars inside a TupleVar)
    t = _type_of(frame, value)
    if isinstance(value, V.TupleVar) and value.tuple_type is not tuple:
        t = value.tuple_type
    return V.ConstVar(issubclass(t, classes))


def _issubclass(frame, args, kwargs):
    a, b = args
    return V.ConstVar(issubclass(_obj(a), _obj(b)))


def _obj(v):
    if isinstance(v, V.ObjectVar):
        return v.value
    if isinstance(v, V.TupleVar):
        return tuple(_obj(i) for i in v.items)
    return v.const()


def _range(frame, args, kwargs):
    if any(isinstance(a, V.SymIntVar) for a in args) and loops.iterated_next(frame):
        # `for t in range(steps)` with `steps` a dynamic int: the loop node (loops.py) takes
        # the bounds at run time; an unrolled loop specializes them when it starts.
        value = V.ConstVar(range(*[a.hint if isinstance(a, V.SymIntVar) else a.const()
                                   for a in args]))
        value.sym_bounds = list(args)
        return value
    bounds = [frame.const_index(a) for a in args]
    return V.ConstVar(range(*bounds))


def _enumerate(frame, args, kwargs):
    items = frame.unpack_iterable(args[0])
    start = args[1].const() if len(args) > 1 else kwargs.get("start", V.ConstVar(0)).const()
    return V.IteratorVar([V.TupleVar([V.ConstVar(i + start), v]) for i, v in enumerate(items)])


def _zip(frame, args, kwargs):
    lists = [frame.unpack_iterable(a) for a in args]
    return V.IteratorVar([V.TupleVar(list(t)) for t in zip(*lists, strict=False)])


def _repeat(frame, args, kwargs):
    """itertools.repeat(x, n) with a known count (torch's _pair and _ntuple use it)."""
    times = args[1] if len(args) > 1 else kwargs.get("times")
    if times is None:
        raise V.Unsupported("itertools.repeat without a count is endless")
    return V.IteratorVar([args[0]] * frame.const_index(times))


def _chain(frame, args, kwargs):
    return V.IteratorVar([v for a in args for v in frame.unpack_iterable(a)])


def _chain_from_iterable(frame, args, kwargs):
    return _chain(frame, frame.unpack_iterable(args[0]), {})


def _product(frame, args, kwargs):
    if kwargs:
        raise V.Unsupported("itertools.product with repeat=")
    lists = [frame.unpack_iterable(a) for a in args]
    return V.IteratorVar([V.TupleVar(list(t)) for t in itertools.product(*lists)])


def _list(frame, args, kwargs):
    return V.ListVar(frame.unpack_iterable(args[0]) if args else [])


def _tuple(frame, args, kwargs):
    return V.TupleVar(frame.unpack_iterable(args[0]) if args else [])


def _dict(frame, args, kwargs):
    items = {}
    if args:
        src = args[0]
        if isinstance(src, V.DictVar):
            items.update(src.items)
        else:
            for pair in frame.unpack_iterable(src):
                k, v = frame.unpack_iterable(pair)
                items[k.const()] = v
    items.update(kwargs)
    return V.DictVar(items)


def _ordered_dict(frame, args, kwargs):
    """``OrderedDict(...)`` (``Module.state_dict`` starts from one): a dict that says it is an
    OrderedDict."""
    d = _dict(frame, args, kwargs)
    return V.DictVar(d.items, dict_type=collections.OrderedDict)


def _reduce(op):
    def handler(frame, args, kwargs):
        items = frame.unpack_iterable(args[0])
        acc = args[1] if len(args) > 1 else kwargs.get("start", V.ConstVar(0))
        for item in items:
            acc = frame.binary(op, acc, item)
        return acc

    return handler


def _same_kind_scalars(items) -> bool:
    """Zero-dim tensors (NumPy scalars: `table[i, j]`) of one dtype and kind: what `max` picks
    has that dtype whichever it picks."""
    first = items[0]
    return all(isinstance(i, V.TensorVar) and i.example.dim() == 0
               and i.example.dtype == first.example.dtype and i.numpy == first.numpy
               for i in items)


def _select_extreme(frame, pick, items):
    """`max(a, b, ...)` of 0-d tensors as Python computes it, in the graph: the first item, and
    each later item where it compares greater (less for min). A NaN never compares greater, so
    a NaN first item stays and a later one is skipped, as in Python."""
    np = __import__("numpy")
    better = operator.gt if pick is max else operator.lt
    where = frame.ctx.wrap(np.where if items[0].numpy else kiln.where, None)
    best = items[0]
    for item in items[1:]:
        best = frame.call(where, [frame.binary(better, item, best), item, best], {})
    return best


def _minmax(pick):
    def handler(frame, args, kwargs):
        items = frame.unpack_iterable(args[0]) if len(args) == 1 else list(args)
        if kwargs:
            raise V.Unsupported(f"{pick.__name__}() with key= or default=")
        if any(isinstance(i, V.TensorVar) for i in items):
            if _same_kind_scalars(items):
                return _select_extreme(frame, pick, items)
            raise V.Unsupported(f"Python {pick.__name__}() over tensors compares data",
                                f"use kiln.{'maximum' if pick is max else 'minimum'}")
        if not items:
            raise V.Unsupported(f"{pick.__name__}() of an empty sequence")
        if all(i.is_const() for i in items):
            return V.ConstVar(pick(i.const() for i in items))
        # sizes: each comparison is guarded as the relation it is (`s0 <= s1`), so the
        # winner stays a symbol (np.diagonal's min(rows, cols) of a dynamic matrix)
        better = operator.lt if pick is min else operator.gt
        best = items[0]
        for item in items[1:]:
            if frame.truth(frame.binary(better, item, best)):
                best = item
        return best

    return handler


def _getattr(frame, args, kwargs):
    obj, name = args[0], args[1].const()
    try:
        return frame.get_attr(obj, name)
    except (V.Unsupported, AttributeError) as e:
        if len(args) > 2:
            return args[2]
        if isinstance(e, AttributeError):
            raise V.Unsupported(f"AttributeError: {e} (raises at run time)") from None
        raise


def _hasattr(frame, args, kwargs):
    obj, name = args[0], args[1].const()
    if isinstance(obj, V.TensorVar):
        return V.ConstVar(hasattr(obj.example, name))
    if isinstance(obj, V.ModuleVar):
        return V.ConstVar(hasattr(obj.module, name))
    if isinstance(obj, V.ObjectVar):
        return V.ConstVar(hasattr(obj.value, name))
    if isinstance(obj, V.NewObjectVar):
        return V.ConstVar(calls_object.has_attr(obj, name))
    return V.ConstVar(hasattr(obj.const(), name))


def _setattr(frame, args, kwargs):
    if len(args) != 3 or kwargs:
        raise V.Unsupported("setattr() takes three arguments (raises at run time)")
    frame.set_attr(args[0], args[1].const(), args[2])
    return V.ConstVar(None)


def _type(frame, args, kwargs):
    if len(args) != 1:
        raise V.Unsupported("type() with three arguments")
    v = args[0]
    if isinstance(v, V.TupleVar):
        return V.ObjectVar(v.tuple_type)
    return V.ObjectVar(_type_of(frame, v))


def _iter(frame, args, kwargs):
    return V.IteratorVar(frame.unpack_iterable(args[0]))


def _next(frame, args, kwargs):
    it = args[0]
    if not isinstance(it, V.IteratorVar):
        raise V.Unsupported("next() on a non-iterator")
    item = it.next_item()
    if item is None:
        if len(args) > 1:
            return args[1]
        raise V.Unsupported("StopIteration")
    return item


def _reversed(frame, args, kwargs):
    return V.IteratorVar(list(reversed(frame.unpack_iterable(args[0]))))


def _sorted(frame, args, kwargs):
    items = frame.unpack_iterable(args[0])
    if set(kwargs) - {"reverse"} or not all(i.is_const() for i in items):
        raise V.Unsupported("sorted() of non-constant values or with a key")
    reverse = bool(kwargs["reverse"].const()) if "reverse" in kwargs else False
    return V.ListVar([V.ConstVar(v) for v in sorted((i.const() for i in items), reverse=reverse)])


def _anyall(pick):
    def handler(frame, args, kwargs):
        return V.ConstVar(pick(frame.truth(i) for i in frame.unpack_iterable(args[0])))

    return handler


def _map(frame, args, kwargs):
    fn = args[0]
    lists = [frame.unpack_iterable(a) for a in args[1:]]
    return V.IteratorVar([frame.call(fn, list(t), {}) for t in zip(*lists, strict=False)])


def _filter(frame, args, kwargs):
    fn, items = args[0], frame.unpack_iterable(args[1])
    if isinstance(fn, V.ConstVar) and fn.value is None:
        return V.IteratorVar([i for i in items if frame.truth(i)])
    return V.IteratorVar([i for i in items if frame.truth(frame.call(fn, [i], {}))])


def _slice(frame, args, kwargs):
    parts = list(args) + [V.ConstVar(None)] * (3 - len(args))
    if len(args) == 1:
        parts = [V.ConstVar(None), args[0], V.ConstVar(None)]
    return V.SliceVar(*parts)


def _exact_floor_division(frame, value: V.SymFloatVar):
    """int(a / b) of a non-negative symbolic int a and a positive int b (Swin's
    `int(windows.shape[0] / (H * W / ws / ws))`): a // b, which it equals, kept symbolic; else
    None."""
    a, b = getattr(value, "quotient_of", (None, None))
    if not (isinstance(a, V.SymIntVar) and type(a.hint) is int and a.hint >= 0):
        return None
    divisor = b.const() if isinstance(b, V.ConstVar) else None
    if isinstance(divisor, float) and divisor.is_integer():
        divisor = int(divisor)
    if type(divisor) is not int or divisor <= 0:
        return None
    return frame.binary(operator.floordiv, a, V.ConstVar(divisor))


def _int_float(conv):
    def handler(frame, args, kwargs):
        (value,) = args
        if isinstance(value, V.TensorVar):
            raise V.Unsupported(f"{conv.__name__}() of a tensor reads its data")
        if isinstance(value, V.SymFloatVar):
            if conv is int and (floor := _exact_floor_division(frame, value)) is not None:
                return floor
            return value if conv is float else V.ConstVar(int(frame.concrete_int(value)))
        if isinstance(value, V.SymIntVar):
            return value if conv is int else V.ConstVar(float(frame.concrete_int(value)))
        return V.ConstVar(conv(value.const()))

    return handler


def _bool(frame, args, kwargs):
    return V.ConstVar(frame.truth(args[0]) if args else False)


def _callable(frame, args, kwargs):
    v = args[0]
    if isinstance(v, (V.FunctionVar, V.NestedFunctionVar, V.BoundMethodVar, V.ModuleVar,
                      V.TensorAttrVar, V.PartialVar)):
        return V.ConstVar(True)
    if isinstance(v, V.ObjectVar):
        return V.ConstVar(callable(v.value))
    if isinstance(v, V.NewObjectVar):
        return V.ConstVar(calls_object.class_attr(v.cls, "__call__", None) is not None)
    return V.ConstVar(False)


def _partial(frame, args, kwargs):
    if not args:
        raise V.Unsupported("functools.partial() without a function")
    return V.PartialVar(args[0], args[1:], kwargs)


def _dataclass_type(v: V.VT):
    """The class of a dataclass instance or class variable, or None."""
    cls = getattr(v, "cls", None) if isinstance(v, V.NewObjectVar) else getattr(v, "value", None)
    if cls is not None and not isinstance(cls, type):
        cls = type(cls)
    return cls if dataclasses.is_dataclass(cls) else None


def _fields(frame, args, kwargs):
    """dataclasses.fields(obj): the class's fields (constant for a guarded class)."""
    cls = _dataclass_type(args[0]) if args else None
    if cls is None:
        raise V.Unsupported("dataclasses.fields() of a value that is not a dataclass")
    return V.ConstVar(dataclasses.fields(cls))


def _is_dataclass(frame, args, kwargs):
    return V.ConstVar(_dataclass_type(args[0]) is not None)


def _assert_error(frame, args, kwargs):
    raise V.Unsupported("assertion failed (raises at run time)")


HANDLERS = {
    builtins.len: _len,
    builtins.isinstance: _isinstance,
    builtins.issubclass: _issubclass,
    builtins.range: _range,
    builtins.enumerate: _enumerate,
    builtins.zip: _zip,
    builtins.list: _list,
    builtins.tuple: _tuple,
    builtins.dict: _dict,
    collections.OrderedDict: _ordered_dict,
    builtins.sum: _reduce(operator.add),
    builtins.min: _minmax(min),
    builtins.max: _minmax(max),
    builtins.getattr: _getattr,
    builtins.hasattr: _hasattr,
    builtins.setattr: _setattr,
    builtins.type: _type,
    builtins.iter: _iter,
    builtins.next: _next,
    builtins.reversed: _reversed,
    builtins.sorted: _sorted,
    builtins.any: _anyall(any),
    builtins.all: _anyall(all),
    builtins.map: _map,
    builtins.filter: _filter,
    builtins.slice: _slice,
    builtins.int: _int_float(int),
    builtins.float: _int_float(float),
    builtins.bool: _bool,
    builtins.callable: _callable,
    AssertionError: _assert_error,
    functools.partial: _partial,
    itertools.repeat: _repeat,
    itertools.chain: _chain,
    itertools.chain.from_iterable: _chain_from_iterable,
    itertools.product: _product,
    dataclasses.fields: _fields,
    dataclasses.is_dataclass: _is_dataclass,
}
_ = kiln

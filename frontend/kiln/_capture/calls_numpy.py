"""NumPy arrays and calls in captured code (`kiln/_numpy` holds the implementations).

An ndarray the function reads becomes a graph input over the same memory, tracked as a
TensorVar flagged `numpy` (its Python type is `numpy.ndarray`). On such arrays:
- a call of a NumPy function (`np.sum`, `np.add`, `np.linalg.norm`, ...), an ndarray method,
  an operator or an attribute inlines kiln's NumPy implementation with the flags cleared (inside
  it, arrays are plain kiln tensors), and flags what it returns;
- items (`a[1:-1, ::-1]`, `a[mask] = 0`) are kiln's getitem/setitem, with negative steps as flips;
- NumPy called with constants only runs at capture time (its result is a constant or a baked
  array), except the functions that build arrays, which become graph nodes;
- anything kiln has no implementation for is a graph break that runs NumPy itself.
Functions marked `_kiln_fold` (NumPy's dtype rules) run at capture time on constants.
"""

from __future__ import annotations

import contextlib
import operator
import sys
import types

import kiln
from kiln._capture import ops
from kiln._capture import variables as V

_NUMPY_HINT = ("kiln compiles NumPy's ufuncs, reductions, shape functions and creation "
               "functions; this call runs in NumPy (a graph break)")


def _knp():
    from kiln import _numpy

    return _numpy


def is_array(v) -> bool:
    return isinstance(v, V.TensorVar) and v.numpy


def any_array(values) -> bool:
    return any(is_array(v) for v in _walk(values))


def _walk(values):
    for v in values:
        if isinstance(v, (V.ListVar, V.TupleVar)):
            yield from _walk(v.items)
        elif isinstance(v, V.DictVar):
            yield from _walk(v.items.values())
        elif isinstance(v, V.SliceVar):
            yield from _walk((v.start, v.stop, v.step))
        else:
            yield v


def _has_runtime_values(values) -> bool:
    return any(isinstance(v, (V.TensorVar, V.SymIntVar)) for v in _walk(values))


def _all_known(values) -> bool:
    return all(isinstance(v, (V.ConstVar, V.ObjectVar)) for v in _walk(values))


# -- capture-time functions -----------------------------------------------------------------
def is_fold(fn: V.VT) -> bool:
    value = fn.fn if isinstance(fn, V.FunctionVar) else getattr(fn, "value", None)
    return getattr(value, "_kiln_fold", False) is True


def known(v: V.VT):
    """The capture-time value of `v`, which must not depend on the run (no tensor, no symbol)."""
    if _has_runtime_values([v]):
        raise V.Unsupported("a value computed at run time where NumPy needs one known at "
                            "capture time")
    return ops.to_example(v)


def is_dtype_comparison(a: V.VT, b: V.VT) -> bool:
    """`a.dtype == np.float64`: a NumPy dtype against a dtype or a scalar type (classes are
    guarded by identity, dtypes by value), decided at capture time."""
    import numpy as np

    values = []
    for v in (a, b):
        if isinstance(v, V.ConstVar) and isinstance(v.value, (np.dtype, str)):
            values.append(v.value)
        elif isinstance(v, V.ObjectVar) and isinstance(v.value, type):
            values.append(v.value)
        else:
            return False
    return any(isinstance(v, np.dtype) for v in values)


def fold_call(frame, fn: V.VT, args, kwargs) -> V.VT:
    value = fn.fn if isinstance(fn, V.FunctionVar) else fn.value
    known_args = [known(a) for a in args]
    known_kwargs = {k: known(v) for k, v in kwargs.items()}
    try:
        result = value(*known_args, **known_kwargs)
    except Exception as e:  # NumPy's own error: eager raises it with the user's traceback
        from kiln._numpy._dtypes import NoKilnDtype

        if isinstance(e, NoKilnDtype):
            raise V.Unsupported(str(e), "NumPy runs this code") from None
        raise V.Unsupported(f"{getattr(value, '__name__', 'a NumPy rule')}() raised "
                            f"{type(e).__name__}: {e} (raises at run time)") from None
    return frame.ctx.wrap(result, None)


# -- calls ------------------------------------------------------------------------------------
class NumpyCallVar(V.VT):
    """An ndarray method bound to its array (`a.sum`): kiln's implementation, `a` first."""

    def __init__(self, impl, self_var: V.VT, name: str) -> None:
        self.impl = impl
        self.self_var = self_var
        self.name = name


@contextlib.contextmanager
def _as_tensors(values):
    """Arrays among `values` as plain tensors (kiln semantics) for the block's duration."""
    flagged = [v for v in _walk(values) if is_array(v)]
    for v in flagged:
        v.numpy = False
    try:
        yield
    finally:
        for v in flagged:
            v.numpy = True


def call_impl(frame, impl, args, kwargs) -> V.VT:
    """Inlines `impl` (kiln's NumPy implementation) with arrays as plain tensors; what it
    returns is flagged as arrays again."""
    with _as_tensors(list(args) + list(kwargs.values())):
        result = frame.call(frame.ctx.wrap(impl, None), list(args), dict(kwargs))
    _flag(result)
    return result


def reflag(value: V.VT, array: bool) -> V.VT:
    """wrap_numpy's conversions as captured: the same tensor seen as an array (or no longer),
    no copy and no node."""
    import copy

    if not isinstance(value, V.TensorVar):
        if array:
            raise V.Unsupported(f"wrap_numpy: a {type(value).__name__} where a tensor was "
                                "expected")
        return value  # a Python or NumPy scalar result stays what it is
    out = copy.copy(value)
    out.numpy = array
    out.source = out.array_source = None
    return out


def _flag(result: V.VT) -> None:
    if isinstance(result, V.TensorVar):
        result.numpy = True
    elif isinstance(result, (V.TupleVar, V.ListVar)):
        for item in result.items:
            _flag(item)


def call_function(frame, fn, args, kwargs) -> V.VT:
    """A call of a NumPy callable (`np.sum(a)`, `np.float32(x)`, `np.zeros(n)`)."""
    knp = _knp()
    values = list(args) + list(kwargs.values())
    if fn is sys.modules["numpy"].errstate and not args and all(
            isinstance(v, V.ConstVar) and v.value in (None, "ignore", "warn", "print", "log")
            for v in kwargs.values()):
        # silencing or reporting floating-point warnings: compiled kernels raise none, so the
        # block's ops compile as they are ('raise' or 'call' would need the checks: NumPy runs)
        return V.GradModeVar(frame.ctx.grad_enabled)
    impl = knp.lookup(fn)
    if impl is None and isinstance(fn, type) and _is_scalar_type(fn) and _has_runtime_values(
            values):  # fmt: skip
        if len(args) != 1 or kwargs:
            raise V.Unsupported(f"{numpy_name(fn)}() with more than one argument")
        return call_impl(frame, knp.METHODS["astype"], [_as_array(frame, args[0]),
                                                        V.ObjectVar(fn)], {})
    if not _has_runtime_values(values) and _all_known(values) and fn not in knp.BUILDS_ARRAYS \
            and _pure(fn, impl):
        return _run_numpy(frame, fn, args, kwargs)
    if impl is None:
        raise V.Unsupported(f"{numpy_name(fn)}() is not compiled by kiln", _NUMPY_HINT)
    for written in _written(fn, args, kwargs):
        check_writable(written)
    if not kwargs and _is_ufunc(fn):
        fast = fast_ufunc(frame, fn, list(args))
        if fast is not None:
            return fast
    result = call_impl(frame, impl, args, kwargs)
    if getattr(fn, "__name__", "") in _REVERSED_VIEWS:
        mark_reversed(frame, result)
    return result


# NumPy functions whose result is a view with a negative stride (kiln makes a copy).
_REVERSED_VIEWS = frozenset(("flip", "fliplr", "flipud", "rot90"))
# NumPy functions that write into their first argument.
_WRITES_FIRST = frozenset(("copyto", "put", "place", "putmask", "fill_diagonal", "put_along_axis",
                           "at"))


def _written(fn, args, kwargs) -> list:
    """The arrays a NumPy call writes into: `out=` and the destination of copyto & co."""
    out = kwargs.get("out")
    written = list(out.items) if isinstance(out, (V.TupleVar, V.ListVar)) else [out]
    if getattr(fn, "__name__", "") in _WRITES_FIRST and args:
        written.append(args[0])
    return [w for w in written if is_array(w)]


def numpy_name(fn) -> str:
    """How NumPy code spells `fn`: np.sum, np.linalg.inv, np.random.rand, np.add.outer."""
    name = getattr(fn, "__name__", None) or repr(fn)
    owner = getattr(fn, "__self__", None)
    if owner is not None and hasattr(owner, "__name__") and not isinstance(owner,
                                                                            types.ModuleType):
        return f"np.{owner.__name__}.{name}"  # a ufunc's method
    module = getattr(fn, "__module__", None) or "numpy"
    for public in ("linalg", "random", "fft", "ma", "polynomial"):
        if module.startswith(f"numpy.{public}") or module.startswith(f"numpy._{public}"):
            return f"np.{public}.{name}"
    return f"np.{name}"


def _is_ufunc(fn) -> bool:
    import numpy as np

    return isinstance(fn, np.ufunc)


def _pure(fn, impl) -> bool:
    """NumPy callables that may run once at capture time on constants: ufuncs, scalar types and
    dtypes, and the functions kiln implements (pure by construction); never `np.random`, I/O or
    global state, whose calls must happen on every run."""
    import numpy as np

    if isinstance(fn, np.ufunc) or fn in (np.dtype, np.finfo, np.iinfo):
        return True
    if isinstance(fn, type) and _is_scalar_type(fn):
        return True
    return impl is not None


def _is_scalar_type(t) -> bool:
    import numpy as np

    return issubclass(t, np.generic)


def _as_array(frame, v: V.VT) -> V.VT:
    if isinstance(v, V.TensorVar):
        return v
    return call_impl(frame, _knp().FUNCTIONS[__import__("numpy").asarray], [v], {})


def _run_numpy(frame, fn, args, kwargs) -> V.VT:
    """NumPy on constants, at capture time: a scalar result is a constant, an array a baked
    input of the graph."""
    try:
        result = fn(*[known(a) for a in args], **{k: known(v) for k, v in kwargs.items()})
    except Exception as e:
        raise V.Unsupported(f"{numpy_name(fn)}() raised {type(e).__name__}: {e} "
                            "(raises at run time)") from None
    return frame.ctx.wrap(result, None)


def call_method(frame, m: NumpyCallVar, args, kwargs) -> V.VT:
    if m.name in _WRITING_METHODS or is_array(kwargs.get("out")):
        check_writable(kwargs.get("out") if m.name not in _WRITING_METHODS else m.self_var)
    return call_impl(frame, m.impl, [m.self_var] + list(args), kwargs)


# ndarray methods that write into the array.
_WRITING_METHODS = frozenset(("fill", "sort", "put", "itemset", "partition", "setfield"))


# -- attributes, operators, items ------------------------------------------------------------
_DATA_METHODS = {
    "item": "ndarray.item() reads a value from the array's data",
    "tolist": "ndarray.tolist() reads the array's data into Python",
    "tobytes": "ndarray.tobytes() reads the array's data",
    "nonzero": "ndarray.nonzero() has a data-dependent output shape",
    "__array__": "converting an array to another array type",
}


def get_attr(frame, a: V.TensorVar, name: str) -> V.VT:
    knp = _knp()
    ex = a.example
    if name == "shape":
        return V.TupleVar([frame.ctx.size_of(a, d) for d in range(ex.dim())])
    if name == "ndim":
        return V.ConstVar(ex.dim())
    if name == "dtype":
        return V.ConstVar(knp._dtypes.to_numpy(ex.dtype))
    if name == "itemsize":
        return V.ConstVar(ex.element_size())
    if name in ("size", "nbytes"):
        total = V.ConstVar(ex.element_size() if name == "nbytes" else 1)
        for d in range(ex.dim()):
            total = frame.binary(operator.mul, total, frame.ctx.size_of(a, d))
        return total
    if name == "strides":
        if frame.ctx.has_symbols:
            raise V.RestartStatic()
        return V.ConstVar(tuple(s * ex.element_size() for s in ex.stride()))
    if name in knp.ATTRIBUTES:
        return call_impl(frame, knp.ATTRIBUTES[name], [a], {})
    if name in _DATA_METHODS:
        raise V.Unsupported(_DATA_METHODS[name], "keep values as arrays inside compiled code")
    if name in knp.METHODS:
        return NumpyCallVar(knp.METHODS[name], a, name)
    raise V.Unsupported(f"ndarray.{name} is not compiled by kiln", _NUMPY_HINT)


# -- the fast path: a ufunc on arrays and scalars, recorded without inlining ------------------
_INPLACE = {operator.iadd: operator.add, operator.isub: operator.sub,
            operator.imul: operator.mul, operator.itruediv: operator.truediv,
            operator.ifloordiv: operator.floordiv, operator.imod: operator.mod,
            operator.ipow: operator.pow, operator.iand: operator.and_,
            operator.ior: operator.or_, operator.ixor: operator.xor}


def _operator_ufunc(op):
    import numpy as np

    return {operator.add: np.add, operator.sub: np.subtract, operator.mul: np.multiply,
            operator.truediv: np.true_divide, operator.floordiv: np.floor_divide,
            operator.mod: np.remainder, operator.pow: np.power, operator.and_: np.bitwise_and,
            operator.or_: np.bitwise_or, operator.xor: np.bitwise_xor, operator.lt: np.less,
            operator.le: np.less_equal, operator.gt: np.greater, operator.ge: np.greater_equal,
            operator.eq: np.equal, operator.ne: np.not_equal, operator.neg: np.negative,
            operator.abs: np.absolute, operator.invert: np.invert}.get(op)


def _scalar_spec(v: V.VT):
    import numpy as np

    if not isinstance(v, V.ConstVar):
        return None
    if type(v.value) in (int, float, bool):
        return type(v.value)
    if isinstance(v.value, np.generic) and _knp()._dtypes.supported(v.value.dtype):
        return type(v.value)
    return None


def fast_ufunc(frame, ufunc, args: list) -> V.VT | None:
    """`ufunc(*args)` on arrays and scalars (no out=, where=, dtype=) recorded as the kiln op
    with NumPy's casts, as the implementation in kiln/_numpy/_ufuncs.py would, but without
    inlining it: most of a NumPy program's ops, captured ten times faster. None when the call
    needs the implementation (a helper function, other operand kinds)."""
    from kiln._numpy import _dtypes, _ufuncs

    entry = _ufuncs.UNARY.get(ufunc) if len(args) == 1 else _ufuncs.BINARY.get(ufunc)
    if entry is None or not isinstance(entry[0], types.BuiltinFunctionType):
        return None
    kfn, compute = entry
    specs = []
    floating = all(a.example.dtype.is_floating_point for a in args if isinstance(a, V.TensorVar))
    for i, a in enumerate(args):
        if isinstance(a, V.TensorVar):
            specs.append(a.example.dtype)
        elif isinstance(a, V.SymIntVar) and i > 0 and floating:
            # a run-time int (a loop node's index) after a float array: a weak Python int,
            # whose value cannot change the result's dtype (NEP 50)
            specs.append(int)
        else:
            sp = _scalar_spec(a)
            if sp is None:
                return None
            specs.append(sp)
    if not any(isinstance(a, V.TensorVar) for a in args):
        return None
    try:
        rdt = _dtypes.ufunc_result(ufunc, tuple(specs))
        cdt = rdt if compute == "out" else _dtypes.common(tuple(specs))
    except _dtypes.NoKilnDtype as e:
        raise V.Unsupported(str(e), "NumPy runs this code") from None
    except Exception:  # noqa: BLE001 - NumPy refuses these operands: the implementation says how
        return None
    for a in args:
        if isinstance(a, V.ConstVar):
            try:
                _ufuncs.check_fits(a.value, cdt)
            except OverflowError as e:  # NumPy raises it when the code runs there
                raise V.Unsupported(f"{e} (NumPy raises OverflowError)") from None
    operands = [_operand(frame, a, cdt, first=(i == 0)) for i, a in enumerate(args)]
    result = ops.record(frame.ctx, kfn, operands, {}, kfn.__name__)
    if result.example.dtype != rdt:
        result = _cast(frame, result, rdt)
    result.numpy = True
    return result


def _cast(frame, t: V.TensorVar, dtype) -> V.VT:
    return ops.record(frame.ctx, kiln.Tensor.to, [t, V.ConstVar(dtype)], {}, "to")


def _operand(frame, a: V.VT, dtype, first: bool) -> V.VT:
    if isinstance(a, V.TensorVar):
        return a if a.example.dtype == dtype else _cast(frame, a, dtype)
    if isinstance(a, V.SymIntVar):  # after a float array (fast_ufunc): the op promotes it
        return a
    value = a.value
    value = float(value) if dtype.is_floating_point else bool(value) if dtype == kiln.bool \
        else int(value)
    if not first:
        return V.ConstVar(value)
    return ops.record(frame.ctx, kiln.full, [V.ConstVar(()), V.ConstVar(value)],
                      {"dtype": V.ConstVar(dtype)}, "full")


def _fast_inplace(frame, op, a: V.VT, b: V.VT) -> V.VT | None:
    """`a += b` on an array: the ufunc into `a` (NumPy's same_kind casting rule)."""
    from kiln._numpy import _dtypes

    if not is_array(a):
        return None
    check_writable(a)
    ufunc = _operator_ufunc(_INPLACE[op])
    r = fast_ufunc(frame, ufunc, [a, b]) if ufunc is not None else None
    if r is None:
        return None
    if not _dtypes.can_cast(r.example.dtype, a.example.dtype, "same_kind"):
        return None  # the implementation raises NumPy's error
    frame.call_tensor_method(a, "copy_", [r], {})
    return a


def binary(frame, op, a: V.VT, b: V.VT) -> V.VT:
    if op in _INPLACE and is_array(a):
        check_writable(a)
    if op in _INPLACE:
        fast = _fast_inplace(frame, op, a, b)
    else:
        ufunc = _operator_ufunc(op)
        fast = fast_ufunc(frame, ufunc, [a, b]) if ufunc is not None else None
    if fast is not None:
        return fast
    impl = _knp().OPERATORS.get(op)
    if impl is None:
        raise V.Unsupported(f"operator {op.__name__} on NumPy arrays is not compiled by kiln")
    return call_impl(frame, impl, [a, b], {})


def unary(frame, op, a: V.VT) -> V.VT:
    ufunc = _operator_ufunc(op)
    fast = fast_ufunc(frame, ufunc, [a]) if ufunc is not None else None
    if fast is not None:
        return fast
    impl = _knp().OPERATORS.get(op)
    if impl is None:
        raise V.Unsupported(f"operator {op.__name__} on NumPy arrays is not compiled by kiln")
    return call_impl(frame, impl, [a], {})


def call_operator(frame, fn, args) -> V.VT:
    """`operator.add(a, b)` and friends called as functions on arrays."""
    if len(args) == 2:
        return binary(frame, fn, args[0], args[1])
    if len(args) == 1:
        return unary(frame, fn, args[0])
    raise V.Unsupported(f"operator.{fn.__name__} with {len(args)} arguments")


def _index_items(index: V.VT) -> list:
    return list(index.items) if isinstance(index, V.TupleVar) and index.tuple_type is tuple \
        else [index]


def _flipped_index(frame, a: V.TensorVar, index: V.VT):
    """`a` and `index` with every negative-step slice turned into a flip of that dim and the
    positive-step slice over the same elements (kiln's slices step forward only)."""
    items = _index_items(index)
    consumes = []
    for it in items:
        if isinstance(it, V.ConstVar) and (it.value is None):
            consumes.append(0)
        elif isinstance(it, V.ConstVar) and it.value is Ellipsis:
            consumes.append(None)
        elif isinstance(it, V.TensorVar) and it.example.dtype == kiln.bool:
            consumes.append(it.example.dim())
        else:
            consumes.append(1)
    ndim = a.example.dim()
    if None in consumes:
        i = consumes.index(None)
        consumes[i] = ndim - sum(c for c in consumes if c is not None)
    flips, new_items, dim = [], [], 0
    for it, n in zip(items, consumes, strict=True):
        if isinstance(it, V.SliceVar) and isinstance(it.step, V.ConstVar) and (
            isinstance(it.step.value, int) and it.step.value < 0
        ):
            size = frame.ctx.size_of(a, dim)
            if not isinstance(size, V.ConstVar):
                raise V.RestartStatic()
            start, stop, step = frame.const_index(it).indices(size.value)
            count = len(range(start, stop, step))
            first = size.value - 1 - start  # the first element's position in the flipped dim
            flips.append(dim)
            new_items.append(V.SliceVar(V.ConstVar(first), V.ConstVar(first + count * -step),
                                        V.ConstVar(-step)))
        else:
            new_items.append(it)
        dim += n
    if not flips:
        return a, index
    flipped = ops.record(frame.ctx, kiln.flip, [a, V.ConstVar(flips)], {}, "flip")
    return flipped, V.TupleVar(new_items)


def _list_index(frame, items: V.ListVar) -> V.VT:
    """`A[[p, 0]]` with `p` computed (a NumPy integer): NumPy reads a list as an index array,
    where torch's indexing would read a list holding a tensor as a tuple (`A[p, 0]`); the list
    becomes the int64 array it stands for."""
    parts = []
    for i in items.items:
        if isinstance(i, V.TensorVar):
            if i.example.dim() != 0 or i.example.is_floating_point() or i.example.is_complex():
                raise V.Unsupported("a list index holding an array that is not an integer")
            parts.append(i if i.example.dtype == kiln.int64 else _cast(frame, i, kiln.int64))
        elif isinstance(i, V.SymIntVar) or isinstance(i, V.ConstVar) and type(i.value) is int:
            parts.append(ops.record(frame.ctx, kiln.full, [V.ConstVar(()), i],
                                    {"dtype": V.ConstVar(kiln.int64)}, "full"))
        else:
            raise V.Unsupported(f"a list index holding a {type(i).__name__}")
    return ops.record(frame.ctx, kiln.stack, [V.ListVar(parts)], {}, "stack")


def _integer_index(frame, index: V.VT) -> V.VT:
    """`index` with uint8 arrays as int64: NumPy indexes with them as integers, where kiln's
    (torch's) indexing takes a uint8 tensor for a mask."""
    def fix(it):
        if isinstance(it, V.TensorVar) and it.example.dtype == kiln.uint8:
            return _cast(frame, it, kiln.int64)
        if isinstance(it, V.ListVar) and any(isinstance(i, (V.TensorVar, V.SymIntVar))
                                             for i in it.items):
            return _list_index(frame, it)
        return it

    if isinstance(index, V.TupleVar) and index.tuple_type is tuple:
        return V.TupleVar([fix(it) for it in index.items])
    return fix(index)


def get_item(frame, a: V.TensorVar, index: V.VT) -> V.VT:
    index = _integer_index(frame, index)
    with _as_tensors([a, index]):
        base, idx = _flipped_index(frame, a, index)
        result = ops.record(frame.ctx, operator.getitem, [base, idx], {}, "getitem")
    _flag(result)
    if base is not a:
        mark_reversed(frame, result)
    elif getattr(a, "reversed_at", None) is not None:  # a view of such a copy
        result.reversed_at = a.reversed_at
    if getattr(a, "copied_input", False) and isinstance(result, V.TensorVar):
        result.copied_input = True
    return result


def mark_reversed(frame, result: V.VT) -> None:
    """`result` is a NumPy view with a negative stride (`b[::-1]`, `np.flip(b)`), which kiln
    holds as a copy: a later write through it must reach the base (`check_writable`)."""
    from kiln._capture.calls import top_offset

    if isinstance(result, V.TensorVar):
        result.reversed_at = top_offset(frame)


def check_writable(a: V.VT) -> None:
    """Before a write into the array `a`: when it stands for a reversed view, capture again
    with a graph break where that view was made, so NumPy makes it (a real view) and the
    write reaches its base."""
    if getattr(a, "copied_input", False):
        raise V.Unsupported("a write into an array argument that kiln holds as a copy (negative "
                            "strides, or read-only): NumPy runs it")
    offset = getattr(a, "reversed_at", None)
    if offset is not None:
        raise V.BreakAt(offset, "a view with a negative step that is written through (kiln "
                        "holds it as a copy): NumPy makes it and the code after it runs",
                        "write into the base array with the slice (b[::-1] += 1)")


def set_item(frame, a: V.TensorVar, index: V.VT, value: V.VT) -> None:
    check_writable(a)
    index = _integer_index(frame, index)
    if any(isinstance(it, V.SliceVar) and isinstance(it.step, V.ConstVar)
           and isinstance(it.step.value, int) and it.step.value < 0
           for it in _index_items(index)):
        raise V.Unsupported("assignment through a negative-step slice is not compiled by kiln")
    with _as_tensors([a, index, value]):
        if isinstance(value, V.TensorVar) and value.example.dtype != a.example.dtype:
            value = _cast(frame, value, a.example.dtype)
        ops.record(frame.ctx, operator.setitem, [a, index, value], {}, "setitem")


def iterate(frame, a: V.TensorVar) -> list:
    with _as_tensors([a]):
        rows = frame.unpack_iterable(a)
    for r in rows:
        _flag(r)
    return rows


def is_index_grid(value) -> bool:
    """`np.mgrid` or `np.ogrid` (indexed with slices, they build coordinate arrays)."""
    np = sys.modules.get("numpy")
    return np is not None and (value is np.mgrid or value is np.ogrid)

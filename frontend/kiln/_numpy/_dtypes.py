"""NumPy's dtypes and promotion rules, decided by NumPy itself at capture time.

A result dtype is never re-derived by hand: `ufunc_result` asks the installed NumPy what the
ufunc gives for operands of these dtypes (arrays as one-element arrays, Python scalars as weak
values of their type), so NEP 50's rules (NumPy 2) hold exactly, `true_divide` of ints gives
float64, `sum` of int32 gives int64, a NumPy scalar is strong and a Python float weak.

Functions marked `fold` take only capture-time constants (dtypes, types, ints, strings); the
capture evaluator calls them directly instead of inlining them (`calls_numpy.fold_call`).
"""

from __future__ import annotations

import functools

import numpy as np

import kiln


class NoKilnDtype(TypeError):
    """NumPy's result would have a dtype kiln lacks (uint64, complex...): NumPy runs it."""


def fold(fn):
    """Marks a pure function of constants: captured code calls it at capture time."""
    fn._kiln_fold = True
    return fn


_PAIRS = [
    (np.bool_, kiln.bool), (np.uint8, kiln.uint8), (np.int8, kiln.int8), (np.int16, kiln.int16),
    (np.int32, kiln.int32), (np.int64, kiln.int64), (np.float16, kiln.float16),
    (np.float32, kiln.float32), (np.float64, kiln.float64),
]
_TO_KILN = {np.dtype(n): k for n, k in _PAIRS}
_TO_NUMPY = {k: np.dtype(n) for n, k in _PAIRS}


def supported(np_dtype) -> bool:
    return np.dtype(np_dtype) in _TO_KILN


@fold
def to_kiln(dtype):
    """The kiln dtype of a NumPy dtype-like (`np.float32`, `"f8"`, `float`, a kiln dtype)."""
    if isinstance(dtype, kiln.dtype):
        return dtype
    d = np.dtype(dtype)
    if d not in _TO_KILN:
        raise NoKilnDtype(f"kiln has no dtype for NumPy's {d} (supported: bool, uint8, "
                          "int8-64, float16-64)")
    return _TO_KILN[d]


@fold
def to_numpy(kdtype) -> np.dtype:
    return _TO_NUMPY[kdtype]


def _probe_operand(spec):
    """A stand-in operand for NumPy's dtype resolution: a kiln dtype is an array of that
    dtype; a Python type a weak scalar; a NumPy scalar type a strong scalar."""
    if isinstance(spec, kiln.dtype):
        return np.ones(1, _TO_NUMPY[spec])
    return spec(1)


def _from_numpy_result(d: np.dtype, what: str):
    if d not in _TO_KILN:
        raise NoKilnDtype(f"{what} gives {d} in NumPy, which kiln has no dtype for")
    return _TO_KILN[d]


@fold
@functools.lru_cache(maxsize=4096)
def ufunc_result(ufunc, specs: tuple, dtype=None):
    """The dtype `ufunc(*operands, dtype=dtype)` returns in NumPy (the first output's)."""
    with np.errstate(all="ignore"):
        kw = {} if dtype is None else {"dtype": dtype if not isinstance(dtype, kiln.dtype)
                                       else _TO_NUMPY[dtype]}
        out = ufunc(*[_probe_operand(s) for s in specs], **kw)
    if isinstance(out, tuple):
        out = out[0]
    return _from_numpy_result(np.asarray(out).dtype, f"np.{ufunc.__name__}")


@fold
@functools.lru_cache(maxsize=4096)
def common(specs: tuple):
    """np.result_type of the operands (arrays strong, Python scalars weak)."""
    return _from_numpy_result(np.result_type(*[_probe_operand(s) for s in specs]),
                              "np.result_type")


@fold
@functools.lru_cache(maxsize=1024)
def reduction_result(name: str, spec, dtype=None):
    """The dtype of `np.<name>(array of spec)` (sum of int32 is int64, mean of int float64)."""
    kw = {} if dtype is None else {"dtype": dtype if not isinstance(dtype, kiln.dtype)
                                   else _TO_NUMPY[dtype]}
    with np.errstate(all="ignore"):
        out = getattr(np, name)(np.ones(2, _TO_NUMPY[spec]), **kw)
    return _from_numpy_result(np.asarray(out).dtype, f"np.{name}")


@fold
def can_cast(src, dst, casting: str) -> bool:
    return bool(np.can_cast(_TO_NUMPY[src], _TO_NUMPY[dst], casting))


@fold
def is_float(kdtype) -> bool:
    return kdtype.is_floating_point


@fold
def index_of(axis, ndim: int) -> int:
    """`axis` normalized into [0, ndim), NumPy's AxisError when out of range."""
    if not -ndim <= axis < max(ndim, 1):
        raise np.exceptions.AxisError(axis, ndim)
    return axis % max(ndim, 1)


@fold
def axes_of(axis, ndim: int):
    """A reduction's `axis` (None, an int or a tuple) as kiln's dim list, or None for all."""
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return [index_of(a, ndim) for a in axes]


@fold
def constant_array(obj, kdtype=None):
    """An array of Python data (`[0, 2]` as an index list), built at capture time: a constant of
    the graph."""
    arr = np.array(obj, dtype=None if kdtype is None else _TO_NUMPY[kdtype])
    if arr.dtype not in _TO_KILN:
        raise NoKilnDtype(f"kiln has no dtype for NumPy's {arr.dtype}")
    return kiln.from_numpy(np.ascontiguousarray(arr))


@fold
def moved_axes(source, destination, ndim: int):
    """The permutation np.moveaxis applies."""
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [index_of(a, ndim) for a in src]
    dst = [index_of(a, ndim) for a in dst]
    order = [d for d in range(ndim) if d not in src]
    for d, s in sorted(zip(dst, src, strict=True)):
        order.insert(d, s)
    return order


@fold
def range_length(start, stop, step) -> int:
    """How many values np.arange(start, stop, step) has (for floats: NumPy's rounding)."""
    return len(np.arange(start, stop, step))

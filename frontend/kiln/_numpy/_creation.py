"""NumPy's array creation over kiln factories: float64 and int64 defaults, as NumPy."""

from __future__ import annotations

import numpy as np

import kiln
from kiln._numpy import _dtypes as _dt
from kiln._numpy._ufuncs import as_operand, as_tensor, spec


def _dtype_or(dtype, default):
    return default if dtype is None else _dt.to_kiln(dtype)


def _shape(shape):
    if isinstance(shape, int):
        return [shape]
    return list(shape)


def zeros(shape, dtype=None, order="C", *, like=None):
    return kiln.zeros(_shape(shape), dtype=_dtype_or(dtype, kiln.float64))


def ones(shape, dtype=None, order="C", *, like=None):
    return kiln.ones(_shape(shape), dtype=_dtype_or(dtype, kiln.float64))


def empty(shape, dtype=None, order="C", *, like=None):
    return kiln.zeros(_shape(shape), dtype=_dtype_or(dtype, kiln.float64))


def ndarray(shape, dtype=float, buffer=None, offset=0, strides=None, order=None):
    """The low-level constructor as NPBench's vadv calls it, `np.ndarray(shape, dtype=...)`:
    uninitialized memory, which zeros are (over a buffer or strides it is NumPy's own)."""
    if buffer is not None or strides is not None or offset:
        raise NotImplementedError("np.ndarray over a buffer or with strides is not compiled")
    return empty(shape, dtype)


def full(shape, fill_value, dtype=None, order="C", *, like=None):
    dt = _dtype_or(dtype, _dt.common((spec(fill_value),)))
    if isinstance(fill_value, kiln.Tensor):
        return kiln.zeros(_shape(shape), dtype=dt) + fill_value.to(dt)
    return kiln.full(_shape(shape), as_operand(fill_value, dt), dtype=dt)


def _like_shape(a, shape):
    return list(a.shape) if shape is None else _shape(shape)


def zeros_like(a, dtype=None, order="K", subok=True, shape=None):
    a = as_tensor(a, _dt.common((spec(a),)))
    return kiln.zeros(_like_shape(a, shape), dtype=_dtype_or(dtype, a.dtype))


def ones_like(a, dtype=None, order="K", subok=True, shape=None):
    a = as_tensor(a, _dt.common((spec(a),)))
    return kiln.ones(_like_shape(a, shape), dtype=_dtype_or(dtype, a.dtype))


def empty_like(prototype, dtype=None, order="K", subok=True, shape=None):
    return zeros_like(prototype, dtype, order, subok, shape)


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None):
    a = as_tensor(a, _dt.common((spec(a),)))
    dt = _dtype_or(dtype, a.dtype)
    return kiln.full(_like_shape(a, shape), as_operand(fill_value, dt), dtype=dt)


def arange(start, stop=None, step=None, dtype=None, *, like=None):
    if stop is None:
        start, stop = 0, start
    if step is None:
        step = 1
    dt = _dtype_or(dtype, _dt.common((spec(start), spec(stop), spec(step))))
    if _dt.is_float(dt):  # NumPy's values: start + i * step, as many as NumPy counts
        n = _dt.range_length(start, stop, step)
        return (kiln.arange(0, n, dtype=kiln.float64) * float(step) + float(start)).to(dt)
    return kiln.arange(start, stop, step, dtype=dt)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    """NumPy's formula (arange(num) * step + start, the last value set to `stop`), so the
    values are NumPy's to the bit."""
    if retstep or axis != 0:
        raise NotImplementedError("np.linspace(retstep=True / axis) is not supported by kiln")
    dt = _dtype_or(dtype, kiln.float64)
    div = num - 1 if endpoint else num
    y = kiln.arange(0, num, dtype=kiln.float64)
    if div > 0:
        y = y * ((stop - start) / div) + start
        if endpoint and num > 1:
            y[-1] = float(stop)
    else:
        y = y * (stop - start) + start
    return y.to(dt) if dt != kiln.float64 else y


def eye(N, M=None, k=0, dtype=float, order="C", *, like=None):
    m = N if M is None else M
    rows = kiln.arange(0, N, dtype=kiln.int64).reshape(-1, 1)
    cols = kiln.arange(0, m, dtype=kiln.int64).reshape(1, -1)
    return (rows + k == cols).to(_dt.to_kiln(dtype))


def identity(n, dtype=None, *, like=None):
    return eye(n, dtype=float if dtype is None else dtype)


def array(obj, dtype=None, *, copy=True, order="K", ndmin=0, like=None):
    """Of an array: a copy (or the array itself, `copy=False`/`asarray`); of constants, the
    constant array (built at capture time, baked into the graph)."""
    if isinstance(obj, kiln.Tensor):
        r = obj.to(_dt.to_kiln(dtype)) if dtype is not None else obj
        if copy and r is obj:
            r = obj.clone()
    elif isinstance(obj, (list, tuple)) and _has_tensor(obj):
        dt = _dtype_or(dtype, _dt.common(tuple([spec(x) for x in obj])))
        r = kiln.stack([as_tensor(x, dt) for x in obj], 0)
    else:
        r = constant(obj, dtype)
    while r.dim() < ndmin:
        r = r.unsqueeze(0)
    return r


def asarray(a, dtype=None, order=None, *, copy=None, like=None):
    return array(a, dtype, copy=bool(copy))


def _has_tensor(items):
    for x in items:
        if isinstance(x, kiln.Tensor):
            return True
    return False


def constant(obj, dtype=None):
    """A constant array from Python data, made at capture time (a baked graph input)."""
    return _dt.constant_array(obj, None if dtype is None else _dt.to_kiln(dtype))


FUNCTIONS = {
    np.zeros: zeros, np.ones: ones, np.empty: empty, np.full: full, np.zeros_like: zeros_like,
    np.ones_like: ones_like, np.empty_like: empty_like, np.full_like: full_like,
    np.arange: arange, np.linspace: linspace, np.eye: eye, np.identity: identity,
    np.array: array, np.asarray: asarray, np.ascontiguousarray: asarray, np.ndarray: ndarray,
}
# Called with constants only, these still build graph nodes (not NumPy values).
CREATION = {np.zeros, np.ones, np.empty, np.full, np.arange, np.linspace, np.eye, np.identity,
            np.ndarray}

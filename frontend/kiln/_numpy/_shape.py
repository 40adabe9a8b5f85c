"""NumPy's shape functions, joins, selection and sorting over kiln ops.

Views stay views where NumPy's are (reshape of a contiguous array, transpose, swapaxes,
squeeze, expand_dims, broadcast_to, basic slicing); copies stay copies (flatten, concatenate,
`copy`), so writes through a view reach its base exactly as in NumPy.
"""

from __future__ import annotations

import numpy as np

import kiln
from kiln._numpy import _dtypes as _dt
from kiln._numpy._ufuncs import as_operand, as_tensor, spec


def _tensor(a):
    return as_tensor(a, _dt.common((spec(a),)))


def _shape_arg(shape):
    if isinstance(shape, int):
        return [shape]
    return list(shape)


def reshape(a, /, shape=None, order="C", *, newshape=None, copy=None):
    if order != "C":
        raise NotImplementedError("np.reshape: only order='C' is supported by kiln")
    if shape is None:
        shape = newshape
    return _tensor(a).reshape(_shape_arg(shape))


def ravel(a, order="C"):
    if order != "C":
        raise NotImplementedError("np.ravel: only order='C' is supported by kiln")
    return _tensor(a).reshape(-1)


def transpose(a, axes=None):
    a = _tensor(a)
    if axes is None:
        return a.permute(list(range(a.dim() - 1, -1, -1)))
    return a.permute([_dt.index_of(x, a.dim()) for x in axes])


def swapaxes(a, axis1, axis2):
    return _tensor(a).transpose(axis1, axis2)


def moveaxis(a, source, destination):
    a = _tensor(a)
    return a.permute(_dt.moved_axes(source, destination, a.dim()))


def squeeze(a, axis=None):
    a = _tensor(a)
    if axis is None:
        return a.squeeze()
    axes = [axis] if isinstance(axis, int) else list(axis)
    for ax in sorted([_dt.index_of(x, a.dim()) for x in axes], reverse=True):
        if a.shape[ax] != 1:
            raise ValueError("cannot select an axis to squeeze out which has size not equal "
                             "to one")
        a = a.squeeze(ax)
    return a


def expand_dims(a, axis):
    a = _tensor(a)
    axes = [axis] if isinstance(axis, int) else list(axis)
    ndim = a.dim() + len(axes)
    for ax in sorted([_dt.index_of(x, ndim) for x in axes]):
        a = a.unsqueeze(ax)
    return a


def broadcast_to(array, shape, subok=False):
    return _tensor(array).expand(_shape_arg(shape))


def atleast_1d(a):
    a = _tensor(a)
    return a.reshape(1) if a.dim() == 0 else a


def atleast_2d(a):
    a = _tensor(a)
    if a.dim() == 0:
        return a.reshape(1, 1)
    if a.dim() == 1:
        return a.unsqueeze(0)
    return a


def _joined(arrays, dtype):
    items = [a for a in arrays]
    specs = tuple([spec(a) for a in items])
    dt = _dt.to_kiln(dtype) if dtype is not None else _dt.common(specs)
    return [as_tensor(a, dt) for a in items]


def concatenate(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    items = _joined(arrays, dtype)
    if axis is None:
        items = [a.reshape(-1) for a in items]
        axis = 0
    r = kiln.cat(items, _dt.index_of(axis, items[0].dim()))
    if out is not None:
        out.copy_(r)
        return out
    return r


def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    items = _joined(arrays, dtype)
    r = kiln.stack(items, _dt.index_of(axis, items[0].dim() + 1))
    if out is not None:
        out.copy_(r)
        return out
    return r


def vstack(tup, *, dtype=None, casting="same_kind"):
    return kiln.cat([atleast_2d(a) for a in _joined(tup, dtype)], 0)


def hstack(tup, *, dtype=None, casting="same_kind"):
    items = [atleast_1d(a) for a in _joined(tup, dtype)]
    return kiln.cat(items, 0 if items[0].dim() == 1 else 1)


def column_stack(tup):
    items = []
    for a in _joined(tup, None):
        items.append(a.unsqueeze(1) if a.dim() < 2 else a)
    return kiln.cat(items, 1)


def where(condition, x=None, y=None):
    if x is None or y is None:
        raise NotImplementedError("np.where(condition) has a data-dependent shape")
    dt = _dt.common((spec(x), spec(y)))
    return kiln.where(as_tensor(condition, kiln.bool), as_tensor(x, dt), as_tensor(y, dt))


def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None, **kwargs):
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    specs = [spec(a)]
    if lo is not None:
        specs.append(spec(lo))
    if hi is not None:
        specs.append(spec(hi))
    dt = _dt.common(tuple(specs))
    x = as_tensor(a, dt)
    if lo is not None:
        x = kiln.maximum(x, as_tensor(lo, dt))
    if hi is not None:
        x = kiln.minimum(x, as_tensor(hi, dt))
    if out is not None:
        out.copy_(x)
        return out
    return x


def tril(m, k=0):
    return kiln.tril(_tensor(m), k)


def triu(m, k=0):
    return kiln.triu(_tensor(m), k)


def roll(a, shift, axis=None):
    a = _tensor(a)
    if axis is None:
        return kiln.roll(a.reshape(-1), shift, 0).reshape(list(a.shape))
    return kiln.roll(a, shift, axis)


def flip(m, axis=None):
    m = _tensor(m)
    if axis is None:
        return kiln.flip(m, list(range(m.dim())))
    axes = [axis] if isinstance(axis, int) else list(axis)
    return kiln.flip(m, [_dt.index_of(x, m.dim()) for x in axes])


def fliplr(m):
    return flip(m, 1)


def flipud(m):
    return flip(m, 0)


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    a = _tensor(a)
    if axis is None:
        a = a.reshape(-1)
        axis = 0
    values, _ = kiln.sort(a, _dt.index_of(axis, a.dim()))
    return values


def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    a = _tensor(a)
    if axis is None:
        a = a.reshape(-1)
        axis = 0
    return kiln.argsort(a, _dt.index_of(axis, a.dim()), stable=True)


def pad(array, pad_width, mode="constant", **kwargs):
    a = _tensor(array)
    widths = _pad_widths(pad_width, a.dim())
    if mode == "constant":
        value = kwargs.get("constant_values", 0)
        out = kiln.full([a.shape[d] + widths[d][0] + widths[d][1] for d in range(a.dim())],
                        as_operand(value, a.dtype), dtype=a.dtype)
        inner = tuple([slice(widths[d][0], widths[d][0] + a.shape[d]) for d in range(a.dim())])
        out[inner] = a
        return out
    if mode == "edge" or mode == "wrap":
        for d in range(a.dim()):
            before, after = widths[d]
            n = a.shape[d]
            parts = []
            if before:
                parts.append(a.narrow(d, 0, 1).expand(_with(a.shape, d, before))
                             if mode == "edge" else a.narrow(d, n - before, before))
            parts.append(a)
            if after:
                parts.append(a.narrow(d, n - 1, 1).expand(_with(a.shape, d, after))
                             if mode == "edge" else a.narrow(d, 0, after))
            if len(parts) > 1:
                a = kiln.cat(parts, d)
        return a
    raise NotImplementedError(f"np.pad(mode={mode!r}) is not supported by kiln")


def _with(shape, d, n):
    s = list(shape)
    s[d] = n
    return s


def _pad_widths(pad_width, ndim):
    if isinstance(pad_width, int):
        return [(pad_width, pad_width)] * ndim
    pw = list(pad_width)
    if len(pw) == 2 and isinstance(pw[0], int):
        return [(pw[0], pw[1])] * ndim
    if len(pw) == 1:
        w = pw[0]
        return [(w, w) if isinstance(w, int) else (w[0], w[1])] * ndim
    return [(w, w) if isinstance(w, int) else (w[0], w[1]) for w in pw]


def copy(a, order="K", subok=False):
    return _tensor(a).clone()


def _diagonal(a, offset, axis1, axis2):
    """The diagonal as its own last axis (NumPy's), read through index tensors (a gather)."""
    d1, d2 = _dt.index_of(axis1, a.dim()), _dt.index_of(axis2, a.dim())
    a = a.permute([d for d in range(a.dim()) if d != d1 and d != d2] + [d1, d2])
    rows, cols = a.shape[-2], a.shape[-1]
    n = max(0, min(rows, cols - offset) if offset >= 0 else min(rows + offset, cols))
    i = kiln.arange(0, n, dtype=kiln.int64)
    return a[..., i + max(0, -offset), i + max(0, offset)]


def diagonal(a, offset=0, axis1=0, axis2=1):
    return _diagonal(_tensor(a), offset, axis1, axis2)


def diag(v, k=0):
    v = _tensor(v)
    if v.dim() == 2:
        return _diagonal(v, k, 0, 1)
    n = v.shape[0] + abs(k)
    rows = kiln.arange(0, n, dtype=kiln.int64).reshape(-1, 1)
    cols = kiln.arange(0, n, dtype=kiln.int64).reshape(1, -1)
    # On the band the value is v[min(row, col)]: the row's for k >= 0, the column's below.
    value = v[kiln.clamp(kiln.minimum(rows, cols), 0, v.shape[0] - 1)]
    return kiln.where(cols - rows == k, value, kiln.zeros((), dtype=v.dtype))


def diagflat(v, k=0):
    """The flattened input on the k-th diagonal of a square matrix."""
    return diag(_tensor(v).reshape(-1), k)


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    a = _tensor(a)
    rdt = _dt.reduction_result("sum", a.dtype, dtype)
    d = _diagonal(a, offset, axis1, axis2)
    return kiln.sum(d.to(rdt) if d.dtype != rdt else d, -1)


def repeat(a, repeats, axis=None):
    a = _tensor(a)
    if not isinstance(repeats, int):
        raise NotImplementedError("np.repeat with per-element repeats is not supported by kiln")
    if axis is None:
        return kiln.repeat_interleave(a.reshape(-1), repeats, 0)
    return kiln.repeat_interleave(a, repeats, _dt.index_of(axis, a.dim()))


def tile(a, reps):
    a = _tensor(a)
    reps = [reps] if isinstance(reps, int) else list(reps)
    while a.dim() < len(reps):
        a = a.unsqueeze(0)
    while len(reps) < a.dim():
        reps = [1] + reps
    return a.repeat(reps)


FUNCTIONS = {
    np.reshape: reshape, np.ravel: ravel, np.transpose: transpose, np.swapaxes: swapaxes,
    np.moveaxis: moveaxis, np.squeeze: squeeze, np.expand_dims: expand_dims,
    np.broadcast_to: broadcast_to, np.atleast_1d: atleast_1d, np.atleast_2d: atleast_2d,
    np.concatenate: concatenate, np.stack: stack, np.vstack: vstack, np.hstack: hstack,
    np.column_stack: column_stack, np.where: where, np.clip: clip, np.tril: tril, np.triu: triu,
    np.roll: roll, np.flip: flip, np.fliplr: fliplr, np.flipud: flipud, np.sort: sort,
    np.argsort: argsort, np.pad: pad, np.copy: copy, np.diag: diag, np.diagflat: diagflat,
    np.diagonal: diagonal,
    np.trace: trace, np.repeat: repeat, np.tile: tile,
}

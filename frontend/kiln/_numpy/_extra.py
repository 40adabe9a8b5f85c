"""More of NumPy: ufunc methods (`np.add.outer`, `np.maximum.reduce`, `np.add.accumulate`,
`np.maximum.accumulate`, `np.add.at`),
differences, grids, takes, splits, `isclose`, `nan_to_num`, `copyto`, `median`, `searchsorted`,
`digitize`, `isin`, `ptp`, `select`."""

from __future__ import annotations

import numpy as np

import kiln
from kiln._numpy import _dtypes as _dt
from kiln._numpy import _reductions
from kiln._numpy._ufuncs import FUNCTIONS as _UFUNCS
from kiln._numpy._ufuncs import as_tensor, spec


def _tensor(a):
    return as_tensor(a, _dt.common((spec(a),)))


def _outer(ufunc):
    impl = _UFUNCS[ufunc]

    def outer(A, B, /, **kwargs):
        a, b = _tensor(A), _tensor(B)
        return impl(a.reshape(list(a.shape) + [1] * b.dim()), b, **kwargs)

    return outer


def _reduce(reduction):
    def reduce(array, axis=0, dtype=None, out=None, keepdims=False, **kwargs):
        return reduction(array, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **kwargs)

    return reduce


def _extreme_reduce(reduction):
    def reduce(array, axis=0, dtype=None, out=None, keepdims=False, **kwargs):
        if dtype is not None:
            array = _tensor(array).to(_dt.to_kiln(dtype))
        return reduction(array, axis=axis, out=out, keepdims=keepdims, **kwargs)

    return reduce


def _accumulate(scan):
    def accumulate(array, axis=0, dtype=None, out=None):
        return scan(array, axis=axis, dtype=dtype, out=out)

    return accumulate


def _extreme_accumulate(scan):
    """np.maximum.accumulate / np.minimum.accumulate: the running extreme (kiln.cummax's
    values), in the array's dtype."""

    def accumulate(array, axis=0, dtype=None, out=None):
        x = _tensor(array)
        if dtype is not None:
            x = x.to(_dt.to_kiln(dtype))
        if axis is None:
            x, axis = x.reshape(-1), 0
        result = scan(x, _dt.index_of(axis, x.dim())).values
        if out is None:
            return result
        out.copy_(result)
        return out

    return accumulate


def diff(a, n=1, axis=-1):
    x = _tensor(a)
    d = _dt.index_of(axis, x.dim())
    for _ in range(n):
        size = x.shape[d]
        hi = x.narrow(d, 1, size - 1)
        lo = x.narrow(d, 0, size - 1)
        x = hi != lo if x.dtype == kiln.bool else hi - lo
    return x


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    arrays = [_tensor(x).reshape(-1) for x in xi]
    ndim = len(arrays)
    shapes = []
    for i, x in enumerate(arrays):
        shape = [1] * ndim
        shape[i] = x.shape[0]
        shapes.append(shape)
    if indexing == "xy" and ndim > 1:
        for shape in shapes:
            shape[0], shape[1] = shape[1], shape[0]
    grids = [x.reshape(shape) for x, shape in zip(arrays, shapes, strict=True)]
    if not sparse:
        full = [max([s[d] for s in shapes]) for d in range(ndim)]
        grids = [g.expand(full).contiguous() if copy else g.expand(full) for g in grids]
    return tuple(grids)


def take(a, indices, axis=None, out=None, mode="raise"):
    x = _tensor(a)
    idx = as_tensor(indices, kiln.int64)
    if axis is None:
        return x.reshape(-1)[idx]
    d = _dt.index_of(axis, x.dim())
    r = kiln.index_select(x, d, idx.reshape(-1))
    shape = list(x.shape[:d]) + list(idx.shape) + list(x.shape[d + 1:])
    return r.reshape(shape)


def take_along_axis(arr, indices, axis):
    x = _tensor(arr)
    idx = as_tensor(indices, kiln.int64)
    if axis is None:
        return kiln.gather(x.reshape(-1), 0, idx.reshape(-1))
    d = _dt.index_of(axis, x.dim())
    shape = [max(x.shape[i], idx.shape[i]) if i != d else idx.shape[i] for i in range(x.dim())]
    xs = list(shape)
    xs[d] = x.shape[d]
    return kiln.gather(x.expand(xs), d, idx.expand(shape))


def _split_points(n, sections, even):
    if isinstance(sections, int):
        if even and n % sections:
            raise ValueError("array split does not result in an equal division")
        base, extra = n // sections, n % sections
        sizes = [base + 1] * extra + [base] * (sections - extra)
        return sizes
    points = [0] + [min(max(p, 0), n) for p in sections] + [n]
    return [max(points[i + 1] - points[i], 0) for i in range(len(points) - 1)]


def split(ary, indices_or_sections, axis=0):
    x = _tensor(ary)
    d = _dt.index_of(axis, x.dim())
    sizes = _split_points(x.shape[d], indices_or_sections, True)
    return _pieces(x, d, sizes)


def array_split(ary, indices_or_sections, axis=0):
    x = _tensor(ary)
    d = _dt.index_of(axis, x.dim())
    sizes = _split_points(x.shape[d], indices_or_sections, False)
    return _pieces(x, d, sizes)


def _pieces(x, d, sizes):
    out = []
    start = 0
    for size in sizes:
        out.append(x.narrow(d, start, size))
        start += size
    return out


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    dt = _dt.common((spec(a), spec(b), float))
    x, y = as_tensor(a, dt), as_tensor(b, dt)
    close = kiln.abs(x - y) <= atol + rtol * kiln.abs(y)
    close = kiln.logical_or(close, x == y)  # equal infinities
    if equal_nan:
        close = kiln.logical_or(close, kiln.logical_and(kiln.isnan(x), kiln.isnan(y)))
    return close


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    t = _tensor(x)
    if not _dt.is_float(t.dtype):
        return t.clone() if copy else t
    return kiln.nan_to_num(t, nan=nan, posinf=posinf, neginf=neginf)


def copyto(dst, src, casting="same_kind", where=True):
    s = as_tensor(src, dst.dtype)
    if where is True:
        dst.copy_(s.expand(list(dst.shape)))
    else:
        dst.copy_(kiln.where(as_tensor(where, kiln.bool), s, dst))


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The mean of the middle one or two values of the sorted data (NaN propagates)."""
    x = _tensor(a)
    if not _dt.is_float(x.dtype):
        x = x.to(kiln.float64)
    if axis is None:
        x = x.reshape(-1)
        d = 0
    else:
        d = _dt.index_of(axis, x.dim())
    n = x.shape[d]
    s, _ = kiln.sort(x, d)
    mid = s.narrow(d, (n - 1) // 2, 2 - n % 2)
    r = kiln.mean(mid, [d], True)
    has_nan = kiln.any(kiln.isnan(x), d, True)
    r = kiln.where(has_nan, kiln.full_like(r, float("nan")), r)
    if keepdims:
        return r.reshape([1] * x.dim()) if axis is None else r
    return r.reshape([]) if axis is None else r.squeeze(d)


def searchsorted(a, v, side="left", sorter=None):
    """Insertion points of `v` in the sorted 1-d `a` (int64, NumPy's intp)."""
    if sorter is not None or side not in ("left", "right"):
        raise NotImplementedError("np.searchsorted with sorter= or another side")
    sorted_, values = _tensor(a), _tensor(v)
    if sorted_.dim() != 1:
        raise ValueError("object too deep for desired array")  # NumPy's message
    common = _dt.common((spec(a), spec(v)))
    return kiln.searchsorted(sorted_.to(common), values.to(common), right=side == "right")


def digitize(x, bins, right=False):
    """The bin of each value: searchsorted on increasing bins (decreasing ones are reversed)."""
    b = _tensor(bins)
    if b.dim() != 1:
        raise ValueError("bins must be 1d")
    up = searchsorted(b, x, side="left" if right else "right")
    if b.shape[0] < 2:
        return up
    down = b.shape[0] - searchsorted(b.flip(0), x, side="right" if right else "left")
    return kiln.where(b[-1] >= b[0], up, down)  # both computed: no branch on the data


def isin(element, test_elements, assume_unique=False, invert=False, *, kind=None):
    e, t = _tensor(element), _tensor(test_elements)
    return kiln.isin(e, t.reshape(-1), invert=invert)


def ptp(a, axis=None, out=None, keepdims=False):
    if out is not None:
        raise NotImplementedError("np.ptp with out=")
    x = _tensor(a)
    return _MAX(x, axis=axis, keepdims=keepdims) - _MIN(x, axis=axis, keepdims=keepdims)


_MAX, _MIN = _reductions.FUNCTIONS[np.max], _reductions.FUNCTIONS[np.min]


def select(condlist, choicelist, default=0):
    """The first true condition's choice, else `default` (NumPy's result dtype)."""
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    choices = [_tensor(c) for c in choicelist]
    dtype = _dt.common(tuple(spec(c) for c in choicelist) + (spec(default),))
    out = as_tensor(default, dtype)
    for cond, choice in zip(reversed(condlist), reversed(choices), strict=True):
        c = _tensor(cond)
        if c.dtype != kiln.bool:
            raise TypeError("invalid entry in condlist: should be boolean ndarray")
        out = kiln.where(c, choice.to(dtype), out)
    return out


def _ufunc_at(ufunc):
    """`np.add.at(a, indices, b)`: unbuffered in-place accumulation, repeated indices counted
    each time (a histogram, a particle deposit). add and subtract take any integer-array index
    (index_put_ with accumulate); multiply, minimum and maximum a 1-D array and one index array
    (scatter_reduce_)."""
    reduce = {np.multiply: "prod", np.minimum: "amin", np.maximum: "amax"}.get(ufunc)

    def at(a, indices, b=None, /):
        if not isinstance(a, kiln.Tensor):
            raise TypeError(f"{ufunc.__name__}.at() needs an array to write into")
        parts = indices if isinstance(indices, tuple) else (indices,)
        index = []
        for part in parts:
            if isinstance(part, slice) or part is None or part is Ellipsis:
                raise NotImplementedError(f"np.{ufunc.__name__}.at with a slice index is not "
                                          "supported by kiln")
            t = _tensor(part)
            if t.dtype == kiln.bool or t.is_floating_point():
                raise NotImplementedError(f"np.{ufunc.__name__}.at with a non-integer index is "
                                          "not supported by kiln")
            index.append(t.to(kiln.int64))
        values = _tensor(b if b is not None else 1).to(a.dtype)
        if ufunc in (np.add, np.subtract):
            if ufunc is np.subtract:
                values = -values
            shape = a[tuple(index)].shape
            a.index_put_(tuple(index), values.expand(shape), accumulate=True)
            return None
        if a.dim() != 1 or len(index) != 1:
            raise NotImplementedError(f"np.{ufunc.__name__}.at beyond a 1-D array is not "
                                      "supported by kiln")
        idx = index[0].reshape(-1)
        a.scatter_reduce_(0, idx, values.expand(index[0].shape).reshape(-1), reduce,
                          include_self=True)
        return None

    at.__name__ = "at"
    return at


FUNCTIONS = {
    np.diff: diff, np.meshgrid: meshgrid, np.take: take, np.take_along_axis: take_along_axis,
    np.split: split, np.array_split: array_split, np.isclose: isclose,
    np.nan_to_num: nan_to_num, np.copyto: copyto, np.median: median,
    np.searchsorted: searchsorted, np.digitize: digitize, np.isin: isin, np.ptp: ptp,
    np.select: select,
}
for _ufunc in (np.add, np.subtract, np.multiply, np.true_divide, np.maximum, np.minimum,
               np.power, np.equal, np.less, np.greater, np.logical_and, np.logical_or):
    FUNCTIONS[_ufunc.outer] = _outer(_ufunc)
for _ufunc, _impl in ((np.add, _reductions.SUM), (np.multiply, _reductions.FUNCTIONS[np.prod]),
                      (np.logical_and, _reductions.FUNCTIONS[np.all]),
                      (np.logical_or, _reductions.FUNCTIONS[np.any])):
    FUNCTIONS[_ufunc.reduce] = _reduce(_impl)
FUNCTIONS[np.maximum.reduce] = _extreme_reduce(_reductions.FUNCTIONS[np.max])
FUNCTIONS[np.minimum.reduce] = _extreme_reduce(_reductions.FUNCTIONS[np.min])
for _ufunc in (np.add, np.subtract, np.multiply, np.minimum, np.maximum):
    FUNCTIONS[_ufunc.at] = _ufunc_at(_ufunc)
FUNCTIONS[np.add.accumulate] = _accumulate(_reductions.FUNCTIONS[np.cumsum])
FUNCTIONS[np.multiply.accumulate] = _accumulate(_reductions.FUNCTIONS[np.cumprod])
FUNCTIONS[np.maximum.accumulate] = _extreme_accumulate(kiln.cummax)
FUNCTIONS[np.minimum.accumulate] = _extreme_accumulate(kiln.cummin)

"""NumPy's reductions and scans over kiln ops (`axis`, `keepdims`, `dtype`, `out`, `ddof`)."""

from __future__ import annotations

import numpy as np

import kiln
from kiln._numpy import _dtypes as _dt
from kiln._numpy._ufuncs import as_tensor, finish


def _reduce_with(name, kfn):
    """sum/prod/mean: NumPy's accumulator dtype, one kiln reduction."""

    def impl(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
        _no_extra(name, kwargs)
        a = as_tensor(a, _dt.common((spec_of(a),)))
        rdt = _dt.reduction_result(name, a.dtype, dtype)
        dims = _dt.axes_of(axis, a.dim())
        x = a.to(rdt) if a.dtype != rdt else a
        if dims is None:
            r = kfn(x)
            if keepdims:
                r = r.reshape([1] * a.dim())
        else:
            r = kfn(x, dims, keepdims)
        return finish(r, out, True, rdt)

    impl.__name__ = name
    return impl


def spec_of(a):
    if isinstance(a, kiln.Tensor):
        return a.dtype
    return type(a)


def _no_extra(name, kwargs):
    for key in kwargs:
        if key not in ("initial", "where") or kwargs[key] is not None:
            raise TypeError(f"np.{name}: argument {key!r} is not supported by kiln")


def _extreme(name, kfn):
    """max/min (amax/amin): NaN propagates as in NumPy."""

    def impl(a, axis=None, out=None, keepdims=False, **kwargs):
        _no_extra(name, kwargs)
        a = as_tensor(a, _dt.common((spec_of(a),)))
        dims = _dt.axes_of(axis, a.dim())
        if dims is None:
            dims = list(range(a.dim()))
        r = kfn(a, dims, keepdims) if dims else a.clone()
        return finish(r, out, True, a.dtype)

    impl.__name__ = name
    return impl


def _arg(name, kfn):
    def impl(a, axis=None, out=None, *, keepdims=False):
        a = as_tensor(a, _dt.common((spec_of(a),)))
        if a.dtype == kiln.bool:
            a = a.to(kiln.uint8)
        if axis is None:
            r = kfn(a.reshape(-1), 0)
            if keepdims:
                r = r.reshape([1] * a.dim())
        else:
            r = kfn(a, _dt.index_of(axis, a.dim()), keepdims)
        return finish(r, out, True, kiln.int64)

    impl.__name__ = name
    return impl


def _logical(name, kfn):
    def impl(a, axis=None, out=None, keepdims=False, **kwargs):
        _no_extra(name, kwargs)
        a = as_tensor(a, _dt.common((spec_of(a),)))
        b = a if a.dtype == kiln.bool else a != 0
        dims = _dt.axes_of(axis, a.dim())
        if dims is None:
            r = kfn(b)
            if keepdims:
                r = r.reshape([1] * a.dim())
        else:
            r = b
            for d in sorted(dims, reverse=True):
                r = kfn(r, d, keepdims)
        return finish(r, out, True, kiln.bool)

    impl.__name__ = name
    return impl


def _moment(name):
    def impl(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
        _no_extra(name, kwargs)
        a = as_tensor(a, _dt.common((spec_of(a),)))
        rdt = _dt.reduction_result(name, a.dtype, dtype)
        x = a.to(rdt) if a.dtype != rdt else a
        dims = _dt.axes_of(axis, a.dim())
        if dims is None:
            dims = list(range(a.dim()))
        if name == "var":
            r = kiln.var(x, dims, correction=ddof, keepdim=keepdims)
        else:
            r = kiln.std(x, dims, correction=ddof, keepdim=keepdims)
        return finish(r, out, True, rdt)

    impl.__name__ = name
    return impl


def _scan(name, kfn):
    def impl(a, axis=None, dtype=None, out=None):
        a = as_tensor(a, _dt.common((spec_of(a),)))
        rdt = _dt.reduction_result(name, a.dtype, dtype)
        x = a.to(rdt) if a.dtype != rdt else a
        if axis is None:
            x = x.reshape(-1)
            axis = 0
        return finish(kfn(x, _dt.index_of(axis, x.dim())), out, True, rdt)

    impl.__name__ = name
    return impl


def _sum(x, dims=None, keepdim=False):
    return kiln.sum(x) if dims is None else kiln.sum(x, dims, keepdim)


def _prod(x, dims=None, keepdim=False):
    if dims is None:
        return kiln.prod(x)
    r = x
    for d in sorted(dims, reverse=True):
        r = kiln.prod(r, d, keepdim)
    return r


def _mean(x, dims=None, keepdim=False):
    return kiln.mean(x) if dims is None else kiln.mean(x, dims, keepdim)


def _amax(x, dims, keepdim):
    return kiln.amax(x, dims, keepdim)


def _amin(x, dims, keepdim):
    return kiln.amin(x, dims, keepdim)


def _all(x, dim=None, keepdim=False):
    return kiln.all(x) if dim is None else kiln.all(x, dim, keepdim)


def _any(x, dim=None, keepdim=False):
    return kiln.any(x) if dim is None else kiln.any(x, dim, keepdim)


def _cumsum(x, dim):
    return kiln.cumsum(x, dim)


def _cumprod(x, dim):
    return kiln.cumprod(x, dim)


def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    if returned:
        raise TypeError("np.average(returned=True) is not supported by kiln")
    if weights is None:
        return MEAN(a, axis=axis, keepdims=keepdims)
    rdt = _dt.common((spec_of(a), spec_of(weights), float))
    a, w = as_tensor(a, rdt), as_tensor(weights, rdt)
    if w.dim() == 1 and a.dim() > 1 and axis is not None:
        shape = [1] * a.dim()
        shape[_dt.index_of(axis, a.dim())] = -1
        w = w.reshape(shape)
    return SUM(a * w, axis=axis, keepdims=keepdims) / SUM(w * kiln.ones_like(a), axis=axis,
                                                          keepdims=keepdims)


SUM = _reduce_with("sum", _sum)
MEAN = _reduce_with("mean", _mean)

FUNCTIONS = {
    np.sum: SUM,
    np.prod: _reduce_with("prod", _prod),
    np.mean: MEAN,
    np.max: _extreme("max", _amax),
    np.amax: _extreme("amax", _amax),
    np.min: _extreme("min", _amin),
    np.amin: _extreme("amin", _amin),
    np.argmax: _arg("argmax", kiln.argmax),
    np.argmin: _arg("argmin", kiln.argmin),
    np.all: _logical("all", _all),
    np.any: _logical("any", _any),
    np.var: _moment("var"),
    np.std: _moment("std"),
    np.cumsum: _scan("cumsum", _cumsum),
    np.cumprod: _scan("cumprod", _cumprod),
    np.average: average,
}

# ndarray methods that are these functions with the array first.
METHODS = {
    "sum": FUNCTIONS[np.sum], "prod": FUNCTIONS[np.prod], "mean": MEAN,
    "max": FUNCTIONS[np.max], "min": FUNCTIONS[np.min], "argmax": FUNCTIONS[np.argmax],
    "argmin": FUNCTIONS[np.argmin], "all": FUNCTIONS[np.all], "any": FUNCTIONS[np.any],
    "var": FUNCTIONS[np.var], "std": FUNCTIONS[np.std], "cumsum": FUNCTIONS[np.cumsum],
    "cumprod": FUNCTIONS[np.cumprod],
}

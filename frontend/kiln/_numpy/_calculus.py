"""`np.gradient` (central differences, one-sided at the edges), `np.percentile` /
`np.quantile` (the linear method, kiln.quantile) and `np.interp`, in kiln ops."""

from __future__ import annotations

import numpy as np

import kiln
from kiln._numpy import _dtypes as _dt
from kiln._numpy._ufuncs import as_tensor, spec
from kiln._ops_composite_stats import _quantile


def _axes(axis, ndim: int) -> list[int]:
    if axis is None:
        return list(range(ndim))
    if isinstance(axis, (tuple, list)):
        return [_dt.index_of(a, ndim) for a in axis]
    return [_dt.index_of(axis, ndim)]


def _gradient_along(f, d: int, h: float, edge_order: int):
    n = f.shape[d]
    if n < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, at least "
                         "(edge_order + 1) elements are required.")

    def part(start, length):
        return f.narrow(d, start, length)

    inner = (part(2, n - 2) - part(0, n - 2)) / (2.0 * h)
    if edge_order == 1:
        first = (part(1, 1) - part(0, 1)) / h
        last = (part(n - 1, 1) - part(n - 2, 1)) / h
    else:
        first = (-1.5 * part(0, 1) + 2.0 * part(1, 1) - 0.5 * part(2, 1)) / h
        last = (0.5 * part(n - 3, 1) - 2.0 * part(n - 2, 1) + 1.5 * part(n - 1, 1)) / h
    return kiln.cat([first, inner, last], dim=d)


def gradient(f, *varargs, axis=None, edge_order=1):
    """Uniform spacing (1, or one number per axis); coordinate arrays are NumPy's."""
    dtype = _dt.common((spec(f), float)) if not isinstance(f, kiln.Tensor) or not \
        _dt.is_float(f.dtype) else f.dtype
    x = as_tensor(f, dtype)
    axes = _axes(axis, x.dim())
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    if len(varargs) == 0:
        spacing = [1.0] * len(axes)
    elif len(varargs) == 1 and type(varargs[0]) in (int, float):
        spacing = [float(varargs[0])] * len(axes)
    elif len(varargs) == len(axes) and all(type(v) in (int, float) for v in varargs):
        spacing = [float(v) for v in varargs]
    else:
        raise NotImplementedError("np.gradient with coordinate arrays is not supported by kiln")
    out = [_gradient_along(x, d, h, edge_order) for d, h in zip(axes, spacing, strict=True)]
    return out[0] if len(out) == 1 else tuple(out)


def _q_spec(q):
    """q's part in the result dtype: a list of numbers counts as the array NumPy makes of it."""
    if isinstance(q, (list, tuple)):
        return _dt.to_kiln(np.asarray(q).dtype)
    return spec(q)


def _quantiles(a, q, axis, out, method, keepdims, weights, interpolation, *, name: str,
               scale: float, message: str):
    """np.quantile (scale 1) and np.percentile (scale 100): kiln's quantile of q / scale along
    one axis or all. q given as numbers is checked here in plain Python, as NumPy checks it, so
    no check reads tensor values (a compiled function keeps its graph)."""
    if method != "linear" or interpolation is not None or weights is not None or out is not None:
        raise NotImplementedError(f"np.{name} beyond the linear method without out= or weights "
                                  "is not supported by kiln")
    dtype = _dt.common((spec(a), _q_spec(q)))
    x = as_tensor(a, dtype if _dt.is_float(dtype) else kiln.float64)
    if isinstance(axis, (tuple, list)):
        if len(axis) != 1:
            raise NotImplementedError(f"np.{name} over several axes is not supported by kiln")
        axis = axis[0]
    dim = None if axis is None else _dt.index_of(axis, x.dim())
    if isinstance(q, kiln.Tensor):
        return kiln.quantile(x, (q / scale).to(x.dtype), dim=dim, keepdim=keepdims)
    if isinstance(q, (int, float)):
        if not 0 <= q <= scale:
            raise ValueError(message)
        return _quantile(x, float(q) / scale, dim, keepdims, "linear", ignore_nan=False)
    if any(isinstance(v, (list, tuple)) for v in q):
        raise NotImplementedError(f"np.{name} with a q of more than one dimension is not "
                                  "supported by kiln")
    values = [float(v) for v in q]
    if not all(0 <= v <= scale for v in values):
        raise ValueError(message)
    qt = kiln.tensor([v / scale for v in values], dtype=x.dtype)
    return _quantile(x, qt, dim, keepdims, "linear", ignore_nan=False, q_in_range=True)


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
             keepdims=False, *, weights=None, interpolation=None):
    return _quantiles(a, q, axis, out, method, keepdims, weights, interpolation,
                      name="quantile", scale=1.0, message="Quantiles must be in the range [0, 1]")


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
               keepdims=False, *, weights=None, interpolation=None):
    return _quantiles(a, q, axis, out, method, keepdims, weights, interpolation,
                      name="percentile", scale=100.0,
                      message="Percentiles must be in the range [0, 100]")


def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of (xp, fp) at x, as NumPy computes it: the segment found
    by a search of increasing xp, slope * (x - xp[j]) + fp[j]; fp[-1] at xp[-1]; `left` and
    `right` (fp's ends by default) outside."""
    if period is not None:
        raise NotImplementedError("np.interp with period= is not supported by kiln")
    xs = kiln.float64
    xv = as_tensor(x, xs)
    xps, fps = as_tensor(xp, xs), as_tensor(fp, xs)
    if xps.dim() != 1 or fps.dim() != 1:
        raise ValueError("object too deep for desired array")
    if xps.shape[0] != fps.shape[0]:
        raise ValueError("fp and xp are not of the same length.")
    if xps.shape[0] == 0:
        raise ValueError("array of sample points is empty")
    if xps.shape[0] < 2:
        raise NotImplementedError("np.interp of a single sample point is not supported by kiln")
    n = xps.shape[0]
    j = (kiln.searchsorted(xps, xv, right=True) - 1).clamp(0, n - 2)
    x0, x1, f0, f1 = xps[j], xps[j + 1], fps[j], fps[j + 1]
    inside = (f1 - f0) / (x1 - x0) * (xv - x0) + f0
    lo = fps[0] if left is None else as_tensor(left, xs)
    hi = fps[n - 1] if right is None else as_tensor(right, xs)
    out = kiln.where(xv == xps[n - 1], fps[n - 1], inside)
    return kiln.where(xv < xps[0], lo, kiln.where(xv > xps[n - 1], hi, out))


FUNCTIONS = {np.gradient: gradient, np.quantile: quantile, np.percentile: percentile,
             np.interp: interp}

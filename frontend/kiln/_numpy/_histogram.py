"""np.histogram in kiln ops, so a histogram inside compiled NumPy code compiles.

NumPy's own algorithm for equal bins: each value's bin is ``(x - first) * bins / (last -
first)`` truncated, then moved by one where the edge array says it falls short or beyond (float
rounding), and the last edge belongs to the last bin. The counts are a scatter-add into
``bins`` slots, a size known without the data, so the whole histogram is one graph. Values
outside an explicit range count with weight zero instead of being filtered out (no size that
depends on the data). Explicit edges take ``searchsorted``.

A data range that is not finite, or edges that do not increase, are checked by an assertion
that runs with the graph (the one eager node): the first call raises NumPy's ValueError (NumPy
runs the call that failed to capture), a compiled one AssertionError with the reason.
"""

from __future__ import annotations

import operator

import numpy as np

import kiln
from kiln._numpy import _dtypes as _dt
from kiln._numpy._ufuncs import as_tensor, spec


def histogram(a, bins=10, range=None, density=None, weights=None):  # noqa: A002 - NumPy's names
    x = as_tensor(a, _dt.common((spec(a),))).reshape(-1)
    w = None
    if weights is not None:
        w = as_tensor(weights, _dt.common((spec(weights),))).reshape(-1)
        if tuple(w.shape) != tuple(x.shape):
            raise ValueError("weights should have the same shape as a.")
    if isinstance(bins, str):
        raise NotImplementedError(f"np.histogram with bins={bins!r} (an estimator) is not "
                                  "supported by kiln")
    if isinstance(bins, (int, np.integer)) and not isinstance(bins, bool):
        count = operator.index(bins)
        if count < 1:
            raise ValueError("`bins` must be positive, when an integer")
        edges, index, kept = _equal_bins(x, count, range)
    else:
        if range is not None:
            raise NotImplementedError("np.histogram with bin edges and range= is not supported "
                                      "by kiln")
        edges = as_tensor(bins, _dt.common((spec(bins),)))
        if edges.dim() != 1:
            raise ValueError("`bins` must be 1d, when an array")
        count = edges.shape[0] - 1
        kiln._assert((edges[1:] >= edges[:-1]).all(), "`bins` must increase monotonically, when "
                     "an array")
        index, kept = _explicit_bins(x, edges)
    counts = _count(index, kept, w, count)
    if density:
        widths = (edges[1:] - edges[:-1]).to(kiln.float64)
        return counts / widths / counts.sum(), edges
    return counts, edges


def _equal_bins(x, count: int, value_range):
    """NumPy's edges of `count` equal bins and each value's bin (clamped: values outside the
    range are masked by `kept`). As NumPy: the data's own range is in the data's dtype (float32
    data: float32 edges computed in float32), an explicit one in float64."""
    if x.is_floating_point():
        edge_type = _dt.common((x.dtype, float))
    else:
        edge_type = kiln.float64
    if value_range is not None:
        first, last = (float(v) for v in value_range)
        if first > last:
            raise ValueError("max must be larger than min in range parameter.")
        if not (np.isfinite(first) and np.isfinite(last)):
            raise ValueError(f"supplied range of [{first}, {last}] is not finite")
        work = kiln.float64
        lo, hi = kiln.full((), first, dtype=work), kiln.full((), last, dtype=work)
    elif x.shape[0] == 0:
        work = kiln.float64
        lo, hi = kiln.full((), 0.0, dtype=work), kiln.full((), 1.0, dtype=work)
    else:
        work = edge_type
        lo, hi = x.min().to(work), x.max().to(work)
        kiln._assert(kiln.isfinite(lo) & kiln.isfinite(hi),
                     "autodetected range of the data is not finite")
    same = lo == hi
    lo, hi = kiln.where(same, lo - 0.5, lo), kiln.where(same, hi + 0.5, hi)
    # np.linspace(first, last, count + 1): k * ((last - first) / count) + first in `work`, the
    # last edge exactly `last`; then the edges' dtype
    edges = kiln.arange(count + 1, dtype=work) * ((hi - lo) / count) + lo
    edges = kiln.cat([edges[:-1], hi.reshape(1)]).to(edge_type)
    values = x.to(edge_type) if x.is_floating_point() else x.to(kiln.float64)
    first, last = lo.to(values.dtype), hi.to(values.dtype)
    kept = (values >= first) & (values <= last)
    # NumPy's (x - first) / (last - first) * count in the data's float dtype, truncated
    index = ((values - first) / (last - first) * count).to(kiln.int64)
    index = kiln.where(index == count, index - 1, index).clamp(0, count - 1)
    index = kiln.where(values < edges[index], index - 1, index).clamp(0, count - 1)
    beyond = (values >= edges[(index + 1).clamp(max=count)]) & (index != count - 1)
    index = kiln.where(beyond, index + 1, index)
    return edges, index, kept


def _explicit_bins(x, edges):
    """Each value's bin among increasing `edges`, the last edge closing the last bin."""
    count = edges.shape[0] - 1
    common = _dt.common((x.dtype, edges.dtype))
    values, e = x.to(common), edges.to(common)
    index = kiln.searchsorted(e, values, right=True) - 1
    index = kiln.where(values == e[-1], kiln.full_like(index, count - 1), index)
    kept = (values >= e[0]) & (values <= e[-1])
    return index.clamp(0, max(count - 1, 0)), kept


def _count(index, kept, weights, count: int):
    """The bins' counts (int64) or summed weights (the weights' dtype, as NumPy's)."""
    if weights is None:
        ones = kept.to(kiln.int64)
        return kiln.zeros(count, dtype=kiln.int64).index_add(0, index, ones)
    w = kiln.where(kept, weights, kiln.zeros_like(weights))
    total = kiln.zeros(count, dtype=kiln.float64).index_add(0, index, w.to(kiln.float64))
    return total.to(weights.dtype)


FUNCTIONS = {np.histogram: histogram}

"""Searching, counting and index-driven writes written in kiln ops: searchsorted, bucketize,
isin, bincount, histc, index_fill, index_copy, masked_scatter, tril_indices and triu_indices.

searchsorted is a binary search of ceil(log2(n + 1)) elementwise steps, each a gather of the
midpoints, so it costs O(k log n) for k values and compiles into one fused kernel; isin sorts
the test elements once and searches them. The capture inlines these (kiln/_capture/calls.py).
"""

from __future__ import annotations

import math

import kiln
from kiln._ops_composite_math import inplace_method

__all__ = ["bincount", "bucketize", "histc", "index_copy", "index_fill", "isin",
           "masked_scatter", "searchsorted", "tril_indices", "triu_indices"]  # fmt: skip


def _as_tensor(v, like=None):
    if isinstance(v, kiln.Tensor):
        return v
    return kiln.tensor(v) if like is None else kiln.tensor(v, dtype=kiln.result_type(like, v))


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,  # noqa: A002
                 out=None, sorter=None):  # fmt: skip
    """The position of each value in the sorted last dim of `sorted_sequence` where it would be
    inserted: before equal elements (side='left') or after them (right=True, side='right')."""
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but "
                               f"got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites, "
                               "got side of left while right was True")
        right = side == "right"
    seq = sorted_sequence
    if sorter is not None:
        seq = seq.gather(-1, sorter)
    scalar = not isinstance(input, kiln.Tensor)
    values = _as_tensor(input, seq)
    if seq.dim() > 1 and tuple(seq.shape[:-1]) != tuple(values.shape[:-1]):
        raise RuntimeError(
            "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 "
            "dimensions of boundaries tensor and input value tensor must match, but we got "
            f"boundaries tensor {list(seq.shape)} and input value tensor {list(values.shape)}")
    dtype = kiln.promote_types(seq.dtype, values.dtype)
    seq, values = seq.to(dtype), values.to(dtype)
    n = seq.shape[-1]
    lo = kiln.zeros(values.shape, dtype=kiln.int64, device=values.device)
    hi = lo + n
    for _ in range(math.ceil(math.log2(n + 1)) if n else 0):
        mid = (lo + hi) // 2
        at = mid.clamp(max=n - 1)
        probe = seq[at] if seq.dim() == 1 else seq.gather(-1, at)
        before = (probe <= values) if right else (probe < values)
        open_ = lo < hi
        lo = kiln.where(open_ & before, mid + 1, lo)
        hi = kiln.where(open_ & ~before, mid, hi)
    result = lo.to(kiln.int32) if out_int32 else lo
    if scalar:
        result = result.reshape(())
    if out is not None:
        return out.copy_(result)
    return result


def bucketize(input, boundaries, *, out_int32=False, right=False, out=None):  # noqa: A002
    """The bucket of each value among 1-D `boundaries` (searchsorted with the roles swapped)."""
    if boundaries.dim() != 1:
        raise RuntimeError("boundaries tensor must be 1 dimension, but got dim("
                           f"{boundaries.dim()})")
    return searchsorted(boundaries, input, out_int32=out_int32, right=right, out=out)


def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element is among test_elements (either may be a number)."""
    e = _as_tensor(elements, test_elements if isinstance(test_elements, kiln.Tensor) else None)
    t = _as_tensor(test_elements, e).reshape(-1)
    if t.numel() == 0:
        found = kiln.zeros(e.shape, dtype=kiln.bool, device=e.device)
    else:
        s = t.sort().values
        dtype = kiln.promote_types(s.dtype, e.dtype)
        s, e = s.to(dtype), e.to(dtype)
        at = searchsorted(s, e).clamp(max=s.numel() - 1)
        found = s[at] == e
    return ~found if invert else found


def bincount(input, weights=None, minlength=0):  # noqa: A002
    """How often each value 0..max occurs in a 1-D non-negative integer tensor (summing
    `weights` instead of ones), at least `minlength` bins."""
    if input.dim() != 1 or input.is_floating_point() or input.dtype == kiln.bool or (
        input.numel() and int(input.min()) < 0
    ):
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    if weights is not None and tuple(weights.shape) != tuple(input.shape):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    n = max(int(input.max()) + 1 if input.numel() else 0, minlength)
    if weights is None:
        source, dtype = kiln.ones(input.shape, dtype=kiln.int64, device=input.device), kiln.int64
    else:
        dtype = weights.dtype if weights.dtype in (kiln.float32, kiln.float64) else kiln.float64
        source = weights.to(dtype)
    return kiln.zeros(n, dtype=dtype, device=input.device).index_add(0, input.long(), source)


def histc(input, bins=100, min=0, max=0):  # noqa: A002 - torch's argument names
    """A histogram of `bins` equal bins over [min, max] (the data's range when both are 0);
    values outside are left out, the last bin includes max."""
    if bins <= 0:
        raise RuntimeError("torch.histogram(): bins must be > 0")
    if not input.is_floating_point():
        raise RuntimeError(f"\"histogram_cpu\" not implemented for '{input.dtype.name}'")
    lo, hi = float(min), float(max)
    if lo == hi and input.numel():
        lo, hi = float(input.min()), float(input.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi:
        raise RuntimeError("torch.histogram(): max must be larger than min")
    x = input.reshape(-1)
    inside = (x >= lo) & (x <= hi)
    at = ((x - lo) * (bins / (hi - lo))).floor().long().clamp(0, bins - 1)
    counts = kiln.zeros(bins, dtype=input.dtype, device=input.device)
    return counts.index_add(0, at, inside.to(input.dtype))


def _along(dim: int, rank: int, index):
    """`index` shaped to broadcast along `dim` of a tensor of `rank` dims."""
    return index.reshape([-1 if d == dim else 1 for d in range(rank)])


def index_fill(input, dim, index, value):  # noqa: A002
    """`input` with the slices at `index` along `dim` set to `value` (a number or 0-d tensor)."""
    rank = max(input.dim(), 1)
    dim = dim % rank
    n = input.shape[dim] if input.dim() else 1
    index = index.reshape(-1)
    chosen = kiln.zeros(n, dtype=kiln.bool, device=input.device).index_put(
        (index,), kiln.ones(index.shape, dtype=kiln.bool, device=input.device))
    mask = _along(dim, input.dim(), chosen) if input.dim() else chosen.reshape(())
    fill = value.to(input.dtype) if isinstance(value, kiln.Tensor) else value
    return kiln.where(mask, fill, input)


def index_copy(input, dim, index, source):  # noqa: A002
    """`input` with its slices at `index` along `dim` replaced by the slices of `source`."""
    if input.dim() == 0:
        return source.reshape(()).to(input.dtype).clone()
    dim = dim % input.dim()
    out = input.movedim(dim, 0).clone()
    out[index.reshape(-1)] = source.movedim(dim, 0).to(input.dtype)
    return out.movedim(0, dim)


def masked_scatter(input, mask, source):  # noqa: A002
    """`input` with the positions where `mask` (broadcast to it) is true taking source's
    elements in order."""
    m = mask.expand(input.shape) if tuple(mask.shape) != tuple(input.shape) else mask
    count = int(m.sum())
    if count > source.numel():
        raise RuntimeError("masked_scatter: expected source to have at least "
                           f"{count} elements, but got {source.numel()}")
    out = input.clone()
    out[m] = source.reshape(-1)[:count].to(input.dtype)
    return out


def _triangle_indices(row, col, offset, dtype, device, lower):
    if not (row and col):
        return kiln.zeros(2, 0, dtype=dtype, device=device)
    r = kiln.arange(row, device=device).unsqueeze(1)
    c = kiln.arange(col, device=device).unsqueeze(0)
    keep = (c - r <= offset) if lower else (c - r >= offset)
    return keep.nonzero().t().to(dtype)


def tril_indices(row, col, offset=0, *, dtype=kiln.int64, device=None, layout=None,
                 pin_memory=False):  # fmt: skip
    """The (row, col) positions of the lower triangle of a row x col matrix, as a 2 x N
    tensor in row-major order."""
    return _triangle_indices(row, col, offset, dtype, device, True)


def triu_indices(row, col, offset=0, *, dtype=kiln.int64, device=None, layout=None,
                 pin_memory=False):  # fmt: skip
    return _triangle_indices(row, col, offset, dtype, device, False)


def _install_methods():
    for name in ("bincount", "histc", "index_copy", "index_fill", "masked_scatter"):
        setattr(kiln.Tensor, name, globals()[name])
    for name in ("index_copy", "index_fill", "masked_scatter"):
        setattr(kiln.Tensor, name + "_", inplace_method(globals()[name]))


_install_methods()

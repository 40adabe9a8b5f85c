"""`np.convolve` and `np.correlate` of 1-D float arrays (moving averages, matched filters), as
one kiln conv1d: compiled, a sliding window over the longer array."""

from __future__ import annotations

import numpy as np

import kiln
from kiln._numpy import _dtypes as _dt
from kiln._numpy._ufuncs import as_tensor, spec


def _pair(a, v, name: str):
    """Both arrays 1-D, in their common float dtype (integers and complex are NumPy's: the
    capture then runs NumPy)."""
    dtype = _dt.common((spec(a), spec(v)))
    if not _dt.is_float(dtype) or dtype in (kiln.float16, kiln.bfloat16):
        raise NotImplementedError(f"np.{name} of {_dt.to_numpy(dtype)} arrays is not supported "
                                  "by kiln")
    x, w = as_tensor(a, dtype), as_tensor(v, dtype)
    if x.dim() != 1 or w.dim() != 1:
        raise ValueError("object too deep for desired array")
    if x.shape[0] == 0:
        raise ValueError("a cannot be empty")
    if w.shape[0] == 0:
        raise ValueError("v cannot be empty")
    return x, w


def _full_correlation(x, w):
    """c[k] = sum_n x[n + k - (len(w) - 1)] w[n], k over the full overlap (len x + len w - 1)."""
    pad = w.shape[0] - 1
    return kiln.nn.functional.conv1d(x.reshape(1, 1, -1), w.reshape(1, 1, -1),
                                     padding=pad).reshape(-1)


def _mode(full, n: int, m: int, mode: str, name: str):
    """The part of a full result (lengths n >= m) that `mode` keeps, as NumPy centers it."""
    if mode == "full":
        return full
    if mode == "same":
        start = (m - 1) // 2
        return full[start:start + n]
    if mode == "valid":
        return full[m - 1:n]
    raise ValueError(f"mode must be one of 'valid', 'same', or 'full' (got {mode!r})")


def convolve(a, v, mode="full"):
    x, w = _pair(a, v, "convolve")
    if w.shape[0] > x.shape[0]:  # NumPy swaps them: the result is symmetric in the two
        x, w = w, x
    full = _full_correlation(x, w.flip(0))
    return _mode(full, x.shape[0], w.shape[0], mode, "convolve")


def correlate(a, v, mode="valid"):
    x, w = _pair(a, v, "correlate")
    if w.shape[0] > x.shape[0]:  # NumPy computes it swapped, then reverses
        return _mode(_full_correlation(w, x), w.shape[0], x.shape[0], mode, "correlate").flip(0)
    return _mode(_full_correlation(x, w), x.shape[0], w.shape[0], mode, "correlate")


FUNCTIONS = {np.convolve: convolve, np.correlate: correlate}

"""F.interpolate(..., antialias=True) for 'bilinear' and 'bicubic', as torch computes it.

Each spatial dim is resampled by a [out, in] weight matrix: output pixel i takes the input
pixels in the window around its center `scale * (i + 0.5)`, weighted by the mode's filter
(triangle or Keys cubic with a = -0.5) stretched by the scale when downsampling (that is the
antialiasing), the weights of each window normalized to sum to 1 (PIL's and torch's
`_upsample_*_aa`). Applied one dim after the other as a matrix product, so it differentiates
and runs on any device like a linear layer.
"""

from __future__ import annotations

import numpy as np

import kiln
from kiln.nn._bicubic import axis_scale

_SUPPORT = {"bilinear": 1.0, "bicubic": 2.0}  # half the filter's width at scale 1


def _filter(mode: str, x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    if mode == "bilinear":
        return np.clip(1.0 - x, 0.0, None)
    a = -0.5
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def weights(mode: str, in_size: int, out_size: int, align_corners: bool,
            scale_factor=None) -> np.ndarray:
    """The [out_size, in_size] resampling matrix of one dim."""
    scale = axis_scale(in_size, out_size, align_corners, scale_factor)
    support = _SUPPORT[mode] * (scale if scale >= 1.0 else 1.0)
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    m = np.zeros((out_size, in_size))
    for i in range(out_size):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        if hi <= lo:
            continue
        w = _filter(mode, (np.arange(lo, hi) - center + 0.5) * invscale)
        total = w.sum()
        m[i, lo:hi] = w / total if total != 0 else w
    return m


def interpolate_aa(x, output_size, mode: str, align_corners: bool, scales):
    """[N, C, H, W] resampled to `output_size` with antialiasing."""
    if mode not in _SUPPORT:
        raise NotImplementedError(
            f"Anti-alias option is restricted to bilinear and bicubic modes and 4-D tensors "
            f"(got mode {mode!r})")
    if x.dim() != 4:
        raise NotImplementedError(
            f"Anti-alias option is restricted to bilinear and bicubic modes and 4-D tensors "
            f"(got {x.dim()}-D input)")
    compute = x.dtype if x.dtype.is_floating_point and x.dtype != kiln.float16 and (
        x.dtype != kiln.bfloat16) else kiln.float32
    y = x.to(compute)
    for k, dim in enumerate((2, 3)):
        m = weights(mode, x.shape[dim], output_size[k], align_corners, scales[k])
        w = kiln.tensor(m, dtype=compute, device=x.device)
        y = (y.transpose(dim, -1) @ w.t()).transpose(dim, -1)
    return y.to(x.dtype) if x.dtype.is_floating_point else y.round().clamp(
        *_int_range(x.dtype)).to(x.dtype)


def _int_range(dtype) -> tuple:
    info = kiln.iinfo(dtype)
    return (float(info.min), float(info.max))


"""Bicubic interpolation (torch's upsample_bicubic2d), written once against a small op interface
so that eager kiln and the capture build the same computation: eager runs it on kiln tensors
(autograd differentiates it), and kiln.compile's lowering writes it as graph nodes, which fuse.

Per spatial axis, torch's formulas in the op-math type (float32 for float16/bfloat16/float32
inputs, float64 for float64): the source coordinate of output index o is
``scale * (o + 0.5) - 0.5`` (``scale * o`` with align_corners); its floor, at most the last
input index, is the base tap and the remainder, clamped into [0, 1], is t; the four taps
base - 1 .. base + 2 are clamped into the input (torch's bounded access) and weighted by the
cubic convolution coefficients of t with A = -0.75. The width axis is interpolated first, then
the height, each as ``x0 c0 + x1 c1 + x2 c2 + x3 c3`` in that order, as torch's kernel sums.
"""

from __future__ import annotations

_A = -0.75


def axis_scale(in_size: int, out_size: int, align_corners: bool, scale) -> float:
    """torch's area_pixel_compute_scale (a Python float; the ops round it to the op-math type)."""
    if align_corners:
        return (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
    if scale is not None and scale > 0:
        return 1.0 / scale
    return in_size / out_size


def _cubic1(b, x):  # |x| <= 1
    return b.add(b.mul(b.mul(b.sub(b.mul(x, _A + 2), _A + 3), x), x), 1.0)


def _cubic2(b, x):  # 1 < |x| < 2
    return b.sub(b.mul(b.add(b.mul(b.sub(b.mul(x, _A), 5 * _A), x), 8 * _A), x), 4 * _A)


def interpolate_axis(b, x, dim: int, in_size: int, out_size: int, align_corners: bool, scale):
    """`x` resampled along `dim` (of rank 4) from `in_size` to `out_size` by the cubic kernel."""
    s = axis_scale(in_size, out_size, align_corners, scale)
    o = b.arange(out_size)
    real = b.mul(o, s) if align_corners else b.sub(b.mul(b.add(o, 0.5), s), 0.5)
    base = b.clamp(b.floor(real), None, in_size - 1)  # no lower bound: taps clamp instead
    t = b.clamp(b.sub(real, base), 0.0, 1.0)
    one_minus = b.rsub(t, 1.0)
    coeffs = [_cubic2(b, b.add(t, 1.0)), _cubic1(b, t), _cubic1(b, one_minus),
              _cubic2(b, b.add(one_minus, 1.0))]  # fmt: skip
    first = b.to_index(base)
    out = None
    for k, c in enumerate(coeffs):
        tap = b.index_select(x, dim, b.clamp(b.add(first, k - 1), 0, in_size - 1))
        term = b.mul(tap, b.along(c, dim))
        out = term if out is None else b.add(out, term)
    return out


def upsample_bicubic2d(b, x, in_sizes, out_sizes, align_corners: bool, scales):
    """[N, C, H, W] -> [N, C, *out_sizes]: width first, then height; `b.finish` rounds the
    op-math result to the input's dtype."""
    (h, w), (oh, ow) = in_sizes, out_sizes
    sh, sw = scales if scales is not None else (None, None)
    y = interpolate_axis(b, b.start(x), 3, w, ow, align_corners, sw)
    y = interpolate_axis(b, y, 2, h, oh, align_corners, sh)
    return b.finish(y)


class EagerOps:
    """The interface above on kiln tensors, computing in `opmath` (a kiln dtype)."""

    def __init__(self, kiln, input):  # noqa: A002
        self.k, self.dtype = kiln, input.dtype
        self.opmath = kiln.float64 if input.dtype == kiln.float64 else kiln.float32

    def start(self, x):
        return x.to(self.opmath)

    def finish(self, y):
        return y.to(self.dtype)

    def arange(self, n):
        return self.k.arange(n, dtype=self.opmath)

    def add(self, a, b):
        return a + b

    def sub(self, a, b):
        return a - b

    def rsub(self, a, b):
        return b - a

    def mul(self, a, b):
        return a * b

    def floor(self, a):
        return a.floor()

    def clamp(self, a, lo, hi):
        return a.clamp(lo, hi)

    def to_index(self, a):
        return a.long()

    def index_select(self, x, dim, index):
        return x.index_select(dim, index)

    def along(self, c, dim):
        return c if dim == 3 else c.unsqueeze(1)


def check_bicubic_input(input, output_size):  # noqa: A002
    if input.dim() != 4:
        raise NotImplementedError(
            f"Got {input.dim()}D input, but bicubic mode needs 4D input")
    if any(s <= 0 for s in output_size) or any(s <= 0 for s in input.shape[2:]):
        raise RuntimeError(
            "upsample_bicubic2d: Input and output sizes should be greater than 0, but got "
            f"input (H: {input.shape[2]}, W: {input.shape[3]}) output (H: {output_size[0]}, "
            f"W: {output_size[1]})")
    if not input.dtype.is_floating_point:
        raise NotImplementedError(
            f"\"upsample_bicubic2d_out_frame\" not implemented for '{_dtype_name(input.dtype)}'")


def _dtype_name(dtype) -> str:
    names = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte",
             "bool": "Bool"}
    return names.get(str(dtype).rsplit(".", 1)[-1], str(dtype))


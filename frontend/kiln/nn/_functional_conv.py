"""Functional forms (kiln.nn.functional) of convolution, pooling and interpolation."""

import math

import kiln
from kiln import _C
from kiln._ops_linalg import (
    _adaptive_size,
    adaptive_avg_pool1d,
    adaptive_max_pool1d,
    avg_pool1d,
    max_pool1d,
    max_pool2d,
    max_pool3d,
)
from kiln._schema import torch_schema
from kiln.nn import _bicubic

__all__ = [
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "fold",
    "interpolate",
    "max_pool1d",
    "max_pool1d_with_indices",
    "max_pool2d",
    "max_pool2d_with_indices",
    "max_unpool1d",
    "max_unpool2d",
    "max_pool3d",
    "max_pool3d_with_indices",
    "unfold",
    "upsample",
    "upsample_bilinear",
    "upsample_nearest",
]

conv1d = _C.conv1d
conv2d = _C.conv2d
conv3d = _C.conv3d
conv_transpose1d = _C.conv_transpose1d
conv_transpose2d = _C.conv_transpose2d
conv_transpose3d = _C.conv_transpose3d


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """F.unfold: sliding local blocks of [N, C, H, W] as columns [N, C * kH * kW, L]."""
    return _C._unfold(input, kernel_size, dilation, padding, stride)


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):  # noqa: A002
    """F.fold: sums columns [N, C * kH * kW, L] back into an image [N, C, *output_size]."""
    return _C._fold(input, output_size, kernel_size, dilation, padding, stride)


def max_pool1d_with_indices(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=True
):  # noqa: A002
    """F.max_pool1d_with_indices: (values, indices)."""
    return _C._max_pool(1, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=True
):  # noqa: A002
    """F.max_pool2d_with_indices: (values, indices)."""
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def _tuple(v, n: int, name: str) -> list[int]:
    values = list(v) if isinstance(v, (tuple, list)) else [v]
    if len(values) == 1:
        values = values * n
    if len(values) != n or not all(isinstance(x, int) for x in values):
        raise TypeError(f"max_unpool{n}d: {name} must be an int or {n} ints, got {v!r}")
    return values


def unpool_size(nd, spatial, kernel_size, stride, padding, output_size) -> list[int]:
    """The planes a max_unpool makes from input planes of `spatial` sizes: torch's default
    `(in - 1) * stride - 2 * padding + kernel`, or `output_size` within a stride of it
    (ValueError otherwise). The compiled decomposition sizes its result with it too."""
    name = f"max_unpool{nd}d"
    k = _tuple(kernel_size, nd, "kernel_size")
    st = _tuple(kernel_size if stride is None or stride == () or stride == [] else stride, nd,
                "stride")  # fmt: skip
    p = _tuple(padding, nd, "padding")
    default = [(spatial[d] - 1) * st[d] - 2 * p[d] + k[d] for d in range(nd)]
    if output_size is None:
        return default
    out = [int(x) for x in list(output_size)[-nd:]]
    if len(out) != nd:
        raise ValueError(f"{name}: output_size must have {nd} or {nd + 2} elements, got "
                         f"{list(output_size)}")  # fmt: skip
    for d in range(nd):
        lo, hi = default[d] - st[d], default[d] + st[d]
        if not lo < out[d] < hi:
            raise ValueError(f"invalid output_size {list(output_size)} (dim {d} must be "
                             f"between {lo} and {hi})")  # fmt: skip
    return out


def _max_unpool(nd, input, indices, kernel_size, stride, padding, output_size):  # noqa: A002
    """The values of a max pool put back at their `indices` (positions in each output plane),
    zeros elsewhere: a scatter into the flattened planes, so the gradient of `input` is a gather
    of the output's, as torch's."""
    name = f"max_unpool{nd}d"
    if input.dim() not in (nd + 1, nd + 2):
        raise ValueError(f"{name}: expected a {nd + 1}-d or {nd + 2}-d input, got "
                         f"{input.dim()}-d")  # fmt: skip
    if tuple(indices.shape) != tuple(input.shape):
        raise ValueError(f"Expected shape of indices to be same as that of the input tensor "
                         f"({tuple(input.shape)}) but got indices tensor with shape "
                         f"{tuple(indices.shape)}")  # fmt: skip
    out = unpool_size(nd, list(input.shape[-nd:]), kernel_size, stride, padding, output_size)
    batched = input.dim() == nd + 2
    x = input if batched else input.unsqueeze(0)
    idx = indices if batched else indices.unsqueeze(0)
    n, c = x.shape[0], x.shape[1]
    plane = math.prod(out)
    flat = kiln.zeros(n, c, plane, dtype=x.dtype, device=x.device)
    flat = flat.scatter(2, idx.reshape(n, c, -1), x.reshape(n, c, -1))
    result = flat.reshape(n, c, *out)
    return result if batched else result.squeeze(0)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):  # noqa: A002
    """F.max_unpool1d: the inverse of max_pool1d with indices (zeros where nothing was kept)."""
    return _max_unpool(1, input, indices, kernel_size, stride, padding, output_size)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):  # noqa: A002
    """F.max_unpool2d: the inverse of max_pool2d with indices (SegNet's decoder)."""
    return _max_unpool(2, input, indices, kernel_size, stride, padding, output_size)


def max_pool3d_with_indices(
    input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=True
):  # noqa: A002
    """F.max_pool3d_with_indices: (values, indices)."""
    return _C._max_pool(3, input, kernel_size, stride, padding, dilation, ceil_mode, True)


def avg_pool2d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):  # noqa: A002
    """F.avg_pool2d over [N, C, H, W] or [C, H, W]."""
    return _C._avg_pool(
        2, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )


def avg_pool3d(
    input,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode=False,
    count_include_pad=True,
    divisor_override=None,
):  # noqa: A002
    """F.avg_pool3d over [N, C, D, H, W] or [C, D, H, W]."""
    return _C._avg_pool(
        3, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override
    )


@torch_schema(
    "adaptive_avg_pool2d(Tensor input, Any output_size) -> Tensor"
)
def adaptive_avg_pool2d(input, output_size):  # noqa: A002
    """F.adaptive_avg_pool2d; output_size is an int or a pair whose entries may be None."""
    return _C._adaptive_avg_pool(2, input, _adaptive_size(output_size, 2, "adaptive_avg_pool2d"))


def adaptive_avg_pool3d(input, output_size):  # noqa: A002
    """F.adaptive_avg_pool3d; output_size is an int or a triple whose entries may be None."""
    return _C._adaptive_avg_pool(3, input, _adaptive_size(output_size, 3, "adaptive_avg_pool3d"))


@torch_schema(
    "adaptive_max_pool2d(Tensor input, Any output_size, bool return_indices=False) -> Tensor"
)
def adaptive_max_pool2d(input, output_size, return_indices=False):  # noqa: A002
    """F.adaptive_max_pool2d: values, or (values, indices) when return_indices."""
    size = _adaptive_size(output_size, 2, "adaptive_max_pool2d")
    return _C._adaptive_max_pool(2, input, size, return_indices)


def adaptive_max_pool3d(input, output_size, return_indices=False):  # noqa: A002
    """F.adaptive_max_pool3d: values, or (values, indices) when return_indices."""
    size = _adaptive_size(output_size, 3, "adaptive_max_pool3d")
    return _C._adaptive_max_pool(3, input, size, return_indices)


_MODES = "nearest | linear | bilinear | bicubic | trilinear | area | nearest-exact"
_LINEAR_RANK = {"linear": 1, "bilinear": 2, "trilinear": 3}


def _spatial_list(value, dim, what, input):  # noqa: A002
    if isinstance(value, (list, tuple)):
        if len(value) != dim:
            raise ValueError(
                f"Input and {what} must have the same number of spatial dimensions, but got input "
                f"with spatial dimensions of {list(input.shape[2:])} and {what} of "
                f"{'shape ' if what == 'scale_factor' else ''}{list(value)}. Please provide input "
                f"tensor in (N, C, d1, d2, ...,dK) format and {what} in (o1, o2, ...,oK) format."
            )
        return list(value)
    return [value] * dim


@torch_schema(
    "interpolate(Tensor input, Any size=None, Any scale_factor=None, str mode='nearest', "
    "bool? align_corners=None, bool? recompute_scale_factor=None, bool antialias=False) -> Tensor"
)
def interpolate(
    input,  # noqa: A002
    size=None,
    scale_factor=None,
    mode="nearest",
    align_corners=None,
    recompute_scale_factor=None,
    antialias=False,
):
    """F.interpolate: resamples [N, C, *spatial] (1 to 3 spatial dims) to `size` or by
    `scale_factor`; modes 'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic',
    'trilinear', 'area'; `antialias` for 'bilinear' and 'bicubic' (nn/_interpolate_aa.py)."""
    dim = input.dim() - 2
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError(
                "align_corners option can only be set with the interpolating modes: "
                "linear | bilinear | bicubic | trilinear"
            )
    elif align_corners is None:
        align_corners = False
    if antialias and (mode not in ("bilinear", "bicubic") or input.dim() != 4):
        raise NotImplementedError(
            "Anti-alias option is restricted to bilinear and bicubic modes and requires a 4-D "
            "tensor as input")
    if dim < 1 or dim > 3:
        raise NotImplementedError(
            f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.dim()}D) for "
            f"the modes: {_MODES} (got {mode})"
        )
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        output_size = [int(s) for s in _spatial_list(size, dim, "output size", input)]
        scales = None
    elif scale_factor is not None:
        scales = [float(s) for s in _spatial_list(scale_factor, dim, "scale_factor", input)]
        output_size = None
    else:
        raise ValueError("either size or scale_factor should be defined")
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if mode == "area" and output_size is None:
        recompute_scale_factor = True
    if output_size is None:
        output_size = [math.floor(float(input.size(i + 2)) * scales[i]) for i in range(dim)]
    if recompute_scale_factor:
        scales = None
    scale_list = scales if scales is not None else [None] * dim
    if antialias:
        from kiln.nn._interpolate_aa import interpolate_aa

        return interpolate_aa(input, output_size, mode, align_corners, scale_list)
    if mode in ("nearest", "nearest-exact"):
        return _C._upsample_nearest(input, output_size, scale_list, mode == "nearest-exact")
    if mode in _LINEAR_RANK:
        if _LINEAR_RANK[mode] != dim:
            raise NotImplementedError(
                f"Got {input.dim()}D input, but {mode} mode needs {_LINEAR_RANK[mode] + 2}D input"
            )
        return _C._upsample_linear(input, output_size, align_corners, scale_list)
    if mode == "area":
        return _C._adaptive_avg_pool(dim, input, output_size)
    if mode == "bicubic":
        if dim != 2:
            raise NotImplementedError(
                f"Got {input.dim()}D input, but bicubic mode needs 4D input")
        _bicubic.check_bicubic_input(input, output_size)
        return _bicubic.upsample_bicubic2d(_bicubic.EagerOps(kiln, input), input,
                                           list(input.shape[2:]), output_size, align_corners,
                                           scales)
    raise NotImplementedError(
        f"Input Error: Only 3D, 4D and 5D input Tensors supported (got {input.dim()}D) for the "
        f"modes: {_MODES} (got {mode})"
    )


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):  # noqa: A002
    """F.upsample (deprecated in torch): same as interpolate."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):  # noqa: A002
    """F.upsample_nearest: interpolate(mode='nearest')."""
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):  # noqa: A002
    """F.upsample_bilinear: interpolate(mode='bilinear', align_corners=True)."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)

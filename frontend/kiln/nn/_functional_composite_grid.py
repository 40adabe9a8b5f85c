"""affine_grid and grid_sample written in kiln ops (exported through
_functional_composite_extra): grid sampling is gathers from the flattened input weighted by
functions of the grid, so autograd reaches both the input and the grid, and kiln.compile
captures the parts (this module's name keeps the capture inlining it)."""

from __future__ import annotations

import warnings

import kiln
from kiln._schema import torch_schema, user_stacklevel

__all__ = ["affine_grid", "grid_sample"]

_TORCH_TYPE_NAMES = {
    "float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double",
    "int8": "Char", "uint8": "Byte", "int16": "Short", "int32": "Int", "int64": "Long",
    "bool": "Bool",
}  # fmt: skip


def _type_name(dtype) -> str:
    name = str(dtype).rpartition(".")[2]
    return _TORCH_TYPE_NAMES.get(name, name)


def _check_scalar_type(tensor, expected) -> None:
    if tensor.dtype != expected:
        raise RuntimeError(
            f"expected scalar type {_type_name(expected)} but found {_type_name(tensor.dtype)}"
        )


def _warn_align_corners() -> None:
    warnings.warn(
        "Default grid_sample and affine_grid behavior has changed to align_corners=False since "
        "1.3.0. Please specify align_corners=True if the old behavior is desired. See the "
        "documentation of grid_sample for details.",
        stacklevel=user_stacklevel(),
    )


def _linspace_from_neg_one(steps: int, align_corners: bool, like):
    """linspace(-1, 1, steps), times (steps - 1) / steps without align_corners: torch's grid
    axis. Each half is counted from its own end, as at::linspace does, so the values match;
    built from arange, which kiln.compile lowers (linspace it does not)."""
    if steps <= 1:
        return kiln.zeros(1, dtype=like.dtype, device=like.device)
    i = kiln.arange(steps, dtype=like.dtype, device=like.device)
    step = 2.0 / (steps - 1)
    axis = kiln.where(i < steps // 2, step * i - 1, 1 - step * (steps - 1 - i))
    return axis * (steps - 1) / steps if not align_corners else axis


def _base_grid(spatial: list, align_corners: bool, like):
    """(prod(spatial), nd + 1): (x, y[, z], 1) of each output point, x along the last dim."""
    nd = len(spatial)
    columns = []
    for k in reversed(range(nd)):
        shape = [1] * nd
        shape[k] = -1
        axis = _linspace_from_neg_one(spatial[k], align_corners, like)
        columns.append(axis.reshape(shape).expand(*spatial))
    columns.append(kiln.ones(spatial, dtype=like.dtype, device=like.device))
    return kiln.stack(columns, -1).reshape(-1, nd + 1)


@torch_schema("affine_grid(Tensor theta, Any size, bool? align_corners=None) -> Tensor")
def affine_grid(theta, size, align_corners=None):
    """The sampling grid (N, H, W, 2) or (N, D, H, W, 3) of the affine maps `theta` (N, 2, 3)
    or (N, 3, 4) applied to the normalized output coordinates, for grid_sample."""
    if align_corners is None:
        _warn_align_corners()
        align_corners = False
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    if len(size) == 4:
        if theta.dim() != 3 or theta.shape[-2] != 2 or theta.shape[-1] != 3:
            raise ValueError(
                f"Expected a batch of 2D affine matrices of shape Nx2x3 for size {size}. "
                f"Got {theta.shape}."
            )
        spatial = [int(s) for s in size[-2:]]
    elif len(size) == 5:
        if theta.dim() != 3 or theta.shape[-2] != 3 or theta.shape[-1] != 4:
            raise ValueError(
                f"Expected a batch of 3D affine matrices of shape Nx3x4 for size {size}. "
                f"Got {theta.shape}."
            )
        spatial = [int(s) for s in size[-3:]]
    else:
        raise NotImplementedError(
            "affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
            f"respectively. Got size {size}."
        )
    if align_corners and min(spatial) == 1:
        warnings.warn(
            "Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
            "align_corners=True. This is not an intended use case of affine_grid. See the "
            "documentation of affine_grid for details.",
            stacklevel=user_stacklevel(),
        )
    elif min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    n = int(size[0])
    base = _base_grid(spatial, align_corners, theta)
    grid = kiln.bmm(base.unsqueeze(0).expand(n, *base.shape), theta.transpose(1, 2))
    return grid.reshape(n, *spatial, len(spatial))


def _unnormalize(coord, size: int, align_corners: bool):
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _clip(x, size: int):
    # where rather than clamp: torch gives the clipped coordinate no gradient at the bounds.
    zero = kiln.zeros_like(x)
    return kiln.where(x <= 0, zero, kiln.where(x >= size - 1, zero + (size - 1), x))


def _reflect(x, twice_low: int, twice_high: int):
    """x reflected off the bounds twice_low / 2 and twice_high / 2 until it lies between them."""
    if twice_low == twice_high:
        return kiln.zeros_like(x)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    x = x - low
    x = kiln.where(x < 0, -x, x)
    flips = (x / span).floor()
    extra = kiln.fmod(x, span)
    return kiln.where(kiln.fmod(flips, 2) == 0, extra + low, span - extra + low)


def _pad_coordinate(x, size: int, padding_mode: str, align_corners: bool):
    if padding_mode == "border":
        return _clip(x, size)
    if padding_mode == "reflection":
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
        return _clip(x, size)
    return x


def _read(flat, sizes: list, index: list, weight):
    """weight * input at the integer-valued coordinates `index` (one (N, P) tensor per spatial
    dim), 0 outside the input: a gather from the (N, C, prod(sizes)) input."""
    n, c = flat.shape[0], flat.shape[1]
    valid = None
    for i, s in zip(index, sizes, strict=True):
        inside = (i >= 0) & (i <= s - 1)
        valid = inside if valid is None else valid & inside
    linear = None
    for i, s in zip(index, sizes, strict=True):
        i = kiln.where(valid, i, kiln.zeros_like(i)).long()
        linear = i if linear is None else linear * s + i
    values = flat.gather(2, linear.unsqueeze(1).expand(n, c, linear.shape[-1]))
    return values * kiln.where(valid, weight, kiln.zeros_like(weight)).unsqueeze(1)


def _sample_linear(flat, sizes: list, coords: list):
    """Bi/trilinear: the 2^nd neighbours weighted by the opposite sub-cell volumes (torch's
    corner order, and its weight products taken x first)."""
    lows = [c.floor() for c in coords]
    corners = [()]
    for _ in coords:  # itertools.product(..., repeat=) would break a kiln.compile capture
        corners = [c + (b,) for c in corners for b in (0, 1)]
    out = None
    for corner in corners:
        weight = None
        for k in reversed(range(len(coords))):
            f = coords[k] - lows[k] if corner[k] else lows[k] + 1 - coords[k]
            weight = f if weight is None else weight * f
        index = [lo + b for lo, b in zip(lows, corner, strict=True)]
        term = _read(flat, sizes, index, weight)
        out = term if out is None else out + term
    return out


def _sample_nearest(flat, sizes: list, coords: list):
    # The weight is 1 with a zero gradient: torch's grid gradient in this mode is zeros, and the
    # grid stays connected to the output.
    weight = sum(c * 0 for c in coords) + 1
    return _read(flat, sizes, [c.round() for c in coords], weight)


def _cubic_coefficients(t) -> list:
    a = -0.75

    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    rest = 1 - t
    return [far(t + 1), near(t), near(rest), far(rest + 1)]


def _sample_bicubic(flat, sizes: list, raw: list, padding_mode: str, align_corners: bool):
    """Bicubic convolution (A = -0.75) of the 4 x 4 neighbours; padding is applied to each
    neighbour's coordinate, as torch does, so the gradient reaches the grid only through the
    fractional offsets."""
    (h, w), (y, x) = sizes, raw
    iy, ix = _unnormalize(y, h, align_corners), _unnormalize(x, w, align_corners)
    y0, x0 = iy.floor(), ix.floor()
    wy, wx = _cubic_coefficients(iy - y0), _cubic_coefficients(ix - x0)
    xs = [_pad_coordinate(x0 + (j - 1), w, padding_mode, align_corners).trunc() for j in range(4)]
    out = None
    for i in range(4):
        yi = _pad_coordinate(y0 + (i - 1), h, padding_mode, align_corners).trunc()
        row = None
        for j in range(4):
            term = _read(flat, sizes, [yi, xs[j]], wx[j])
            row = term if row is None else row + term
        row = row * wy[i].unsqueeze(1)
        out = row if out is None else out + row
    return out


def _check_grid_sampler(input, grid, mode: str) -> None:  # noqa: A002
    def sizes(t):
        return list(t.shape)

    shapes = f"input with sizes {sizes(input)} and grid with sizes {sizes(grid)}"
    if input.shape[0] != grid.shape[0]:
        raise RuntimeError(
            f"grid_sampler(): expected grid and input to have same batch size, but got {shapes}"
        )
    if grid.shape[-1] != input.dim() - 2:
        raise RuntimeError(
            f"grid_sampler(): expected grid to have size {input.dim() - 2} in last dimension, "
            f"but got grid with sizes {sizes(grid)}"
        )
    for i in range(2, input.dim()):
        if input.shape[i] <= 0:
            raise RuntimeError(
                "grid_sampler(): expected input to have non-empty spatial dimensions, but input "
                f"has sizes {sizes(input)} with dimension {i} being empty"
            )
    if input.dim() == 4:
        if grid.dim() != 4:
            raise RuntimeError(
                "grid_sampler(): expected 4D input and grid with same number of dimensions, "
                f"but got {shapes}"
            )
    else:
        if input.dim() != 5 or grid.dim() != 5:
            raise RuntimeError(
                "grid_sampler(): expected 5D input and grid with same number of dimensions, "
                f"but got {shapes}"
            )
        if mode == "bicubic":
            raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    if not input.is_floating_point():
        kernel = "grid_sampler_2d_cpu_kernel_impl" if input.dim() == 4 else "grid_sampler_3d_cpu"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_type_name(input.dtype)}'")
    _check_scalar_type(grid, input.dtype)


@torch_schema(
    "grid_sample(Tensor input, Tensor grid, str mode='bilinear', str padding_mode='zeros', "
    "bool? align_corners=None) -> Tensor"
)
def grid_sample(input, grid, mode="bilinear", padding_mode="zeros",  # noqa: A002
                align_corners=None):  # fmt: skip
    """input (N, C, H, W) or (N, C, D, H, W) sampled at the normalized coordinates of `grid`
    (N, H_out, W_out, 2) or (N, D_out, H_out, W_out, 3), x first; differentiable in the input
    and in the grid."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(
            "nn.functional.grid_sample(): expected mode to be 'bilinear', 'nearest' or "
            f"'bicubic', but got: '{mode}'"
        )
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(
            "nn.functional.grid_sample(): expected padding_mode to be 'zeros', 'border', or "
            f"'reflection', but got: '{padding_mode}'"
        )
    if align_corners is None:
        _warn_align_corners()
        align_corners = False
    _check_grid_sampler(input, grid, mode)
    nd = input.dim() - 2
    n, c = input.shape[0], input.shape[1]
    sizes = [int(s) for s in input.shape[2:]]
    flat = input.reshape(n, c, -1)
    points = grid.reshape(n, -1, nd)
    raw = [points[..., nd - 1 - k] for k in range(nd)]  # along input dim 2 + k; x is the last
    if mode == "bicubic":
        out = _sample_bicubic(flat, sizes, raw, padding_mode, align_corners)
    else:
        coords = [
            _pad_coordinate(_unnormalize(r, s, align_corners), s, padding_mode, align_corners)
            for r, s in zip(raw, sizes, strict=True)
        ]
        sample = _sample_nearest if mode == "nearest" else _sample_linear
        out = sample(flat, sizes, coords)
    return out.reshape(n, c, *grid.shape[1:-1])

"""kiln.nn.init: parameter initializers with torch.nn.init's names, arguments and formulas.

Every initializer fills its tensor in place (under kiln.no_grad) with kiln's RNG
(``Tensor.uniform_`` / ``Tensor.normal_``), so ``kiln.manual_seed`` makes them reproducible.
"""

from __future__ import annotations

import contextlib
import math
import warnings

import kiln

__all__ = [
    "calculate_gain",
    "constant_",
    "dirac_",
    "eye_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "orthogonal_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
]

_LINEAR_FNS = (
    "linear",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "sigmoid",
)


def _no_grad():
    no_grad = getattr(kiln, "no_grad", None)
    return no_grad() if no_grad is not None else contextlib.nullcontext()


def _gen(generator):
    """Keyword arguments passing `generator` on only when one was given."""
    return {} if generator is None else {"generator": generator}


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity (torch.nn.init.calculate_gain's table)."""
    if nonlinearity in _LINEAR_FNS:
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif (not isinstance(param, bool) and isinstance(param, int)) or isinstance(param, float):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor):
    """(fan_in, fan_out) of a weight laid out (out, in, *kernel), as torch computes them."""
    if tensor.dim() < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    receptive = 1
    for s in tuple(tensor.shape)[2:]:
        receptive *= s
    return tensor.size(1) * receptive, tensor.size(0) * receptive


def _calculate_correct_fan(tensor, mode):
    mode = mode.lower()
    valid = ["fan_in", "fan_out"]
    if mode not in valid:
        raise ValueError(f"Mode {mode} not supported, please use one of {valid}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fills ``tensor`` with values drawn from U(a, b)."""
    with _no_grad():
        return tensor.uniform_(a, b, **_gen(generator))


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fills ``tensor`` with values drawn from N(mean, std^2)."""
    with _no_grad():
        return tensor.normal_(mean, std, **_gen(generator))


def constant_(tensor, val):
    """Fills ``tensor`` with ``val``."""
    with _no_grad():
        return tensor.fill_(val)


def ones_(tensor):
    """Fills ``tensor`` with 1."""
    return constant_(tensor, 1.0)


def zeros_(tensor):
    """Fills ``tensor`` with 0."""
    return constant_(tensor, 0.0)


def _diagonal_view(tensor, offset, dims):
    """The strided 1-d view of elements (offset, i, i, ...) of `tensor` over `dims`, i < n."""
    n = min(tensor.size(d) for d in dims)
    step = sum(tensor.stride(d) for d in dims)
    return tensor.as_strided((n,), (step,), tensor.storage_offset() + offset)


def eye_(tensor):
    """Fills a 2-d ``tensor`` with the identity (ones on the main diagonal, zeros elsewhere)."""
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with _no_grad():
        tensor.zero_()
        if tensor.numel():
            _diagonal_view(tensor, 0, (0, 1)).fill_(1)
    return tensor


def dirac_(tensor, groups=1):
    """Fills a 3/4/5-d conv weight with the Dirac delta (identity convolution per group)."""
    dims = tensor.dim()
    if dims not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tuple(tensor.shape)
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_per_group = sizes[0] // groups
    min_dim = min(out_per_group, sizes[1])
    centre = sum((sizes[d] // 2) * tensor.stride(d) for d in range(2, dims))
    with _no_grad():
        tensor.zero_()
        if min_dim == 0:
            return tensor
        step = tensor.stride(0) + tensor.stride(1)
        for g in range(groups):
            start = tensor.storage_offset() + g * out_per_group * tensor.stride(0) + centre
            tensor.as_strided((min_dim,), (step,), start).fill_(1)
    return tensor


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """Glorot normal: N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def _kaiming_std(tensor, a, mode, nonlinearity):
    fan = _calculate_correct_fan(tensor, mode)
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He uniform: U(-b, b) with b = gain * sqrt(3 / fan) (Linear/Conv default with a=sqrt(5))."""
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He normal: N(0, std^2) with std = gain / sqrt(fan)."""
    if 0 in tuple(tensor.shape):
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity), generator)


def _norm_cdf(x):
    return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0


def _trunc_by_normal(tensor, mean, std, a, b, generator):
    """Rejection sampling with normal proposals: efficient when [a, b] keeps most mass."""
    result = tensor.normal_(mean, std, **_gen(generator))
    while True:
        mask = (result < a) | (result > b)
        if not bool(mask.any()):
            break
        fresh = kiln.empty_like(result).normal_(mean, std, **_gen(generator))
        result = kiln.where(mask, fresh, result)
    if result is not tensor:
        tensor.copy_(result)


def _trunc_by_uniform(tensor, mean, std, a, b, generator):
    """Rejection sampling with uniform proposals on [a, b]: for narrow intervals."""
    mode = max(a, min(mean, b))
    log_peak = -0.5 * ((mode - mean) / std) ** 2

    def log_accept(x):
        return ((x - mean) / std) ** 2 * -0.5 - log_peak

    def rejected(x):
        u = kiln.empty_like(x).uniform_(0.0, 1.0, **_gen(generator))
        return u.log() > log_accept(x)

    result = kiln.empty_like(tensor).uniform_(a, b, **_gen(generator))
    pending = rejected(result)
    while bool(pending.any()):
        candidates = kiln.empty_like(tensor).uniform_(a, b, **_gen(generator))
        result = kiln.where(pending, candidates, result)
        pending = pending & rejected(candidates)
    tensor.copy_(result)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """Fills ``tensor`` from N(mean, std^2) truncated to [a, b] (exact rejection sampling)."""
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn(
            "mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
            "The distribution of values may be incorrect.",
            stacklevel=2,
        )
    if tensor.numel() == 0:
        return tensor
    with _no_grad():
        p = _norm_cdf((b - mean) / std) - _norm_cdf((a - mean) / std)
        if p > 0.3:
            _trunc_by_normal(tensor, mean, std, a, b, generator)
        else:
            _trunc_by_uniform(tensor, mean, std, a, b, generator)
    return tensor


def orthogonal_(tensor, gain=1, generator=None):
    """Fills ``tensor`` (viewed as rows x rest) with a (semi-)orthogonal matrix times gain.

    Draws a normal matrix with kiln's RNG and orthogonalizes it by QR (sign-corrected so the
    result is uniformly distributed, as torch does).
    """
    import numpy as np

    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.size(0)
    cols = tensor.numel() // rows
    flat = kiln.empty((rows, cols), dtype=kiln.float64).normal_(0.0, 1.0, **_gen(generator))
    mat = flat.numpy()
    if rows < cols:
        mat = mat.T
    q, r = np.linalg.qr(mat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    with _no_grad():
        tensor.copy_(kiln.from_numpy(np.ascontiguousarray(q * gain)).reshape(tuple(tensor.shape)))
    return tensor


def _default_layer_init_(weight, bias) -> None:
    """torch's default for Linear and Conv: weight ~ kaiming_uniform_(a=sqrt(5)), bias ~
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (bias may be None)."""
    kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = _calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        uniform_(bias, -bound, bound)

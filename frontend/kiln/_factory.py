"""Factories, random numbers and tensor predicates: the Python-level glue of this area.

Most factories (zeros, arange, tensor, rand, ...) are C++ functions exported by kiln/_ops.py;
this module adds the ones whose argument handling is awkward in C++ (as_tensor, asarray,
empty_strided, the dropout family) and the generator/memory-format objects.
"""

from __future__ import annotations

import numpy as _np

from kiln import _C

Tensor = _C.Tensor
Generator = _C.Generator
default_generator = _C.default_generator

__all__ = [
    "Generator",
    "alpha_dropout",
    "as_tensor",
    "asarray",
    "channels_last",
    "channels_last_3d",
    "clone",
    "contiguous_format",
    "default_generator",
    "dropout",
    "dropout_",
    "empty_strided",
    "feature_alpha_dropout",
    "feature_dropout",
    "is_floating_point",
    "is_tensor",
    "memory_format",
    "numel",
    "preserve_format",
]


class memory_format:  # noqa: N801 - torch spelling
    """kiln.preserve_format / kiln.contiguous_format, as passed to ``*_like(memory_format=)``."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return f"kiln.{self._name}"


preserve_format = memory_format("preserve_format")
contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")  # NHWC strides for a 4-d tensor
channels_last_3d = memory_format("channels_last_3d")  # NDHWC for a 5-d tensor

_CHANNELS_LAST = {"channels_last": 4, "channels_last_3d": 5}


def _channels_last_order(rank: int) -> list[int]:
    return [0, *range(2, rank), 1]


def channels_last_rank(fmt) -> int | None:
    """4 for kiln.channels_last, 5 for channels_last_3d, None for the other formats."""
    return _CHANNELS_LAST.get(fmt._name) if isinstance(fmt, memory_format) else None


def _as_channels_last(x, name: str):
    """`x` with the channels dim innermost in memory (same values and shape)."""
    rank = _CHANNELS_LAST[name]
    if x.dim() != rank:
        raise RuntimeError(f"required rank {rank} tensor to use {name} format")
    order = _channels_last_order(rank)
    back = [order.index(d) for d in range(rank)]
    return x.permute(order).contiguous().permute(back)


def _is_contiguous_as(x, fmt=None) -> bool:
    """Tensor.is_contiguous(memory_format=...): row-major, or channels innermost."""
    name = "contiguous_format" if fmt is None else _format_name(fmt, "is_contiguous")
    if name not in _CHANNELS_LAST:
        return x._is_contiguous()
    if x.dim() != _CHANNELS_LAST[name]:
        return False
    expected, stride = {}, 1
    for d in reversed(_channels_last_order(x.dim())):
        expected[d] = stride
        stride *= x.shape[d]
    return all(x.shape[d] == 1 or x.stride(d) == expected[d] for d in range(x.dim()))


def _format_name(fmt, op: str) -> str:
    if not isinstance(fmt, memory_format):
        raise TypeError(f"{op}(): argument 'memory_format' must be memory_format, not "
                        f"{type(fmt).__name__}")
    return fmt._name


def _contiguous_as(x, fmt):
    """Tensor.contiguous(memory_format=...) past the default (bind_tensor.cc calls it)."""
    name = _format_name(fmt, "contiguous")
    if name == "preserve_format":
        raise RuntimeError("preserve memory format is unsupported by the contiguous operator")
    if name in _CHANNELS_LAST:
        return x if _is_contiguous_as(x, fmt) else _as_channels_last(x, name)
    return x.contiguous()


def clone(input, *, memory_format=None):  # noqa: A002 - torch's name
    """torch.clone: a copy of `input` (its strides kept, or row-major with contiguous_format)."""
    return input.clone(memory_format=memory_format)


def _clone_as(x, fmt):
    """Tensor.clone(memory_format=...) past the default: preserve_format keeps the strides of a
    dense tensor (the default), contiguous_format gives a row-major copy."""
    name = _format_name(fmt, "clone")
    if name in _CHANNELS_LAST:
        return _as_channels_last(x, name) if not _is_contiguous_as(x, fmt) else x.clone()
    if name == "contiguous_format" and not x.is_contiguous():
        return x.contiguous()  # a copy already
    return x.clone()


def _check_device(device, op: str) -> None:
    """Rejects a CUDA device for a factory that builds on the host only."""
    if device is None:
        return
    name = str(device)
    if isinstance(device, int) or not (name == "cpu" or name.startswith("cpu:")):
        from kiln import cuda

        cuda._require()
        raise NotImplementedError(
            f"{op}: device='{name}' is not supported yet; create the tensor on the CPU and "
            f"move it with .to('{name}')"
        )


def _move(t, device):
    """`t` on `device` (None: where it is)."""
    return t if device is None else t.to(device)


def is_tensor(obj) -> bool:
    """True if obj is a kiln.Tensor."""
    return isinstance(obj, Tensor)


def _require_tensor(input, op: str) -> None:
    if not isinstance(input, Tensor):
        raise TypeError(
            f"{op}(): argument 'input' (position 1) must be Tensor, not {type(input).__name__}"
        )


def numel(input) -> int:
    """The number of elements of a tensor."""
    _require_tensor(input, "numel")
    return input.numel()


def is_floating_point(input) -> bool:
    """True if the tensor's dtype is a floating point type."""
    _require_tensor(input, "is_floating_point")
    return input.dtype.is_floating_point


def _share_numpy(arr):
    """A zero-copy tensor over arr, or None when kiln cannot view it (read-only, negative
    strides, non-native byte order)."""
    try:
        return _C.from_numpy(arr)
    except (ValueError, TypeError):
        return None


def as_tensor(data, dtype=None, device=None):
    """Converts data to a tensor, sharing memory with tensors and NumPy arrays when possible.

    A tensor of the requested dtype is returned as is; a NumPy array of a kiln dtype is viewed
    without copying; anything else is copied as by kiln.tensor().
    """
    if isinstance(data, Tensor):
        return _move(data if dtype is None or dtype == data.dtype else data._to_dtype(dtype),
                     device)
    if isinstance(data, _np.ndarray):
        shared = _share_numpy(data)
        if shared is not None:
            t = shared if dtype is None or dtype == shared.dtype else shared._to_dtype(dtype)
            return _move(t, device)
    return _C.tensor(data, dtype=dtype, device=device)


def _shared_view(obj):
    """A zero-copy tensor over obj (a NumPy array or any __dlpack__ producer), else None."""
    if isinstance(obj, _np.ndarray):
        return _share_numpy(obj)
    if hasattr(obj, "__dlpack__") and not isinstance(obj, type):
        try:
            return _C.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError):
            return None
    return None


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=False):
    """torch.asarray: a tensor from obj, sharing memory unless a copy is needed or requested.

    copy=None shares when possible; copy=True always copies; copy=False raises ValueError when
    sharing is impossible (a dtype change, or data that is not a tensor or array).
    """
    if isinstance(obj, Tensor):
        shared = obj
    else:
        shared = _shared_view(obj)
    if shared is not None:
        needs_cast = dtype is not None and dtype != shared.dtype
        if copy is False and needs_cast:
            raise ValueError(
                f"asarray(): copy=False but converting {shared.dtype} to {dtype} requires a copy"
            )
        if needs_cast or copy:
            result = shared._to_dtype(dtype or shared.dtype, bool(copy))
        else:
            result = shared
    else:
        if copy is False:
            raise ValueError(
                f"asarray(): copy=False but a {type(obj).__name__} cannot be shared without "
                "copying; pass copy=None or copy=True"
            )
        result = _C.tensor(obj, dtype=dtype)
    if device is not None:
        result = result.to(device)
    if requires_grad:
        result = result.detach() if result is obj else result
        result.requires_grad_(True)
    return result


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False):
    """An uninitialized tensor with the given sizes and strides (in elements)."""
    _check_device(device, "empty_strided")
    size, stride = tuple(size), tuple(stride)
    if len(size) != len(stride):
        raise RuntimeError(
            f"empty_strided: mismatch in length of strides ({len(stride)}) and shape ({len(size)})"
        )
    if any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise RuntimeError(
            f"empty_strided: sizes {list(size)} and strides {list(stride)} must be non-negative"
        )
    extent = 0 if 0 in size else 1 + sum((n - 1) * s for n, s in zip(size, stride, strict=True))
    base = _C.empty(extent, dtype=dtype)
    result = base.as_strided(size, stride, 0)
    if requires_grad:
        result.requires_grad_(True)
    return result


# ---- dropout ---------------------------------------------------------------------------------


def _check_p(p, op: str, exc=RuntimeError) -> None:
    if p < 0 or p > 1:
        raise exc(f"{op}: dropout probability has to be between 0 and 1, but got {p}")


def dropout(input, p=0.5, training=True, inplace=False, *, train=None, generator=None):
    """torch.dropout: zeroes elements with probability p and scales the rest by 1/(1-p).

    ``train`` is torch.dropout's name for ``training``; either may be given.
    """
    if train is not None:
        training = train
    _check_p(p, "dropout")
    if not training or p == 0:
        return input
    if inplace:
        _C._dropout_(input, float(p), True, generator)
        return input
    return _C._dropout(input, float(p), True, generator)


def dropout_(input, p=0.5, train=True, *, generator=None):
    """In-place torch.dropout_."""
    return dropout(input, p, train, inplace=True, generator=generator)


def _check_floating(input, op: str) -> None:
    if not input.dtype.is_floating_point:
        raise RuntimeError(
            f"{op}: expected a floating point input, got {input.dtype} (result type Float can't "
            f"be cast to the desired output type {input.dtype})"
        )


def _feature_noise(input, p, op, generator):
    """A keep-mask of 0/1 with one draw per channel of (N, C, ...) input: shape (N, C, 1, ...)."""
    if input.dim() < 2:
        raise RuntimeError(
            f"{op}: Feature dropout requires at least 2 dimensions in the input, got shape "
            f"{list(input.shape)}"
        )
    shape = tuple(input.shape[:2]) + (1,) * (input.dim() - 2)
    return _C.empty(shape, dtype=input.dtype).bernoulli_(1.0 - p, generator=generator)


def _apply_noise(input, noise, p, alpha, inplace):
    """input * noise / (1 - p), or the SELU-preserving alpha form; p == 1 zeroes everything."""
    if not alpha:
        scale = noise if p == 1 else noise.mul_(1.0 / (1.0 - p))
        return input.mul_(scale) if inplace else input * scale
    # torch's alpha dropout: dropped units go to the SELU saturation value, then an affine map
    # (a, b) restores zero mean and unit variance.
    selu_sat = 1.7580993408473766
    a = 1.0 / ((selu_sat * selu_sat * p + 1) * (1 - p)) ** 0.5
    b = (noise - 1).mul_(selu_sat * a).add_(selu_sat * a * p)
    noise = noise.mul_(a)
    if inplace:
        return input.mul_(noise).add_(b)
    return input * noise + b


def _dropout_impl(input, p, training, inplace, op, *, feature, alpha, generator=None):
    _check_p(p, op)
    if not training or p == 0:
        return input
    _check_floating(input, op)
    if alpha and p == 1:
        # torch: the output collapses to zeros (the affine map is undefined).
        return input.mul_(0) if inplace else input * 0
    if feature:
        noise = _feature_noise(input, p, op, generator)
    else:
        noise = _C.empty(tuple(input.shape), dtype=input.dtype).bernoulli_(
            1.0 - p, generator=generator
        )
    return _apply_noise(input, noise, p, alpha, inplace)


def alpha_dropout(input, p=0.5, train=False, inplace=False, *, training=None, generator=None):
    """Alpha dropout (for SELU networks): keeps the input's mean and variance."""
    train = train if training is None else training
    return _dropout_impl(
        input, p, train, inplace, "alpha_dropout", feature=False, alpha=True, generator=generator
    )


def feature_dropout(input, p=0.5, train=True, inplace=False, *, training=None, generator=None):
    """Channel-wise dropout of (N, C, ...) input: whole channels are zeroed."""
    train = train if training is None else training
    return _dropout_impl(
        input, p, train, inplace, "feature_dropout", feature=True, alpha=False, generator=generator
    )


def feature_alpha_dropout(
    input, p=0.5, train=False, inplace=False, *, training=None, generator=None
):
    """Channel-wise alpha dropout of (N, C, ...) input."""
    train = train if training is None else training
    return _dropout_impl(
        input,
        p,
        train,
        inplace,
        "feature_alpha_dropout",
        feature=True,
        alpha=True,
        generator=generator,
    )

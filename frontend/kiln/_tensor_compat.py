"""Tensor methods and kiln functions that model code calls for torch compatibility: the
complex-number views of kiln's real dtypes (conj, real, H, mH, is_complex, ...), device and
memory queries (get_device, pin_memory), `type`, and small compositions (ravel, inner, dist,
sum_to_size). kiln has no complex dtypes, so conjugation is the identity, as torch's is on a
real tensor."""

from __future__ import annotations

import kiln
from kiln import _C

__all__ = ["conj", "dist", "inner", "is_complex", "is_conj", "is_neg", "is_nonzero",
           "is_same_size", "isreal", "ravel", "real", "resolve_conj", "resolve_neg"]  # fmt: skip

_TYPE_NAMES = {"float32": "FloatTensor", "float64": "DoubleTensor", "float16": "HalfTensor",
               "bfloat16": "BFloat16Tensor", "int64": "LongTensor", "int32": "IntTensor",
               "int16": "ShortTensor", "int8": "CharTensor", "uint8": "ByteTensor",
               "bool": "BoolTensor"}  # fmt: skip
_TYPE_DTYPES = {name: getattr(_C.dtype, dt) for dt, name in _TYPE_NAMES.items()}


def conj(input):  # noqa: A002 - torch's argument names
    return input


resolve_conj = resolve_neg = real = conj


def is_complex(input) -> bool:  # noqa: A002
    return False


is_conj = is_neg = is_complex


def isreal(input):  # noqa: A002
    return kiln.ones_like(input, dtype=kiln.bool)


def is_nonzero(input) -> bool:  # noqa: A002
    n = input.numel()
    if n != 1:
        raise RuntimeError("Boolean value of Tensor with "
                           f"{'no values' if n == 0 else 'more than one value'} is ambiguous")
    return bool(input.item())


def is_same_size(input, other) -> bool:  # noqa: A002
    return tuple(input.shape) == tuple(other.shape)


def ravel(input):  # noqa: A002
    return input.reshape(-1)


def inner(input, other, *, out=None):  # noqa: A002
    """The sum over the last dims of both (a product with a 0-d operand)."""
    result = input * other if input.dim() == 0 or other.dim() == 0 else kiln.tensordot(
        input, other, dims=([-1], [-1]))
    if out is not None:
        return out.copy_(result)
    return result


def dist(input, other, p=2):  # noqa: A002
    return (input - other).norm(p)


def _sum_to_size(self, *size):
    """Sums broadcast dims away until the tensor has `size` (which it must expand to)."""
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    shape = tuple(self.shape)
    lead = len(shape) - len(size)
    if lead < 0 or any(s not in (1, d) for s, d in zip(size, shape[lead:], strict=False)):
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size {{{list(shape)}}}.")
    dims = [*range(lead)] + [lead + i for i, s in enumerate(size)
                             if s == 1 and shape[lead + i] != 1]  # fmt: skip
    out = self.sum(dims, keepdim=True) if dims else self
    return out.reshape(size)


def _type(self, dtype=None, non_blocking=False, **kwargs):
    """`t.type()`: the legacy type name ('kiln.FloatTensor'); `t.type(dtype)` casts (a dtype
    or such a name, 'torch.' spellings included)."""
    if dtype is None:
        return f"kiln.{_TYPE_NAMES[self.dtype.name]}"
    if isinstance(dtype, str):
        name = dtype.rsplit(".", 1)[-1]
        if name not in _TYPE_DTYPES:
            raise ValueError(f"invalid type: '{dtype}'")
        dtype = _TYPE_DTYPES[name]
    return self.to(dtype)


def _H(self):  # noqa: N802 - torch's name
    if self.dim() not in (0, 2):
        raise RuntimeError("tensor.H is only supported on matrices (2-D tensors). Got "
                           f"{self.dim()}-D tensor.")
    return self.T


def _mH(self):  # noqa: N802 - torch's name
    if self.dim() < 2:
        raise RuntimeError("tensor.mH is only supported on matrices or batches of matrices. Got "
                           f"{self.dim()}-D tensor.")
    return self.mT


def _imag(self):
    raise RuntimeError("imag is not implemented for tensors with non-complex dtypes.")


def _get_device(self) -> int:
    return self.device.index if self.is_cuda else -1


def _check_inplace_view(self, name: str) -> None:
    """torch's rule for in-place metadata changes: a leaf that requires grad refuses them; a
    tensor with autograd history would need its history rebased, which kiln does not do."""
    if self.requires_grad and kiln.is_grad_enabled():
        if self.is_leaf:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                               "operation.")
        raise NotImplementedError(f"{name}() of a tensor with autograd history is not supported; "
                                  f"use the out-of-place form (x = x.{name[:-1]}(...))")


def _inplace_view(name: str):
    """`Tensor.name_`: the tensor becomes its own `name` view (the same storage, new sizes and
    strides), as torch's in-place view ops change only metadata."""

    def method(self, *args, **kwargs):
        _check_inplace_view(self, name + "_")
        self._replace_data(getattr(self, name)(*args, **kwargs))
        return self

    method.__name__ = name + "_"
    return method


def _resize_(self, *sizes, memory_format=None):
    """`Tensor.resize_`: the first elements keep their values in row-major order; growing adds
    zeros (torch leaves them uninitialized); a contiguous tensor that shrinks keeps its storage."""
    _check_inplace_view(self, "resize_")
    sizes = tuple(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else sizes
    n = 1
    for s in sizes:
        if s < 0:
            raise RuntimeError(
                f"Trying to create tensor with negative dimension {s}: {list(sizes)}")
        n *= s
    flat = self.reshape(-1)
    if n <= flat.numel() and self.is_contiguous():
        self._replace_data(flat[:n].view(sizes))
        return self
    grown = kiln.zeros(n, dtype=self.dtype, device=self.device)
    keep = min(n, flat.numel())
    grown[:keep] = flat[:keep]
    self._replace_data(grown.view(sizes))
    return self


def _install() -> None:
    t = _C.Tensor
    for name in ("conj", "resolve_conj", "resolve_neg", "is_complex", "is_conj", "is_neg",
                 "is_nonzero", "is_same_size", "ravel", "inner", "dist"):
        setattr(t, name, globals()[name])
    t.real = property(conj)
    t.imag = property(_imag)
    t.H = property(_H)
    t.mH = property(_mH)
    t.sum_to_size = _sum_to_size
    t.type = _type
    t.get_device = _get_device
    t.is_signed = lambda self: self.dtype.is_signed
    t.pin_memory = lambda self, device=None: self
    t.is_pinned = lambda self, device=None: False
    t.is_inference = lambda self: False
    t.fill_diagonal_ = _fill_diagonal_
    for name in ("unsqueeze", "squeeze", "t", "transpose", "swapdims", "swapaxes", "as_strided"):
        setattr(t, name + "_", _inplace_view(name))
    t.resize_ = _resize_
    t.resize_as_ = lambda self, other, memory_format=None: _resize_(self, tuple(other.shape))



def _fill_diagonal_(self, fill_value, wrap=False):
    """torch's: fills the main diagonal (x[i, i, ..., i]) in place; all dims equal past 2-d. A
    tall matrix with `wrap` starts the diagonal again every `columns + 1` rows, as NumPy's."""
    if self.dim() < 2:
        raise RuntimeError("dimensions must larger than 1")
    if self.dim() > 2 and len(set(self.shape)) != 1:
        raise RuntimeError("all dimensions of input must be of equal length")
    if self.dim() > 2:
        n = self.shape[0]
        diag = self.as_strided((n,), (sum(self.stride()),), self.storage_offset())
        diag.fill_(fill_value)
        return self
    rows, cols = self.shape
    starts = range(0, rows, cols + 1) if wrap and rows > cols else [0]
    for r in starts:
        self[r:r + cols].diagonal().fill_(fill_value)
    return self


_install()

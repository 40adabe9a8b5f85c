"""_ops_composite: torch-namespace ops that are compositions of other kiln ops (see kiln/_ops.py),
written as ATen's composite kernels write them, so autograd and kiln.compile go through their
parts. The Tensor methods of the same names are these functions."""

from __future__ import annotations

import builtins

import kiln
from kiln import _C
from kiln._schema import torch_schema

__all__ = [
    "cdist",
    "cross",
    "diff",
    "kron",
    "logaddexp",
    "rot90",
    "take_along_dim",
    "tensordot",
    "trace",
]


def logaddexp(input, other):  # noqa: A002
    """log(exp(input) + exp(other)) without overflow: max + log1p(exp(-|input - other|)), and
    the infinity itself where both are the same infinity."""
    m = kiln.maximum(input, other)
    same_inf = input.isinf() & (input == other)
    return kiln.where(same_inf, input, m + (-(input - other).abs()).exp().log1p())


def diff(input, n=1, dim=-1, prepend=None, append=None):  # noqa: A002
    """The n-th forward difference along dim (!= for bool tensors), after prepend / append."""
    parts = [t for t in (prepend, input, append) if t is not None]
    x = kiln.cat(parts, dim) if len(parts) > 1 else input
    for _ in range(n):
        length = x.shape[dim]
        if length == 0:
            break
        hi, lo = x.narrow(dim, 1, length - 1), x.narrow(dim, 0, length - 1)
        x = hi != lo if x.dtype == kiln.bool else hi - lo
    return x


def rot90(input, k=1, dims=(0, 1)):  # noqa: A002
    """Rotation by 90 degrees k times in the plane of `dims`, from the first towards the second."""
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    d0, d1 = dims
    k %= 4
    if k == 1:
        return input.flip(d1).transpose(d0, d1)
    if k == 2:
        return input.flip([d0, d1])
    if k == 3:
        return input.flip(d0).transpose(d0, d1)
    return input.clone()


def take_along_dim(input, indices, dim=None):  # noqa: A002
    """input.gather(dim, indices) after broadcasting both except along dim (of the flattened
    input when dim is None)."""
    if dim is None:
        return input.reshape(-1).gather(0, indices.reshape(-1))
    rank = builtins.max(input.dim(), indices.dim())
    dim %= rank
    a = input.reshape((1,) * (rank - input.dim()) + tuple(input.shape))
    i = indices.reshape((1,) * (rank - indices.dim()) + tuple(indices.shape))
    shape = list(kiln.broadcast_shapes(
        tuple(1 if d == dim else s for d, s in enumerate(a.shape)),
        tuple(1 if d == dim else s for d, s in enumerate(i.shape))))  # fmt: skip
    a = a.expand(shape[:dim] + [a.shape[dim]] + shape[dim + 1 :])
    i = i.expand(shape[:dim] + [i.shape[dim]] + shape[dim + 1 :])
    return a.gather(dim, i)


@torch_schema(
    "tensordot(Tensor a, Tensor b, Any dims=2, Tensor? out=None) -> Tensor"
)
def tensordot(a, b, dims=2, out=None):
    """Contracts the last `dims` dims of a with the first of b (or the listed pairs) as one
    matrix product."""
    if out is not None:
        raise TypeError("tensordot(): out= is not supported by kiln")
    if isinstance(dims, int):
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        da, db = list(range(a.dim() - dims, a.dim())), list(range(dims))
    else:
        da, db = ([d] if isinstance(d, int) else list(d) for d in dims)
    da, db = [d % a.dim() for d in da], [d % b.dim() for d in db]
    for x, y in zip(da, db, strict=True):
        if a.shape[x] != b.shape[y]:
            raise RuntimeError(
                f"contracted dimensions need to match, but first has size {a.shape[x]} in dim "
                f"{x} and second has size {b.shape[y]} in dim {y}"
            )
    free_a = [d for d in range(a.dim()) if d not in da]
    free_b = [d for d in range(b.dim()) if d not in db]
    k = 1
    for d in da:
        k *= a.shape[d]
    left = a.permute(*free_a, *da).reshape(-1, k)
    right = b.permute(*db, *free_b).reshape(k, -1)
    return (left @ right).reshape([a.shape[d] for d in free_a] + [b.shape[d] for d in free_b])


def trace(input):  # noqa: A002
    """The sum of a matrix's diagonal."""
    if input.dim() != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.dim()}")
    rows, cols = input.shape
    n = builtins.min(rows, cols)
    return input.reshape(-1)[: n * cols : cols + 1].sum()  # every (cols + 1)-th element


def kron(input, other):  # noqa: A002
    """The Kronecker product: each input element times all of other, laid out block by block."""
    rank = builtins.max(input.dim(), other.dim())
    a = input.reshape((1,) * (rank - input.dim()) + tuple(input.shape))
    b = other.reshape((1,) * (rank - other.dim()) + tuple(other.shape))
    a_shape = [s for d in range(rank) for s in (a.shape[d], 1)]
    b_shape = [s for d in range(rank) for s in (1, b.shape[d])]
    out = a.reshape(a_shape) * b.reshape(b_shape)
    return out.reshape([a.shape[d] * b.shape[d] for d in range(rank)])


def cross(input, other, dim=None):  # noqa: A002
    """The 3-vector cross product along dim (None: the first dim of size 3, as torch.cross)."""
    shape = kiln.broadcast_shapes(input.shape, other.shape)
    if dim is None:
        dim = next((d for d, s in enumerate(shape) if s == 3), None)
        if dim is None:
            raise RuntimeError("no dimension of size 3 in input")
    if shape[dim] != 3:
        raise RuntimeError(
            f"linalg.cross: inputs dimension {dim} must have length 3. Got {shape[dim]}"
        )
    a, b = input.expand(shape), other.expand(shape)
    # components (1, 2, 0) and (2, 0, 1) along dim
    return a.roll(-1, dim) * b.roll(-2, dim) - a.roll(-2, dim) * b.roll(-1, dim)


@torch_schema(
    "cdist(Tensor x1, Tensor x2, float p=2.0, Any compute_mode=None) -> Tensor"
)
def cdist(x1, x2, p=2.0, compute_mode=None):
    """Distances between the rows of x1 [..., P, M] and x2 [..., R, M]: ||x1_i - x2_j||_p."""
    if x1.dim() < 2 or x2.dim() < 2:
        raise RuntimeError("cdist only supports at least 2D tensors")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(
            f"X1 and X2 must have the same number of columns. X1: {x1.shape[-1]} X2: "
            f"{x2.shape[-1]}"
        )
    d = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return d.norm(p=p, dim=-1)


def _unfold(self, dimension, size, step):
    """Tensor.unfold: every window of `size` elements along `dimension`, `step` apart, as a
    new last dim (ViT patches: x.unfold(2, p, p).unfold(3, p, p)). One index_select of the
    windows' positions, so it records autograd and compiles; a copy, not torch's strided view,
    so writes into the result do not reach self."""
    rank = max(self.dim(), 1)
    if not -rank <= dimension < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, "
                         f"{rank - 1}], but got {dimension})")
    dim = dimension % rank
    length = self.shape[dim] if self.dim() else 1
    if size > length:
        raise RuntimeError(f"maximum size for tensor at dimension {dim} is {length} but size is "
                           f"{size}")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    x = self if self.dim() else self.reshape(1)
    windows = (length - size) // step + 1
    starts = kiln.arange(windows, device=x.device) * step
    positions = (starts.unsqueeze(1) + kiln.arange(size, device=x.device)).reshape(-1)
    picked = x.index_select(dim, positions)
    shape = list(x.shape[:dim]) + [windows, size] + list(x.shape[dim + 1:])
    order = [*range(dim + 1), *range(dim + 2, len(shape)), dim + 1]  # the window dim last
    return picked.reshape(shape).permute(order)


def _install_methods():
    for name in ("cross", "diff", "kron", "logaddexp", "rot90", "take_along_dim", "trace"):
        if not hasattr(_C.Tensor, name):
            setattr(_C.Tensor, name, globals()[name])
    if not hasattr(_C.Tensor, "unfold"):
        _C.Tensor.unfold = _unfold


_install_methods()

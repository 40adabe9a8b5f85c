"""kiln.linalg: torch.linalg's norms and products, as compositions of differentiable kiln ops
(so they record autograd and compile like any Python code kiln.compile inlines).

Solves and factorizations (``solve``, ``inv``, ``cholesky``, ``det``, ``slogdet``, ``eigh``,
``solve_triangular``, ...) are kiln._ops_composite_lapack's, over LAPACK-backed table ops.

Norms: ``vector_norm`` (any ord, over any dims), ``matrix_norm`` ('fro', 1, -1, inf, -inf) and
``norm`` (torch's dispatch between them). The spectral and nuclear norms (ord 2, -2, 'nuc')
need singular values, which kiln does not compute yet: they raise NotImplementedError. Products:
``matmul``, ``vecdot``, ``multi_dot`` (cheapest parenthesization), ``cross``, ``diagonal``.
"""

from __future__ import annotations

import math

import kiln
from kiln._C import LinAlgError  # noqa: E402,F401 - torch.linalg.LinAlgError
from kiln._ops_composite_lapack import (  # noqa: E402,F401
    cholesky,
    det,
    eigh,
    eigvalsh,
    inv,
    lstsq,
    matrix_rank,
    pinv,
    qr,
    slogdet,
    solve,
    solve_triangular,
    svd,
    svdvals,
)
from kiln._ops_composite_linalg import matrix_exp, matrix_power  # noqa: E402,F401

__all__ = ["LinAlgError", "cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv",
           "lstsq", "matmul", "matrix_exp", "matrix_norm", "matrix_power", "matrix_rank",
           "multi_dot", "norm", "pinv", "qr", "slogdet", "solve", "solve_triangular", "svd",
           "svdvals", "vecdot", "vector_norm"]  # fmt: skip


_TORCH_NAMES = {"float16": "Half", "bfloat16": "BFloat16", "float32": "Float", "float64": "Double"}


def _cast(x, dtype, op):
    """x in `dtype` (None: as it is); narrowing is refused, as torch refuses it."""
    if dtype is None:
        return x
    if kiln.promote_types(x.dtype, dtype) != dtype:
        names = [_TORCH_NAMES.get(str(d).split(".")[-1], str(d)) for d in (x.dtype, dtype)]
        raise RuntimeError(f"{op}: the dtype of the input ({names[0]}) should be convertible "
                           f"without narrowing to the specified dtype ({names[1]})")
    return x.to(dtype)


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):  # noqa: A002
    """torch.linalg.vector_norm: the `ord`-norm of x flattened (dim None) or over `dim`."""
    if out is not None:
        raise TypeError("linalg.vector_norm: out= is not supported")
    if not x.is_floating_point():
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point tensor as input. Got "
                           f"{str(x.dtype).split('.')[-1].capitalize()}")
    x = _cast(x, dtype, "linalg.vector_norm")
    dims = (dim,) if isinstance(dim, int) else (tuple(dim) if dim is not None else None)
    if dims is None and keepdim:
        return x.norm(p=ord).reshape([1] * x.dim())
    return x.norm(p=ord, dim=dims, keepdim=keepdim) if dims is not None else x.norm(p=ord)


def matrix_norm(a, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):  # noqa: A002
    """torch.linalg.matrix_norm over the two dims `dim` of a (batched) matrix."""
    if out is not None:
        raise TypeError("linalg.matrix_norm: out= is not supported")
    if a.dim() < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 "
                           "dimensions.")
    a = _cast(a, dtype, "linalg.matrix_norm")
    rows, cols = (d % a.dim() for d in dim)
    if rows == cols:
        raise RuntimeError("linalg.matrix_norm: dims must be different")
    if ord == "fro":
        return a.norm(p=2, dim=(rows, cols), keepdim=keepdim)
    if ord in ("nuc", 2, -2):
        raise NotImplementedError(f"linalg.matrix_norm(ord={ord!r}) needs singular values, "
                                  "which kiln does not compute yet")
    if ord not in (1, -1, math.inf, -math.inf):
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    # ord 1: the largest column sum of |a| (sum over rows); inf: the largest row sum
    summed, other = (rows, cols) if abs(ord) == 1 else (cols, rows)
    sums = a.abs().sum(summed, keepdim=True)
    out = sums.amax(other, keepdim=True) if ord > 0 else sums.amin(other, keepdim=True)
    return out if keepdim else out.squeeze((rows, cols))


def norm(a, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):  # noqa: A002
    """torch.linalg.norm: a vector norm for one dim (or a 1-D input), a matrix norm for two
    dims (or a 2-D input with an `ord`), the 2-norm of the flattened input otherwise."""
    if isinstance(dim, int):
        dim = (dim,)
    if dim is not None and len(dim) == 2 or (dim is None and ord is not None and a.dim() == 2):
        return matrix_norm(a, "fro" if ord is None else ord, dim if dim is not None else (-2, -1),
                           keepdim, dtype=dtype, out=out)
    if dim is None and ord is not None and a.dim() != 1:
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be "
                           f"1D or 2D. Got {a.dim()}D.")
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.norm: order {ord} is only supported for matrices")
    return vector_norm(a, 2 if ord is None else ord, dim, keepdim, dtype=dtype, out=out)


def matmul(a, b):
    return kiln.matmul(a, b)


def vecdot(x, y, *, dim=-1):
    """torch.linalg.vecdot: sum(x * y) over `dim` (broadcasting; real tensors)."""
    return (x * y).sum(dim)


def diagonal(a, *, offset=0, dim1=-2, dim2=-1):
    return kiln.diagonal(a, offset, dim1, dim2)


def cross(a, b, *, dim=-1):
    """torch.linalg.cross: the cross product of 3-vectors along `dim` (broadcasting)."""
    if a.shape[dim] != 3 or b.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{a.shape[dim]} and {b.shape[dim]}")
    a, b = kiln.broadcast_tensors(a, b)

    def part(t, i):
        return t.narrow(dim, i, 1)

    return kiln.cat([part(a, 1) * part(b, 2) - part(a, 2) * part(b, 1),
                     part(a, 2) * part(b, 0) - part(a, 0) * part(b, 2),
                     part(a, 0) * part(b, 1) - part(a, 1) * part(b, 0)], dim)


def multi_dot(tensors, *, out=None):
    """torch.linalg.multi_dot: the chain product in the order with the fewest multiplications
    (a first 1-D operand is a row vector, a last one a column vector, as torch)."""
    if out is not None:
        raise TypeError("linalg.multi_dot: out= is not supported")
    ts = list(tensors)
    if len(ts) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(ts)}")
    first_vec, last_vec = ts[0].dim() == 1, ts[-1].dim() == 1
    if first_vec:
        ts[0] = ts[0].unsqueeze(0)
    if last_vec:
        ts[-1] = ts[-1].unsqueeze(1)
    for i, t in enumerate(ts):
        if t.dim() != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {t.dim()}D")
    dims = [ts[0].shape[0]] + [t.shape[1] for t in ts]
    n = len(ts)
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):  # the classic matrix-chain order
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k

    def product(i, j):
        if i == j:
            return ts[i]
        k = split[i][j]
        return product(i, k) @ product(k + 1, j)

    result = product(0, n - 1)
    if first_vec:
        result = result.squeeze(0)
    if last_vec:
        result = result.squeeze(-1)
    return result

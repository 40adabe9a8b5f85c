"""NumPy's products, norms and solvers over kiln's GEMM, reductions and LAPACK-backed ops."""

from __future__ import annotations

import numpy as np

import kiln
from kiln._numpy import _dtypes as _dt
from kiln._numpy._ufuncs import as_tensor, spec


def _pair(a, b):
    dt = _dt.ufunc_result(np.multiply, (spec(a), spec(b)))
    return as_tensor(a, dt), as_tensor(b, dt)


def matmul(x1, x2, /, out=None, **kwargs):
    a, b = _pair(x1, x2)
    r = kiln.matmul(a, b)
    if out is not None:
        out.copy_(r)
        return out
    return r


def dot(a, b, out=None):
    a, b = _pair(a, b)
    if a.dim() == 0 or b.dim() == 0:
        r = a * b
    elif b.dim() <= 2:
        r = kiln.matmul(a, b)
    else:  # N-d: sum over a's last axis and b's second-to-last
        r = kiln.tensordot(a, b, ([a.dim() - 1], [b.dim() - 2]))
    if out is not None:
        out.copy_(r)
        return out
    return r


def vdot(a, b):
    a, b = _pair(a, b)
    return kiln.sum(a.reshape(-1) * b.reshape(-1))


def inner(a, b):
    a, b = _pair(a, b)
    if a.dim() == 0 or b.dim() == 0:
        return a * b
    return kiln.matmul(a, b.transpose(-1, -2)) if b.dim() >= 2 else kiln.matmul(a, b)


def outer(a, b, out=None):
    a, b = _pair(a, b)
    return a.reshape(-1, 1) * b.reshape(1, -1)


def tensordot(a, b, axes=2):
    a, b = _pair(a, b)
    return kiln.tensordot(a, b, axes)


def einsum(subscripts, *operands, out=None, dtype=None, optimize=False, **kwargs):
    if not isinstance(subscripts, str):
        raise NotImplementedError("np.einsum's sublist form is not supported by kiln")
    specs = tuple([spec(o) for o in operands])
    dt = _dt.to_kiln(dtype) if dtype is not None else _dt.common(specs)
    r = kiln.einsum(subscripts, *[as_tensor(o, dt) for o in operands])
    if out is not None:
        out.copy_(r)
        return out
    return r


def norm(x, ord=None, axis=None, keepdims=False):
    x = as_tensor(x, _dt.common((spec(x),)))
    if not _dt.is_float(x.dtype):
        x = x.to(kiln.float64)
    if axis is None and ord is None:
        r = kiln.sqrt(kiln.sum(x * x))
        if keepdims:
            r = r.reshape([1] * x.dim())
        return r
    if axis is None:
        if x.dim() == 1:
            axis = 0
        elif x.dim() == 2:
            axis = (0, 1)
        else:
            raise ValueError("Improper number of dimensions to norm.")
    if isinstance(axis, int) or len(axis) == 1:
        dim = _dt.index_of(axis if isinstance(axis, int) else axis[0], x.dim())
        a = kiln.abs(x)
        if ord is None or ord == 2:
            return kiln.sqrt(kiln.sum(x * x, [dim], keepdims))
        if ord == np.inf:
            return kiln.amax(a, [dim], keepdims)
        if ord == -np.inf:
            return kiln.amin(a, [dim], keepdims)
        if ord == 1:
            return kiln.sum(a, [dim], keepdims)
        if ord == 0:
            return kiln.sum((x != 0).to(x.dtype), [dim], keepdims)
        return kiln.pow(kiln.sum(kiln.pow(a, float(ord)), [dim], keepdims), 1.0 / float(ord))
    dims = [_dt.index_of(a, x.dim()) for a in axis]
    if ord is None or ord == "fro":
        return kiln.sqrt(kiln.sum(x * x, dims, keepdims))
    a = kiln.abs(x)
    if ord == 1 or ord == -1:
        s = kiln.sum(a, [dims[0]], True)
        r = kiln.amax(s, [dims[1]], True) if ord == 1 else kiln.amin(s, [dims[1]], True)
    elif ord == np.inf or ord == -np.inf:
        s = kiln.sum(a, [dims[1]], True)
        r = kiln.amax(s, [dims[0]], True) if ord == np.inf else kiln.amin(s, [dims[0]], True)
    else:
        raise NotImplementedError(f"np.linalg.norm(ord={ord!r}) of a matrix is not supported "
                                  "by kiln")
    if not keepdims:
        r = r.squeeze(max(dims)).squeeze(min(dims))
    return r


# np.linalg's solvers over kiln.linalg's LAPACK-backed ops: NumPy's dtypes (integer input
# computes in float64, float32 stays float32) and NumPy's argument forms.


def _float_operand(a):
    dt = _dt.common((spec(a),))
    if dt == kiln.float16:
        raise TypeError("array type float16 is unsupported in linalg")
    return as_tensor(a, dt if _dt.is_float(dt) else kiln.float64)


def _float_pair(a, b):
    a, b = _float_operand(a), _float_operand(b)
    dt = kiln.promote_types(a.dtype, b.dtype)
    return a.to(dt), b.to(dt)


def solve(a, b):
    """x with a x = b: b is a vector only when 1-d (NumPy 2), else (..., M, K)."""
    a, b = _float_pair(a, b)
    if b.dim() == 1:
        return kiln._linalg_solve(a, b.unsqueeze(-1)).squeeze(-1)
    return kiln._linalg_solve(a, b)


def inv(a):
    return kiln.linalg.inv(_float_operand(a))


def det(a):
    return kiln.linalg.det(_float_operand(a))


def slogdet(a):
    sign, logabsdet = kiln.linalg.slogdet(_float_operand(a))
    return np.linalg._linalg.SlogdetResult(sign, logabsdet)


def cholesky(a, /, *, upper=False):
    return kiln.linalg.cholesky(_float_operand(a), upper=upper)


def eigh(a, UPLO="L"):  # noqa: N803 - NumPy's argument name
    w, v = kiln.linalg.eigh(_float_operand(a), UPLO=UPLO)
    return np.linalg._linalg.EighResult(w, v)


def eigvalsh(a, UPLO="L"):  # noqa: N803
    return kiln.linalg.eigvalsh(_float_operand(a), UPLO=UPLO)


def lstsq(a, b, rcond=None):
    raise NotImplementedError(
        "np.linalg.lstsq runs in NumPy (LAPACK's gelsd): its rank and the shape of its "
        "residuals depend on the data")


FUNCTIONS = {
    np.linalg.solve: solve, np.linalg.inv: inv, np.linalg.det: det, np.linalg.slogdet: slogdet,
    np.linalg.cholesky: cholesky, np.linalg.eigh: eigh, np.linalg.eigvalsh: eigvalsh,
    np.linalg.lstsq: lstsq,
    np.matmul: matmul, np.dot: dot, np.vdot: vdot, np.inner: inner, np.outer: outer,
    np.tensordot: tensordot, np.einsum: einsum, np.linalg.norm: norm,
}

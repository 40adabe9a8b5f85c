"""torch.linalg's solves and factorizations over the LAPACK-backed table ops (ir/ops.def:
linalg_solve, linalg_solve_triangular, linalg_cholesky, linalg_logabsdet, linalg_det_sign,
linalg_eigh_packed). Each op is one library call per matrix, an extern node in compiled code,
with its derivative in autograd/derivatives_linalg.h; this module adds torch's argument forms
(vector right-hand sides, left=False, upper factors, UPLO) around them. The capture inlines it
(its name starts with kiln._ops_composite), so a compiled call is the ops themselves.

svd, qr, lstsq, pinv, matrix_rank and the LU family are kiln-op compositions
(_ops_composite_linalg.py); they are exposed here under torch.linalg's names.
"""

from __future__ import annotations

import collections

import kiln
from kiln._ops_composite_stats import _torch_name
from kiln._ops_reduce import return_types

__all__ = ["cholesky", "cholesky_solve_lapack", "det", "eigh", "eigvalsh", "inv", "logdet",
           "lstsq", "matrix_rank", "pinv", "qr", "slogdet", "solve", "solve_triangular", "svd",
           "svdvals"]  # fmt: skip

for _name, _fields in (("eigh", ("eigenvalues", "eigenvectors")),
                       ("linalg_slogdet", ("sign", "logabsdet")),
                       ("linalg_svd", ("U", "S", "Vh")), ("linalg_qr", ("Q", "R")),
                       ("lstsq", ("solution", "residuals", "rank", "singular_values"))):
    _cls = collections.namedtuple(_name, _fields)
    _cls.__module__, _cls.__qualname__ = "kiln.return_types", _name
    setattr(return_types, _name, _cls)


def _mt(x):
    return x.transpose(-2, -1)


def check_matrix(a, op, square=True):
    """torch's checks of a batch of (square) matrices, worded with torch's function name."""
    if a.dim() < 2:
        raise RuntimeError(f"{op}: The input tensor A must have at least 2 dimensions.")
    if square and a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"{op}: A must be batches of square matrices, but they are "
                           f"{a.shape[-2]} by {a.shape[-1]} matrices")


def check_floating(a, op):
    if not a.is_floating_point():
        raise RuntimeError(f"{op}: Expected a floating point or complex tensor as input. Got "
                           f"{_torch_name(a.dtype)}")


def check_square(A, op):  # noqa: N803
    """A batch of square float matrices, as torch checks it under `op`'s name (the ops check
    again, worded for themselves)."""
    check_matrix(A, op)
    check_floating(A, op)


def _out(result, out):
    return result if out is None else out.copy_(result)


def _is_vector(A, B):  # noqa: N803 - torch's argument names
    """torch.linalg.solve's rule: B is a batch of vectors when it is 1-d or has A's batch
    shape with the last dim dropped."""
    return B.dim() == 1 or (B.dim() == A.dim() - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


def solve(A, B, *, left=True, out=None):  # noqa: N803
    """X with A X = B (X A = B when not left); B may be a vector or a batch of vectors."""
    check_square(A, "linalg.solve")
    if _is_vector(A, B):
        x = kiln._linalg_solve(A if left else _mt(A), B.unsqueeze(-1)).squeeze(-1)
    elif left:
        x = kiln._linalg_solve(A, B)
    else:  # X A = B is A^T X^T = B^T
        x = _mt(kiln._linalg_solve(_mt(A), _mt(B)))
    return _out(x, out)


def inv(A, *, out=None):  # noqa: N803
    """A^-1: the solve of A X = I (LinAlgError for a singular matrix)."""
    check_square(A, "linalg.inv")
    eye = kiln.eye(A.shape[-1], dtype=A.dtype, device=A.device)
    return _out(kiln._linalg_solve(A, eye, inverse=True), out)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False, out=None):  # noqa: N803
    """X with T X = B (X T = B when not left) for the triangle T of A that `upper` names, a unit
    diagonal when unitriangular; batch dims broadcast."""
    check_square(A, "linalg.solve_triangular")
    if B.dim() < 2:
        raise RuntimeError("linalg.solve_triangular: The input tensor B must have at least 2 "
                           "dimensions.")
    if left:
        x = kiln._linalg_solve_triangular(A, B, upper=upper, unitriangular=unitriangular)
    else:
        x = _mt(kiln._linalg_solve_triangular(_mt(A), _mt(B), upper=not upper,
                                              unitriangular=unitriangular))
    return _out(x, out)


def cholesky(A, *, upper=False, out=None):  # noqa: N803
    """L with A = L L^T from A's lower triangle (U = L^T with A = U^T U when upper)."""
    check_square(A, "linalg.cholesky")
    factor = kiln._linalg_cholesky(A)
    return _out(_mt(factor) if upper else factor, out)


def cholesky_solve_lapack(B, L, upper=False):  # noqa: N803
    """X with (L L^T) X = B (U^T U when upper): two triangular solves."""
    if upper:
        y = kiln._linalg_solve_triangular(_mt(L), B, upper=False)
        return kiln._linalg_solve_triangular(L, y, upper=True)
    y = kiln._linalg_solve_triangular(L, B, upper=False)
    return kiln._linalg_solve_triangular(_mt(L), y, upper=True)


def slogdet(A, *, out=None):  # noqa: N803
    """(sign, log|det A|): 0 and -inf for a singular matrix."""
    check_square(A, "linalg.slogdet")
    sign = kiln._linalg_det_sign(A)
    if A.requires_grad:  # torch's sign carries history, with a zero gradient
        sign = sign + ((A - A.detach()) * 0).sum((-2, -1))
    result = return_types.linalg_slogdet(sign, kiln._linalg_logabsdet(A))
    if out is not None:
        out[0].copy_(result[0])
        out[1].copy_(result[1])
    return result


def det(A, *, out=None):  # noqa: N803
    """det A = sign * exp(log|det A|) (its gradient det * A^-T through logabsdet's)."""
    check_square(A, "linalg.det")
    return _out(kiln._linalg_det_sign(A) * kiln._linalg_logabsdet(A).exp(), out)


def logdet(A):  # noqa: N803
    """log det A: NaN for a negative determinant, -inf for a singular matrix."""
    check_square(A, "logdet")
    sign = kiln._linalg_det_sign(A)
    return kiln.where(sign < 0, float("nan"), kiln._linalg_logabsdet(A))


def eigh(A, UPLO="L", *, out=None):  # noqa: N803
    """(eigenvalues ascending, orthonormal eigenvectors as columns) of the symmetric matrix that
    A's lower (UPLO='L') or upper ('U') triangle gives."""
    check_square(A, "linalg.eigh")
    packed = kiln._linalg_eigh_packed(A, upper=_uplo(UPLO))
    result = return_types.eigh(packed[..., 0, :], packed[..., 1:, :])
    if out is not None:
        out[0].copy_(result[0])
        out[1].copy_(result[1])
    return result


def eigvalsh(A, UPLO="L", *, out=None):  # noqa: N803
    """The ascending eigenvalues of eigh."""
    check_square(A, "linalg.eigvalsh")
    return _out(kiln._linalg_eigh_packed(A, upper=_uplo(UPLO))[..., 0, :], out)


def _uplo(UPLO):  # noqa: N803
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return UPLO == "U"


# The compositions of _ops_composite_linalg.py under torch.linalg's names and return types.


def svd(A, full_matrices=True, *, driver=None, out=None):  # noqa: N803
    """(U, S, Vh) with A = U diag(S) Vh (one-sided Jacobi; singular vectors up to sign)."""
    from kiln._ops_composite_linalg import svd as torch_svd

    u, s, v = torch_svd(A, some=not full_matrices)
    return return_types.linalg_svd(u, s, _mt(v))


def svdvals(A, *, driver=None, out=None):  # noqa: N803
    from kiln._ops_composite_linalg import svd as torch_svd

    return _out(torch_svd(A, some=True, compute_uv=False)[1], out)


def qr(A, mode="reduced", *, out=None):  # noqa: N803
    """(Q, R) with A = Q R: mode 'reduced', 'complete', or 'r' (Q empty)."""
    from kiln._ops_composite_linalg import qr as torch_qr

    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           "'reduced' (default), 'r', or 'complete'")
    q, r = torch_qr(A, some=mode != "complete")
    if mode == "r":
        q = A.new_empty(0)
    return return_types.linalg_qr(q, r)


def lstsq(A, B, rcond=None, *, driver=None):  # noqa: N803
    """The least-squares solution of A X = B for full-rank A: through A = Q R when A is tall,
    the minimum-norm A^T (A A^T)^-1 B when it is wide. residuals, rank and singular_values are
    empty, as torch's default CPU driver (gelsy) leaves them."""
    vector = B.dim() == A.dim() - 1
    b = B.unsqueeze(-1) if vector else B
    m, n = A.shape[-2], A.shape[-1]
    if m >= n:
        q, r = qr(A)
        x = kiln._linalg_solve_triangular(r, _mt(q) @ b, upper=True)
    else:
        x = _mt(A) @ kiln._linalg_solve(A @ _mt(A), b)
    if vector:
        x = x.squeeze(-1)
    empty = A.new_empty(0)
    return return_types.lstsq(x, empty, A.new_empty(0, dtype=kiln.int64), empty)


def pinv(A, *, atol=None, rtol=None, hermitian=False, out=None):  # noqa: N803
    from kiln._ops_composite_linalg import pinverse

    rcond = 1e-15 if rtol is None else rtol
    return _out(pinverse(A, rcond=rcond), out)


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False, out=None):  # noqa: N803
    """The number of singular values above max(atol, rtol * the largest); rtol defaults to
    eps * max(m, n) as torch's."""
    s = svdvals(A)
    if rtol is None and atol is None:
        rtol = kiln.finfo(A.dtype).eps * max(A.shape[-2], A.shape[-1])
    tol = s.amax(-1, keepdim=True) * (rtol or 0.0)
    if atol is not None:
        tol = kiln.clamp(tol, min=atol)
    return _out((s > tol).sum(-1), out)

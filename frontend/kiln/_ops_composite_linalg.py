"""torch's top-level matrix functions: det, logdet, slogdet, inverse, cholesky and the
triangular solves go to the LAPACK-backed ops (kiln._ops_composite_lapack); pinverse,
matrix_power, matrix_exp, cholesky_solve, cholesky_inverse, lu, lu_unpack, lu_solve,
triangular_solve, svd, qr, addbmm, addr and chain_matmul are written in kiln ops over them. The
capture inlines them (kiln/_capture/calls.py) and autograd goes through their parts, so each is
differentiable wherever its steps are.

The factorizations follow LAPACK's conventions so their results are torch's, not just valid
ones: LU with partial pivoting on the first largest |pivot| (1-based int32 pivots), QR by
Householder reflections with beta = -sign(alpha) * norm (R's diagonal signs are LAPACK's). LU
and QR are loops over columns of whole-batch steps, O(n) kiln ops deep.
The SVD is one-sided Jacobi (Hestenes) with a round-robin order that rotates n/2 disjoint
column pairs per step; U comes from a QR of the converged columns so it stays orthonormal for
rank-deficient input. Singular vectors are unique only up to sign, so they may differ from
LAPACK's by a sign per pair. matrix_exp scales the matrix to 1-norm <= 1, evaluates the degree-18
Taylor polynomial (Paterson-Stockmeyer, 7 products) and squares back.
"""

from __future__ import annotations

import builtins
import collections
import math

import kiln
from kiln import _ops_composite_lapack as _lapack
from kiln._ops_composite_lapack import check_floating as _check_floating
from kiln._ops_composite_lapack import check_matrix as _check_matrix
from kiln._ops_composite_math import inplace_method
from kiln._ops_composite_stats import _torch_name
from kiln._ops_reduce import return_types

__all__ = ["addbmm", "addr", "chain_matmul", "cholesky", "cholesky_inverse", "cholesky_solve",
           "det", "inverse", "logdet", "lstsq", "lu", "lu_solve", "lu_unpack", "matrix_exp",
           "matrix_power", "pinverse", "qr", "slogdet", "svd", "triangular_solve"]  # fmt: skip

for _name, _fields in (("slogdet", ("sign", "logabsdet")), ("svd", ("U", "S", "V")),
                       ("qr", ("Q", "R")), ("triangular_solve", ("solution", "cloned_coefficient")),
                       ("lu_unpack", ("P", "L", "U")),
                       ("_lu_with_info", ("LU", "pivots", "info"))):  # fmt: skip
    _cls = collections.namedtuple(_name, _fields)
    _cls.__module__, _cls.__qualname__ = "kiln.return_types", _name
    setattr(return_types, _name, _cls)


LinAlgError = kiln._C.LinAlgError  # torch.linalg.LinAlgError, raised by the LAPACK-backed ops


def _check_kernel_dtype(a, kernel):
    if not a.is_floating_point():
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_torch_name(a.dtype)}'")


def _eye(n, like, batch=(), width=None):
    """The identity (n x width) as a comparison of aranges, which kiln.compile fuses."""
    rows = kiln.arange(n, device=like.device).unsqueeze(-1)
    eye = (rows == kiln.arange(n if width is None else width, device=like.device)).to(like.dtype)
    return eye.expand(*batch, *eye.shape)


def _diagonal(x):
    """The main diagonal of (..., m, n) matrices, as a masked sum kiln.compile fuses."""
    k = builtins.min(x.shape[-2], x.shape[-1])
    square = x.narrow(-2, 0, k).narrow(-1, 0, k)
    rows = kiln.arange(k, device=x.device).unsqueeze(-1)
    return kiln.where(rows == kiln.arange(k, device=x.device), square, 0).sum(-1)


# ---------------------------------------------------------------------------------------------
# LU and triangular solves


def _lu(a):
    """LAPACK's getrf on (..., m, n): (L and U packed, 0-based pivot rows (..., k), the row
    permutation (..., m) with a[perm] = L U). A zero pivot column is left as it is."""
    m, n = a.shape[-2], a.shape[-1]
    rows = kiln.arange(m, device=a.device)
    cols = kiln.arange(n, device=a.device)
    perm = rows.expand(*a.shape[:-2], m)
    pivots = []
    for j in range(builtins.min(m, n)):
        candidates = kiln.where(rows >= j, a.narrow(-1, j, 1).squeeze(-1).abs(), -1)
        p = candidates.argmax(-1, keepdim=True)
        pivots.append(p)
        source = kiln.where(rows == j, p, kiln.where(rows == p, j, rows))
        a = a.gather(-2, source.unsqueeze(-1).expand(a.shape))
        perm = perm.gather(-1, source)
        pivot = a.narrow(-2, j, 1).narrow(-1, j, 1)
        below = (rows > j).unsqueeze(-1)
        nonzero = pivot != 0
        multipliers = kiln.where(below & nonzero,
                                 a.narrow(-1, j, 1) / kiln.where(nonzero, pivot, 1), 0)
        a = a - multipliers * kiln.where(cols > j, a.narrow(-2, j, 1), 0)
        a = kiln.where(below & (cols == j), multipliers, a)
    pivots = kiln.cat(pivots, -1) if pivots else kiln.zeros(*a.shape[:-2], 0, dtype=kiln.int64,
                                                            device=a.device)  # fmt: skip
    return a, pivots, perm


def _trisolve(t, b, upper, unit=False):
    """X with T X = B for the triangle of T (..., n, n) that `upper` names, B (..., n, k)."""
    return kiln._linalg_solve_triangular(t, b, upper=upper, unitriangular=unit)


def _lu_solve_packed(lu, perm, b):
    """A^-1 b from A's packed LU and row permutation."""
    batch = kiln.broadcast_shapes(lu.shape[:-2], b.shape[:-2], perm.shape[:-1])
    b = b.expand(*batch, *b.shape[-2:])
    permuted = b.gather(-2, perm.expand(*batch, perm.shape[-1]).unsqueeze(-1).expand(b.shape))
    return _trisolve(lu, _trisolve(lu, permuted, upper=False, unit=True), upper=True)


def slogdet(input):  # noqa: A002
    """(sign, log |det|) of square matrices, through LAPACK's LU: sign 0 and -inf when
    singular."""
    _lapack.check_square(input, "linalg.slogdet")
    sign, logabsdet = _lapack.slogdet(input)
    return return_types.slogdet(sign, logabsdet)


def det(input):  # noqa: A002
    return _lapack.det(input)


def logdet(input):  # noqa: A002
    return _lapack.logdet(input)


def inverse(input, *, out=None):  # noqa: A002
    """The inverse, raising LinAlgError for a singular matrix."""
    return _lapack.inv(input, out=out)


def matrix_power(input, n, *, out=None):  # noqa: A002
    """input^n by repeated squaring (the inverse's power for n < 0; the identity for 0)."""
    _check_matrix(input, "linalg.matrix_power")
    if n == 0:
        result = _eye(input.shape[-1], input, input.shape[:-2]).clone()
    else:
        base = inverse(input) if n < 0 else input
        n, result, power = abs(n), None, None
        while n:  # low bit first, as torch multiplies
            bit, n = n & 1, n >> 1
            power = base if power is None else power @ power
            if bit:
                result = power if result is None else result @ power
        result = result.clone() if result is input else result
    return result if out is None else out.copy_(result)


_TAYLOR_DEGREE = {kiln.float64: 18, kiln.float32: 12, kiln.float16: 8, kiln.bfloat16: 6}


def matrix_exp(A):  # noqa: N803 - torch's argument name
    """e^A by scaling and squaring a Taylor polynomial: A / 2^s has 1-norm at most 1, where the
    degree-18 remainder is below float64's epsilon."""
    _check_matrix(A, "linalg.matrix_exp")
    _check_floating(A, "linalg.matrix_exp")
    n = A.shape[-1]
    if n == 0:
        return A.clone()
    norm = A.abs().sum(-2).amax(-1)  # s below is a ceil: no gradient flows through it
    s = norm.log2().ceil().clamp(min=0)
    s = kiln.where(s.isfinite(), s, 0)
    x = A * (-s).exp2().unsqueeze(-1).unsqueeze(-1)
    degree = _TAYLOR_DEGREE.get(A.dtype, 18)
    coefficients = [1 / math.factorial(i) for i in range(degree + 1)]
    eye = _eye(n, A)
    powers = [eye, x, x @ x, None, None]
    powers[3] = powers[2] @ x
    powers[4] = powers[2] @ powers[2]
    blocks = []
    for start in range(0, degree + 1, 4):  # Paterson-Stockmeyer: Horner in x^4 over 4-term blocks
        block = coefficients[start] * eye
        for i in range(1, 4):
            if start + i <= degree:
                block = block + coefficients[start + i] * powers[i]
        blocks.append(block)
    result = blocks[-1]
    for block in reversed(blocks[:-1]):
        result = result @ powers[4] + block
    squarings = int(s.amax()) if s.numel() else 0
    steps = s.unsqueeze(-1).unsqueeze(-1)
    for k in range(squarings):
        result = kiln.where(steps > k, result @ result, result)
    return result


# ---------------------------------------------------------------------------------------------
# Cholesky


def cholesky(input, upper=False, *, out=None):  # noqa: A002
    """L with input = L L^T from input's lower triangle (U with U^T U when upper)."""
    _check_matrix(input, "cholesky")
    _check_kernel_dtype(input, "cholesky_cpu")
    return _lapack.cholesky(input, upper=upper, out=out)


def _check_factor_pair(b, factor, op, kernel):
    if b.dim() < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {b.dim()} dimensions "
                           "instead")
    if factor.dim() < 2:
        raise RuntimeError(f"A should have at least 2 dimensions, but has {factor.dim()} "
                           "dimensions instead")
    if factor.shape[-1] != factor.shape[-2]:
        raise RuntimeError(f"A must be batches of square matrices, but they are "
                           f"{factor.shape[-2]} by {factor.shape[-1]} matrices")
    if factor.shape[-1] != b.shape[-2]:
        n = factor.shape[-1]
        raise RuntimeError(f"Incompatible matrix sizes for {op}: each A matrix is {n} by {n} but "
                           f"each b matrix is {b.shape[-2]} by {b.shape[-1]}")
    if b.dtype != factor.dtype:
        raise RuntimeError(f"Expected b and A to have the same dtype, but found b of type "
                           f"{_torch_name(b.dtype)} and A of type {_torch_name(factor.dtype)} "
                           "instead.")
    _check_kernel_dtype(b, kernel)


def _spd_solve(factor, b, upper):
    """A^-1 b for A = L L^T (U^T U when upper) through two triangular solves."""
    if upper:
        return _trisolve(factor, _trisolve(factor.mT, b, upper=False), upper=True)
    return _trisolve(factor.mT, _trisolve(factor, b, upper=False), upper=True)


def _factor_gradient(x, factor, upper):
    """x = A^-1 B computed from the detached factor, plus a zero whose gradient is
    -A^-1 dA x: the derivative through the whole factor (both triangles), as torch's
    cholesky_solve and cholesky_inverse backward formulas give it."""
    if not factor.requires_grad:
        return x
    fixed = factor.detach()
    delta = factor - fixed
    d_a = delta.mT @ fixed + fixed.mT @ delta if upper else delta @ fixed.mT + fixed @ delta.mT
    return x - _spd_solve(fixed, d_a @ x.detach(), upper)


def cholesky_solve(B, L, upper=False, *, out=None):  # noqa: N803 - torch's argument names
    """X with (L L^T) X = B, from the Cholesky factor L (U with U^T U when upper)."""
    _check_factor_pair(B, L, "cholesky_solve", "cholesky_solve_cpu")
    result = _factor_gradient(_spd_solve(L.detach(), B, upper), L, upper)
    return result if out is None else out.copy_(result)


def cholesky_inverse(L, upper=False, *, out=None):  # noqa: N803
    """(L L^T)^-1 from the Cholesky factor L (U with U^T U when upper)."""
    _check_matrix(L, "cholesky_inverse")
    _check_kernel_dtype(L, "cholesky_inverse_out_cpu")
    eye = _eye(L.shape[-1], L, L.shape[:-2])
    result = _factor_gradient(_spd_solve(L.detach(), eye, upper), L, upper)
    return result if out is None else out.copy_(result)


def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False, *, out=None):  # noqa: N803
    """(X, A) with A X = b (A^T X = b when transpose) for the triangle of A that `upper`
    names (a unit diagonal when unitriangular); batch dims broadcast."""
    if b.dim() < 2:
        raise RuntimeError("torch.triangular_solve: Expected b to have at least 2 dimensions, but "
                           f"it has {b.dim()} dimensions instead")
    if A.dim() < 2:
        raise RuntimeError("torch.triangular_solve: Expected A to have at least 2 dimensions, but "
                           f"it has {A.dim()} dimensions instead")
    _check_factor_pair(b, A, "triangular_solve", "triangular_solve_cpu")
    batch = kiln.broadcast_shapes(b.shape[:-2], A.shape[:-2])
    a = A.expand(*batch, *A.shape[-2:])
    t = a.mT if transpose else a
    solution = _trisolve(t, b, upper != transpose, unitriangular)
    if out is not None:
        out[0].copy_(solution)
        out[1].copy_(a)
    return return_types.triangular_solve(solution, a.clone())


def lu(A, pivot=True, get_infos=False, out=None):  # noqa: N803
    """(LU packed, 1-based int32 pivots[, info]) as LAPACK's getrf gives them; info is the
    1-based index of the first zero pivot (0 when none)."""
    if A.dim() < 2:
        raise RuntimeError("torch.lu_factor: Expected tensor with 2 or more dimensions. Got "
                           f"size: {list(A.shape)} instead")
    if not pivot:
        raise RuntimeError("linalg.lu_factor: LU without pivoting is not implemented on the CPU")
    _check_kernel_dtype(A, "lu_cpu")
    packed, pivots, _ = _lu(A)
    pivots = (pivots + 1).to(kiln.int32)
    if not get_infos:
        return packed, pivots
    zero = _diagonal(packed) == 0
    first = kiln.where(zero, kiln.arange(zero.shape[-1], device=A.device) + 1, zero.shape[-1] + 1)
    first = first.amin(-1) if zero.shape[-1] else kiln.zeros(zero.shape[:-1], dtype=kiln.int64)
    info = kiln.where(first > zero.shape[-1], 0, first).to(kiln.int32)
    return return_types._lu_with_info(packed, pivots, info)


def _permutation(pivots, m):
    """The row order (..., m) that LAPACK's 1-based pivots (..., k) swap arange(m) into."""
    rows = kiln.arange(m, device=pivots.device)
    perm = rows.expand(*pivots.shape[:-1], m)
    for j in range(pivots.shape[-1]):
        p = pivots.narrow(-1, j, 1).long() - 1
        here, there = perm.narrow(-1, j, 1), perm.gather(-1, p)
        perm = kiln.where(rows == j, there, kiln.where(rows == p, here, perm))
    return perm


def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True, *, out=None):  # noqa: N803
    """(P, L, U) with A = P L U from torch.lu's packed factors."""
    m, n = LU_data.shape[-2], LU_data.shape[-1]
    k = builtins.min(m, n)
    empty = kiln.empty(0, dtype=LU_data.dtype, device=LU_data.device)
    p = l_ = u = empty
    if unpack_data:
        l_ = LU_data.narrow(-1, 0, k).tril(-1) + _eye(m, LU_data, width=k)
        u = LU_data.narrow(-2, 0, k).triu()
    if unpack_pivots:
        perm = _permutation(LU_pivots, m)
        eye = _eye(m, LU_data, perm.shape[:-1])
        p = eye.gather(-1, perm.unsqueeze(-2).expand(eye.shape))
    return return_types.lu_unpack(p, l_, u)


def lu_solve(b, LU_data, LU_pivots, *, out=None):  # noqa: N803
    """X with A X = b from A's torch.lu factors."""
    if b.dim() < 2:
        raise RuntimeError("linalg.lu_solve: The input tensor B must have at least 2 dimensions.")
    n = LU_data.shape[-1]
    if b.shape[-2] != n:
        raise RuntimeError("linalg.lu_solve: Incompatible shapes of A and B for the equation "
                           f"AX = B ({n}x{n} and {b.shape[-2]}x{b.shape[-1]})")
    result = _lu_solve_packed(LU_data, _permutation(LU_pivots, n), b)
    return result if out is None else out.copy_(result)


# ---------------------------------------------------------------------------------------------
# QR and SVD


def _householder_qr(a, complete):
    """(Q, R) by LAPACK's geqrf reflectors H_j = I - tau v v^T (v_j = 1): R's diagonal is
    -sign(alpha) |x|, and a column already zero below the diagonal is left as it is."""
    m, n = a.shape[-2], a.shape[-1]
    k = builtins.min(m, n)
    rows = kiln.arange(m, device=a.device).unsqueeze(-1)
    cols = kiln.arange(n, device=a.device)
    r, reflectors = a, []
    for j in range(k):
        x = r.narrow(-1, j, 1)
        alpha = x.narrow(-2, j, 1)
        tail = kiln.where(rows > j, x, 0)
        squares = (tail * tail).sum(-2, keepdim=True)
        trivial = squares == 0
        norm = (alpha * alpha + kiln.where(trivial, 1, squares)).sqrt()
        beta = kiln.where(alpha >= 0, -norm, norm)
        tau = kiln.where(trivial, 0, (beta - alpha) / beta)
        v = kiln.where(rows == j, 1, tail / kiln.where(trivial, 1, alpha - beta))
        r = r - tau * v * (v.mT @ r)
        exact = kiln.where(rows == j, kiln.where(trivial, alpha, beta), kiln.where(rows > j, 0, r))
        r = kiln.where(cols == j, exact, r)
        reflectors.append((v, tau))
    width = m if complete else k
    q = _eye(m, a, a.shape[:-2], width)
    for v, tau in reversed(reflectors):
        q = q - tau * v * (v.mT @ q)
    return q, (r if complete else r.narrow(-2, 0, k))


def qr(input, some=True, *, out=None):  # noqa: A002
    """(Q, R) with input = Q R: Q m x k and R k x n (Q m x m and R m x n when not some)."""
    _check_matrix(input, "linalg.qr", square=False)
    _check_floating(input, "linalg.qr")
    q, r = _householder_qr(input, complete=not some)
    if out is not None:
        out[0].copy_(q)
        out[1].copy_(r)
    return return_types.qr(q, r)


_JACOBI_SWEEPS = 40


def _round_robin(n):
    """Per step of a sweep, the disjoint pairs (p, q) that meet, every pair once a sweep."""
    players = list(range(n)) + ([None] if n % 2 else [])
    count = len(players)
    rounds = []
    for _ in range(count - 1):
        pairs = [(players[i], players[count - 1 - i]) for i in range(count // 2)]
        rounds.append([(p, q) for p, q in pairs if p is not None and q is not None])
        players = [players[0], players[-1], *players[1:-1]]
    return [r for r in rounds if r]


def _rotate(x, p, q, others, back, c, s):
    """x's columns p and q turned by the Givens rotations (c, s); the others kept."""
    xp, xq = x.index_select(-1, p), x.index_select(-1, q)
    parts = [c * xp - s * xq, s * xp + c * xq]
    if others is not None:
        parts.append(x.index_select(-1, others))
    return kiln.cat(parts, -1).index_select(-1, back)


def _jacobi(w):
    """(W V, V) with V orthogonal and the columns of W V orthogonal, for w (..., m, n),
    m >= n: sweeps of rotations, each zeroing one pair's inner product, until every pair's
    cosine is below m * eps."""
    n = w.shape[-1]
    v = _eye(n, w, w.shape[:-2])
    tolerance = kiln.finfo(w.dtype).eps * w.shape[-2]
    plans = []
    for pairs in _round_robin(n):
        p, q = [i for i, _ in pairs], [j for _, j in pairs]
        others = [c for c in range(n) if c not in p and c not in q]
        order = p + q + others
        as_index = [kiln.tensor(i, dtype=kiln.int64, device=w.device)
                    for i in (p, q, others, [order.index(c) for c in range(n)])]  # fmt: skip
        as_index[2] = as_index[2] if others else None
        plans.append(as_index)
    for _ in range(_JACOBI_SWEEPS):
        worst = []
        for p, q, others, back in plans:
            wp, wq = w.index_select(-1, p), w.index_select(-1, q)
            alpha, beta, gamma = (wp * wp).sum(-2), (wq * wq).sum(-2), (wp * wq).sum(-2)
            flat = gamma == 0
            zeta = (beta - alpha) / (2 * kiln.where(flat, 1, gamma))
            t = kiln.where(zeta >= 0, 1.0, -1.0) / (zeta.abs() + (1 + zeta * zeta).sqrt())
            t = kiln.where(flat, 0, t)  # the smaller angle: t = tan(theta), |theta| <= pi/4
            c = 1 / (1 + t * t).sqrt()
            s = (c * t).unsqueeze(-2)
            c = c.unsqueeze(-2)
            w = _rotate(w, p, q, others, back, c, s)
            v = _rotate(v, p, q, others, back, c, s)
            scale = (alpha * beta).detach().sqrt()
            positive = scale > 0
            worst.append(kiln.where(positive, gamma.detach().abs() / kiln.where(positive, scale, 1),
                                    0).reshape(-1))
        if not plans or float(kiln.cat(worst).amax()) <= tolerance:
            break
    return w, v


def _svd(a, full):
    """(U, S, V) with a = U diag(S) V^T, S descending."""
    m, n = a.shape[-2], a.shape[-1]
    if m < n:
        u, s, v = _svd(a.mT, full)
        return v, s, u
    batch = a.shape[:-2]
    if n == 0:
        u = _eye(m, a, batch).narrow(-1, 0, m if full else 0).clone()
        return u, a.new_zeros(*batch, 0), a.new_zeros(*batch, 0, 0)
    w, v = _jacobi(a)
    s = (w * w).sum(-2).sqrt()
    order = s.detach().argsort(-1, descending=True)
    s = s.gather(-1, order)
    w = w.gather(-1, order.unsqueeze(-2).expand(w.shape))
    v = v.gather(-1, order.unsqueeze(-2).expand(v.shape))
    q, r = _householder_qr(w, complete=full)
    signs = kiln.where(_diagonal(r) < 0, -1.0, 1.0).to(a.dtype)
    if full and m > n:
        signs = kiln.cat([signs, kiln.ones(*batch, m - n, dtype=a.dtype, device=a.device)], -1)
    return q * signs.unsqueeze(-2), s, v


def svd(input, some=True, compute_uv=True, *, out=None):  # noqa: A002
    """torch.svd: (U, S, V) with input = U diag(S) V^T (V, not V^T); U and V are m x k and
    n x k (square when not some), or zeros when not compute_uv."""
    if input.dim() < 2:
        raise RuntimeError("linalg.svd: input should have at least 2 dimensions, but has "
                           f"{input.dim()} dimensions instead")
    _check_floating(input, "linalg.svd")
    u, s, v = _svd(input, full=not some)
    if not compute_uv:
        m, n = input.shape[-2], input.shape[-1]
        u = input.new_zeros(*input.shape[:-2], m, m)
        v = input.new_zeros(*input.shape[:-2], n, n)
    if out is not None:
        for dst, src in zip(out, (u, s, v), strict=True):
            dst.copy_(src)
    return return_types.svd(u, s, v)


def pinverse(input, rcond=1e-15):  # noqa: A002
    """The Moore-Penrose pseudo-inverse: singular values at most rcond * the largest are
    treated as zero."""
    if input.dim() < 2 or not input.is_floating_point():
        raise RuntimeError(f"linalg.pinv({_torch_name(input.dtype)}{{{list(input.shape)}}}): "
                           "expected a tensor with 2 or more dimensions of float, double, cfloat "
                           "or cdouble types")
    m, n = input.shape[-2], input.shape[-1]
    if m == 0 or n == 0:
        return input.new_zeros(*input.shape[:-2], n, m)
    u, s, v = _svd(input, full=False)
    cutoff = rcond * s.narrow(-1, 0, 1)
    inverted = kiln.where(s > cutoff, 1 / kiln.where(s > cutoff, s, 1), 0)
    return (v * inverted.unsqueeze(-2)) @ u.mT


def lstsq(input, A, *, out=None):  # noqa: A002, N803
    """torch.lstsq was removed in favour of torch.linalg.lstsq; it raises, as torch's does."""
    raise RuntimeError(
        "This function was deprecated since version 1.9 and is now removed. `torch.lstsq` is "
        "deprecated in favor of `torch.linalg.lstsq`.\n`torch.linalg.lstsq` has reversed "
        "arguments and does not return the QR decomposition in the returned tuple (although it "
        "returns other information about the problem).\n\nTo get the QR decomposition consider "
        "using `torch.linalg.qr`.\n\nThe returned solution in `torch.lstsq` stored the residuals "
        "of the solution in the last m - n columns of the returned value whenever m > n. In "
        "torch.linalg.lstsq, the residuals are in the field 'residuals' of the returned named "
        "tuple.\n\nThe unpacking of the solution, as in\nX, _ = torch.lstsq(B, A).solution[:"
        "A.size(1)]\nshould be replaced with:\nX = torch.linalg.lstsq(A, B).solution")


# ---------------------------------------------------------------------------------------------
# products


def _expand(input, shape):  # noqa: A002
    """input broadcast to `shape`, with torch's message where it cannot be."""
    shape = list(shape)
    offset = len(shape) - input.dim()
    for d, size in enumerate(shape):
        existing = input.shape[d - offset] if d >= offset else 1
        if existing not in (1, size):
            raise RuntimeError(f"The expanded size of the tensor ({size}) must match the existing "
                               f"size ({existing}) at non-singleton dimension {d}.  Target sizes: "
                               f"{shape}.  Tensor sizes: {list(input.shape)}")
    return input.expand(shape)


def _scaled_sum(input, product, beta, alpha):
    """beta * input + alpha * product, input ignored (NaN included) when beta is 0."""
    scaled = product if alpha == 1 else product * alpha
    if beta == 0:
        return scaled
    return scaled + (input if beta == 1 else input * beta)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):  # noqa: A002
    """beta * input + alpha * sum_b batch1[b] @ batch2[b], as one product over the joined
    batch and inner dims."""
    if batch1.dim() >= 2 and batch2.dim() >= 3:  # torch broadcasts input first
        _expand(input, (batch1.shape[1], batch2.shape[2]))
    for name, t in (("batch1", batch1), ("batch2", batch2)):
        if t.dim() != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    if batch1.shape[0] != batch2.shape[0]:
        raise RuntimeError("batch1 and batch2 must have same number of batches, got "
                           f"{batch1.shape[0]} and {batch2.shape[0]}")
    b, n, k = batch1.shape
    if batch2.shape[1] != k:
        raise RuntimeError(f"Incompatible matrix sizes for bmm ({n}x{k} and {batch2.shape[1]}x"
                           f"{batch2.shape[2]})")
    for first, second in ((input, batch1), (batch1, batch2)):
        if first.dtype != second.dtype:
            raise RuntimeError("self and mat2 must have the same dtype, but got "
                               f"{_torch_name(first.dtype)} and {_torch_name(second.dtype)}")
    if not input.is_floating_point():
        beta, alpha = int(beta), int(alpha)
    p = batch2.shape[2]
    target = _expand(input, (n, p))
    product = batch1.permute(1, 0, 2).reshape(n, b * k) @ batch2.reshape(b * k, p)
    result = _scaled_sum(target, product, beta, alpha)
    return result if out is None else out.copy_(result)


def addr(input, vec1, vec2, *, beta=1, alpha=1, out=None):  # noqa: A002
    """beta * input + alpha * the outer product of vec1 and vec2 (or and / or for bools)."""
    for name, t in (("vec1", vec1), ("vec2", vec2)):
        if t.dim() != 1:
            raise RuntimeError(f"addr: Expected 1-D argument {name}, but got {t.dim()}-D")
    dtype = kiln.promote_types(kiln.promote_types(input.dtype, vec1.dtype), vec2.dtype)
    if dtype == kiln.bool:
        outer = vec1.unsqueeze(1) & vec2.unsqueeze(0)
        target = _expand(input, outer.shape)
        result = (target & bool(beta)) | (outer & bool(alpha))
        return result if out is None else out.copy_(result)
    if not dtype.is_floating_point:
        for name, v in (("beta", beta), ("alpha", alpha)):
            if isinstance(v, float):
                raise RuntimeError(f"For integral input tensors, argument {name} must not be a "
                                   "floating point number.")
    outer = vec1.unsqueeze(1) * vec2.unsqueeze(0)
    result = _scaled_sum(_expand(input, outer.shape), outer, beta, alpha).to(dtype)
    return result if out is None else out.copy_(result)


def chain_matmul(*matrices, out=None):
    """The product of 2-D matrices in the cheapest order (linalg.multi_dot)."""
    if not matrices:
        raise RuntimeError("chain_matmul(): Expected one or more matrices")
    for t in matrices:
        if t.dim() != 2:
            raise RuntimeError(f"Tensor dimension is {t.dim()}, expected 2 instead.")
    for i in range(len(matrices) - 1):
        a, b = matrices[i], matrices[i + 1]
        if a.shape[1] != b.shape[0]:
            raise RuntimeError(f"multi_dot(): tensors {i} and {i + 1} with shapes "
                               f"{list(a.shape)} and {list(b.shape)} cannot be multiplied")
    result = matrices[0].clone() if len(matrices) == 1 else kiln.linalg.multi_dot(matrices)
    return result if out is None else out.copy_(result)


def _triangular_solve_method(self, A, upper=True, transpose=False, unitriangular=False):  # noqa: N803
    return triangular_solve(self, A, upper, transpose, unitriangular)


def _lu_method(self, pivot=True, get_infos=False):
    return lu(self, pivot, get_infos)


def _install_methods():
    methods = {name: globals()[name] for name in (
        "addbmm", "addr", "cholesky", "cholesky_inverse", "cholesky_solve", "det", "inverse",
        "logdet", "lu_solve", "matrix_exp", "matrix_power", "pinverse", "qr", "slogdet", "svd")}
    methods["triangular_solve"] = _triangular_solve_method
    methods["lu"] = _lu_method
    methods["lstsq"] = lstsq
    for name, fn in methods.items():
        if not hasattr(kiln.Tensor, name):
            setattr(kiln.Tensor, name, fn)
    for name in ("addbmm", "addr"):
        if not hasattr(kiln.Tensor, name + "_"):
            setattr(kiln.Tensor, name + "_", inplace_method(methods[name]))


_install_methods()

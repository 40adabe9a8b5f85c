"""Matrix functions the orthogonal parametrization needs and kiln.linalg does not provide:
``matrix_exp``, a linear solve for the Cayley map, ``householder_product`` and ``geqrf``.

The first three are built from differentiable kiln ops (matmul, elementwise, slicing), so
autograd gives their gradients without dedicated backward formulas. ``geqrf`` only runs inside
``right_inverse`` (no gradient) and defers to LAPACK through numpy, whose ``qr(mode="raw")``
returns exactly LAPACK's geqrf reflectors and scalars, as torch.geqrf does.
"""

from __future__ import annotations

import math

import numpy as np

import kiln

__all__ = ["geqrf", "householder_product", "matrix_exp", "solve_positive_real"]


def _eye_like(a, rows: int, cols: int):
    return kiln.eye(rows, cols, dtype=a.dtype, device=a.device)


def _taylor_degree(dtype) -> int:
    # With the scaled matrix's 1-norm at most 1/2 the first dropped Taylor term is below
    # 0.5**(m+1)/(m+1)!: about 1e-11 for m=10 (enough in single precision) and 2e-23 for
    # m=18 (double precision).
    return 18 if dtype in (kiln.float64, getattr(kiln, "complex128", None)) else 10


def matrix_exp(a):
    """``exp(a)`` of a square matrix or a batch of them, by scaling and squaring: a Taylor
    polynomial of ``a / 2**s`` (Horner form) squared ``s`` times, with ``s`` chosen so that
    ``a / 2**s`` has 1-norm at most 1/2. Differentiable through kiln's autograd."""
    if a.dim() < 2 or a.size(-1) != a.size(-2):
        raise RuntimeError(
            f"matrix_exp: expected a square matrix or a batch of them, got shape {a.shape}"
        )
    n = a.size(-1)
    if a.numel() == 0:
        return a.clone()
    with kiln.no_grad():
        norm = float(a.detach().abs().sum(-2).amax().item())
    squarings = max(0, math.ceil(math.log2(norm / 0.5))) if norm > 0.5 else 0
    x = a / (2.0**squarings) if squarings else a
    eye = _eye_like(a, n, n)
    degree = _taylor_degree(a.dtype)
    result = eye + x / degree
    for k in range(degree - 1, 0, -1):
        result = eye + (x @ result) / k
    for _ in range(squarings):
        result = result @ result
    return result


def solve_positive_real(m, b):
    """``m^{-1} b`` for a (batch of) square ``m`` whose Hermitian part is positive definite,
    such as ``I - A/2`` with ``A`` skew-symmetric in the Cayley map.

    Gauss-Jordan elimination without pivoting: for such matrices every pivot is nonzero and
    element growth stays bounded, so no row exchanges (and no data-dependent indexing) are
    needed, and the elimination is a fixed sequence of differentiable ops.
    """
    n = m.size(-1)
    eye = _eye_like(m, n, n)
    for k in range(n):
        pivot = m.narrow(-2, k, 1).narrow(-1, k, 1)
        row_m = m.narrow(-2, k, 1) / pivot
        row_b = b.narrow(-2, k, 1) / pivot
        # Subtracting (column - e_k) * row clears column k in every other row and divides row
        # k by its pivot, in one expression.
        col = m.narrow(-1, k, 1) - eye.narrow(-1, k, 1)
        m = m - col * row_m
        b = b - col * row_b
    return b


def householder_product(a, tau):
    """``torch.linalg.householder_product``: the first ``a.size(-1)`` columns of
    ``H_0 H_1 ... H_{t-1}``, with ``H_i = I - tau_i v_i v_i^H`` and ``v_i`` column ``i`` of ``a``
    below the diagonal, 1 on it and 0 above. The reflectors are applied right to left to the
    identity's leading columns, so no full product of square matrices is formed."""
    rows, cols = a.size(-2), a.size(-1)
    if tau.size(-1) > cols:
        raise RuntimeError(
            "householder_product: input.shape[-1] must be greater than or equal to tau.shape[-1]"
        )
    vectors = a.tril(-1) + _eye_like(a, rows, cols)
    q = _eye_like(a, rows, cols).expand(*a.shape[:-2], rows, cols)
    for i in range(tau.size(-1) - 1, -1, -1):
        v = vectors.narrow(-1, i, 1)
        t = tau.narrow(-1, i, 1).unsqueeze(-1)
        q = q - t * (v @ (v.mH @ q))
    return q


def geqrf(a):
    """``torch.geqrf``: LAPACK's compact QR (reflectors below the diagonal, R on and above it)
    and the reflector scalars ``tau``, for a matrix or a batch of them. Not differentiable."""
    dtype, device = a.dtype, a.device
    mats = a.detach().cpu().numpy()
    batch = mats.shape[:-2]
    flat = mats.reshape((-1, *mats.shape[-2:]))
    k = min(mats.shape[-2], mats.shape[-1])
    out_a = np.empty_like(flat)
    out_tau = np.empty((flat.shape[0], k), dtype=flat.dtype)
    for i, mat in enumerate(flat):
        h, t = np.linalg.qr(mat, mode="raw")
        out_a[i] = h.T
        out_tau[i] = t
    result_a = kiln.from_numpy(np.ascontiguousarray(out_a.reshape(mats.shape)))
    result_tau = kiln.from_numpy(np.ascontiguousarray(out_tau.reshape((*batch, k))))
    return result_a.to(device=device, dtype=dtype), result_tau.to(device=device, dtype=dtype)

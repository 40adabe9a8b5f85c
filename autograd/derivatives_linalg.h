#pragma once
/// Derivative rules of the LAPACK-backed ops (ir/ops.def: linalg_solve, linalg_solve_triangular,
/// linalg_cholesky, linalg_logabsdet, linalg_eigh_packed), written once against a builder as
/// those of derivatives.h: eager autograd runs them on tensors (autograd/ops_linalg.cc), compiled
/// training on graph values (passes/autodiff/node_vjp.cc). They are torch's formulas
/// (FunctionsManual.cpp) for real matrices.

#include "autograd/derivatives.h"

namespace kiln::autograd::rules {

template <class B> V<B> matrixTranspose(B &b, const V<B> &a) { return b.transpose(a, -2, -1); }

/// The n x n identity of `dtype`, as triu(tril(ones)) (both builders have those).
template <class B> V<B> identity(B &b, int64_t n, DType dtype) {
  V<B> ones = b.addScalar(b.zeros({n, n}, dtype), 1.0);
  return b.tril(b.triu(ones, 0), 0);
}

/// X = A^-1 B: gB = A^-T g, gA = -gB X^T (each summed over the batch dims it was broadcast
/// along).
template <class B>
Out<B> linalgSolve(B &b, const V<B> &g, const V<B> &a, const InputInfo<B> &rhs, const V<B> &x,
                   Needs need) {
  Out<B> r(2);
  V<B> gb = b.linalgSolve(matrixTranspose(b, a), g);
  if (need[0])
    r[0] = b.reduceTo(b.neg(b.matmul(gb, matrixTranspose(b, x))), B::sizes(a), B::dtype(a));
  if (need[1])
    r[1] = b.reduceTo(gb, rhs.sizes, rhs.dtype);
  return r;
}

/// X = T^-1 B for the triangle T of A: as linalgSolve, gA kept to the triangle that was read.
template <class B>
Out<B> linalgSolveTriangular(B &b, const V<B> &g, const V<B> &a, const InputInfo<B> &rhs,
                             const V<B> &x, bool upper, bool unit, Needs need) {
  Out<B> r(2);
  V<B> gb = b.linalgSolveTriangular(matrixTranspose(b, a), g, !upper, unit);
  if (need[0]) {
    V<B> full = b.neg(b.matmul(gb, matrixTranspose(b, x)));
    V<B> part = upper ? b.triu(full, unit ? 1 : 0) : b.tril(full, unit ? -1 : 0);
    r[0] = b.reduceTo(part, B::sizes(a), B::dtype(a));
  }
  if (need[1])
    r[1] = b.reduceTo(gb, rhs.sizes, rhs.dtype);
  return r;
}

/// L = chol(A): gA = sym(L^-T phi(L^T gL) L^-1), phi keeping the lower triangle with its
/// diagonal halved, sym(M) = (M + M^T) / 2.
template <class B> V<B> linalgCholesky(B &b, const V<B> &g, const V<B> &l) {
  V<B> lt = matrixTranspose(b, l);
  V<B> p = b.matmul(lt, g);
  V<B> phi = b.scale(b.add(b.tril(p, 0), b.tril(p, -1)), 0.5);
  V<B> s = b.linalgSolveTriangular(lt, phi, true, false); // L^-T phi
  V<B> ga = matrixTranspose(b, b.linalgSolveTriangular(lt, matrixTranspose(b, s), true, false));
  return b.scale(b.add(ga, matrixTranspose(b, ga)), 0.5);
}

/// log|det A|: gA = g A^-T.
template <class B> V<B> linalgLogabsdet(B &b, const V<B> &g, const V<B> &a) {
  const auto sizes = B::sizes(a);
  V<B> inverseT = b.linalgSolve(matrixTranspose(b, a), identity(b, sizes.back(), B::dtype(a)));
  return b.mul(b.unsqueeze(b.unsqueeze(g, -1), -1), inverseT);
}

/// The packed eigh result P (row 0 the eigenvalues w, rows 1..n the eigenvectors V):
/// gA = V (diag(gw) + skew(V^T gV) / E) V^T with E[i][j] = w[j] - w[i] (1 on the diagonal).
template <class B> V<B> linalgEighPacked(B &b, const V<B> &g, const V<B> &packed) {
  const auto sizes = B::sizes(packed);
  const int64_t rank = static_cast<int64_t>(sizes.size()), n = sizes.back();
  V<B> w = b.slice(packed, rank - 2, 0, 1, 1); // (..., 1, n)
  V<B> v = b.slice(packed, rank - 2, 1, n + 1, 1);
  V<B> gw = b.slice(g, rank - 2, 0, 1, 1);
  V<B> gv = b.slice(g, rank - 2, 1, n + 1, 1);
  V<B> eye = identity(b, n, B::dtype(packed));
  V<B> vtg = b.matmul(matrixTranspose(b, v), gv);
  V<B> skew = b.scale(b.sub(vtg, matrixTranspose(b, vtg)), 0.5);
  V<B> gaps = b.add(b.sub(w, matrixTranspose(b, w)), eye);
  V<B> inner = b.add(b.div(skew, gaps), b.mul(eye, gw));
  return b.matmul(b.matmul(v, inner), matrixTranspose(b, v));
}

} // namespace kiln::autograd::rules

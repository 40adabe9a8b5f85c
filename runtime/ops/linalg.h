#pragma once
/// Eager matrix products with PyTorch semantics. Operands must share one dtype (torch does not
/// promote in matmul); float16/bfloat16 are computed in float32, float32/float64 go through
/// OpenBLAS and integer types through a blocked loop; bool is rejected as torch does.

#include "runtime/tensor.h"

#include <optional>
#include <span>
#include <string>

namespace kiln::ops {

/// torch.matmul: dot, mv, mm or a batched product with broadcast batch dims, by operand rank.
Tensor matmul(const Tensor &a, const Tensor &b);
/// torch.mm: [n, m] @ [m, p].
Tensor mm(const Tensor &a, const Tensor &b);
/// torch.bmm: [b, n, m] @ [b, m, p] (no broadcasting).
Tensor bmm(const Tensor &a, const Tensor &b);
/// torch.mv: [n, m] @ [m].
Tensor mv(const Tensor &mat, const Tensor &vec);
/// torch.dot: inner product of two 1-D tensors of the same size.
Tensor dot(const Tensor &a, const Tensor &b, const char *op = "dot");
/// torch.outer (alias ger): a[:, None] * b[None, :], with type promotion like mul.
Tensor outer(const Tensor &a, const Tensor &b);

/// torch.addmm: beta * self + alpha * (mat1 @ mat2); self broadcasts to the product's shape and
/// is ignored (NaNs included) when beta == 0.
Tensor addmm(const Tensor &self, const Tensor &mat1, const Tensor &mat2,
             const Scalar &beta = Scalar(int64_t{1}), const Scalar &alpha = Scalar(int64_t{1}));
/// torch.addmv: beta * self + alpha * (mat @ vec).
Tensor addmv(const Tensor &self, const Tensor &mat, const Tensor &vec,
             const Scalar &beta = Scalar(int64_t{1}), const Scalar &alpha = Scalar(int64_t{1}));
/// torch.baddbmm: beta * self + alpha * bmm(batch1, batch2).
Tensor baddbmm(const Tensor &self, const Tensor &batch1, const Tensor &batch2,
               const Scalar &beta = Scalar(int64_t{1}), const Scalar &alpha = Scalar(int64_t{1}));

/// F.linear: input @ weight.T + bias for any number of leading dims of input.
Tensor linear(const Tensor &input, const Tensor &weight, const std::optional<Tensor> &bias);
/// F.bilinear: out[..., o] = sum_ij x1[..., i] * weight[o, i, j] * x2[..., j] + bias[o].
Tensor bilinear(const Tensor &input1, const Tensor &input2, const Tensor &weight,
                const std::optional<Tensor> &bias);

/// torch.einsum over any number of operands: explicit ("ij,jk->ik") or implicit output,
/// repeated subscripts (diagonals), ellipsis broadcasting. Contractions run as batched GEMMs.
Tensor einsum(const std::string &equation, std::span<const Tensor> operands);

/// torch.linalg's factorizations and solves of float32/float64 (..., n, n) batches, through LAPACK
/// (linalg_lapack.cc); singular or indefinite input raises ErrorKind::LinAlg as torch does.
/// X with A X = B for B (..., n, k), batch dims broadcast (`inverse`: B is the identity, errors
/// worded as linalg.inv's).
Tensor linalgSolve(const Tensor &a, const Tensor &b, bool inverse = false);
/// The same for the upper (else lower) triangle of A, with a unit diagonal when unitriangular.
Tensor linalgSolveTriangular(const Tensor &a, const Tensor &b, bool upper, bool unitriangular);
/// The lower Cholesky factor of A (its lower triangle read).
Tensor linalgCholesky(const Tensor &a);
/// log|det A| and sign(det A), one per matrix (-inf and 0 for a singular one).
Tensor linalgLogabsdet(const Tensor &a);
Tensor linalgDetSign(const Tensor &a);
/// (..., n + 1, n): the ascending eigenvalues in row 0, the eigenvectors as columns below.
Tensor linalgEighPacked(const Tensor &a, bool upper);

} // namespace kiln::ops

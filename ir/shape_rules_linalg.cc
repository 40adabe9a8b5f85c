// Result types of the LAPACK-backed ops (linalg_solve, linalg_solve_triangular, linalg_cholesky,
// linalg_logabsdet, linalg_det_sign, linalg_eigh_packed): batches of square float matrices whose
// batch dims broadcast, as torch.linalg's.
#include "ir/shape_rules_sort_impl.h"
#include "ir/verifier_impl.h"

namespace kiln::ir::detail {

namespace {

/// The matrix of operand k, checked square (operand 0) or as its right-hand side.
const TensorMeta &matrixOperand(const Node &n, size_t k) {
  const TensorMeta &m = tensorOperand(n, k);
  if (m.sizes.size() < 2)
    ruleFails("{}: The input tensor {} must have at least 2 dimensions.", n.keyword(),
              k == 0 ? "A" : "B");
  if (m.dtype != DType::Float32 && m.dtype != DType::Float64)
    ruleFails("{}: Expected a float32 or float64 tensor, got {}", n.keyword(),
              dtypeShortName(m.dtype));
  return m;
}

std::span<const SymInt> batchOf(const TensorMeta &m) {
  return std::span<const SymInt>(m.sizes).first(m.sizes.size() - 2);
}

} // namespace

bool isLinalgOp(OpKind op) {
  switch (op) {
  case OpKind::LinalgSolve:
  case OpKind::LinalgSolveTriangular:
  case OpKind::LinalgCholesky:
  case OpKind::LinalgLogabsdet:
  case OpKind::LinalgDetSign:
  case OpKind::LinalgEighPacked:
    return true;
  default:
    return false;
  }
}

TensorMeta linalgType(const Node &n) {
  const TensorMeta &a = matrixOperand(n, 0);
  const SymInt &rows = a.sizes[a.sizes.size() - 2], &cols = a.sizes.back();
  if (rows.constant() && cols.constant() && *rows.constant() != *cols.constant())
    ruleFails("{}: A must be batches of square matrices, but they are {} by {} matrices",
              n.keyword(), *rows.constant(), *cols.constant());
  std::vector<SymInt> sizes(batchOf(a).begin(), batchOf(a).end());
  switch (n.op()) {
  case OpKind::LinalgSolve:
  case OpKind::LinalgSolveTriangular: {
    const TensorMeta &b = matrixOperand(n, 1);
    if (b.dtype != a.dtype)
      ruleFails("{}: Expected A and B to have the same dtype, but found {} and {}", n.keyword(),
                dtypeShortName(a.dtype), dtypeShortName(b.dtype));
    sizes = broadcastShapes({batchOf(a), batchOf(b)});
    sizes.push_back(cols);
    sizes.push_back(b.sizes.back());
    break;
  }
  case OpKind::LinalgCholesky:
    sizes = a.sizes;
    break;
  case OpKind::LinalgEighPacked:
    sizes.push_back(cols + SymInt(1));
    sizes.push_back(cols);
    break;
  default: // the determinant's log and sign: one number per matrix
    break;
  }
  return TensorMeta::contiguous(a.dtype, sizes, a.device);
}

} // namespace kiln::ir::detail

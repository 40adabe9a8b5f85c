// The scans, sorts, scatters and upsamples (cumsum, cumprod and its backward, argsort,
// topk_indices, scatter, scatter_add, scatter_reduce, index_add, index_put, upsample_nearest,
// upsample_linear) and the LAPACK-backed linalg ops as extern nodes: eager's kernels run them
// inside the compiled program (passes/lower/README.md lists the contract), so the code around them
// stays one compiled part.

#include "passes/lower/lower_context.h"

namespace kiln::passes::lower {

namespace {

using ir::OpKind;

void lowerScanOrSort(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &m = n.result(0)->meta();
  LoopProgram &p = ctx.program();
  std::vector<BufferId> operands;
  for (size_t k = 0; k < n.numOperands(); ++k)
    operands.push_back(ctx.realize(ctx.tensor(n.operand(k))));
  ir::TensorMeta out = ir::TensorMeta::contiguous(m.dtype, m.sizes, m.device);
  ctx.define(n.result(0),
             TensorRef::of(p, p.external(std::string(n.keyword()), operands, {out}, n.attrs())[0]));
}

} // namespace

void registerScansAndSorts(Registry &r) {
  for (OpKind op : {OpKind::Cumsum,
                    OpKind::Cumprod,
                    OpKind::CumprodBackward,
                    OpKind::Argsort,
                    OpKind::TopkIndices,
                    OpKind::Logcumsumexp,
                    OpKind::SelectionIndices,
                    OpKind::Scatter,
                    OpKind::ScatterAdd,
                    OpKind::ScatterReduce,
                    OpKind::IndexAdd,
                    OpKind::IndexPut,
                    OpKind::UpsampleNearest,
                    OpKind::UpsampleLinear,
                    OpKind::Unfold,
                    OpKind::Fold,
                    OpKind::ConvTranspose1d,
                    OpKind::ConvTranspose2d,
                    OpKind::ConvTranspose3d,
                    OpKind::LinalgSolve,
                    OpKind::LinalgSolveTriangular,
                    OpKind::LinalgCholesky,
                    OpKind::LinalgLogabsdet,
                    OpKind::LinalgDetSign,
                    OpKind::LinalgEighPacked})
    r.add(op, lowerScanOrSort);
}

} // namespace kiln::passes::lower

// The scans and sorts (cumsum, cumprod, argsort, topk_indices) as extern nodes: eager's kernels
// run them inside the compiled program (passes/lower/README.md lists the contract), so a
// model's sampling or masking code around them stays one compiled part.

#include "passes/lower/lower_context.h"

namespace kiln::passes::lower {

namespace {

using ir::OpKind;

void lowerScanOrSort(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &m = n.result(0)->meta();
  LoopProgram &p = ctx.program();
  BufferId x = ctx.realize(ctx.tensor(n.operand(0)));
  ir::TensorMeta out = ir::TensorMeta::contiguous(m.dtype, m.sizes, m.device);
  ctx.define(n.result(0),
             TensorRef::of(p, p.external(std::string(n.keyword()), {x}, {out}, n.attrs())[0]));
}

} // namespace

void registerScansAndSorts(Registry &r) {
  for (OpKind op : {OpKind::Cumsum, OpKind::Cumprod, OpKind::Argsort, OpKind::TopkIndices})
    r.add(op, lowerScanOrSort);
}

} // namespace kiln::passes::lower

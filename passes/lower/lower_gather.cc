// The gathers: embedding, gather and index_select, each one pointwise node whose body loads the
// index and then reads the source at it (an indirect load, ir/loop/expr.h), so they fuse with
// what computes the index and with what consumes the result like any elementwise op.

#include "passes/lower/lower_context.h"

namespace kiln::passes::lower {

namespace {

using ir::OpKind;

/// The position an index tensor holds at point `idx`, as i64.
Val positionAt(Ops &ops, const TensorRef &index, Idx idx) {
  return ops.cast(LowerContext::load(ops, index, idx), DType::Int64);
}

/// embedding(indices, weight): out[i..., j] = weight[indices[i...], j].
void lowerEmbedding(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &indices = ctx.tensor(n.operand(0));
  BufferId weight = ctx.realize(ctx.tensor(n.operand(1)));
  size_t rank = static_cast<size_t>(indices.rank());
  ctx.define(n.result(0), ctx.pointwise(n.result(0)->meta().sizes, [&](Ops &ops, Idx i) {
    IndexExpr at[2] = {0, i[rank]};
    return ops.loadIndirect(weight, at, 0, positionAt(ops, indices, i.first(rank)));
  }));
}

/// The source of a gather as a buffer of rank >= 1 (a 0-d input counts as 1-d, as in eager).
BufferId gatherSource(LowerContext &ctx, const TensorRef &input) {
  return ctx.realize(input.rank() == 0 ? input.view({SymInt(1)}, {}) : input);
}

/// gather(input, index, dim): out[i] = input[i with index[i] along dim], over index's shape.
void lowerGather(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &input = ctx.tensor(n.operand(0)), &index = ctx.tensor(n.operand(1));
  BufferId source = gatherSource(ctx, input);
  int64_t rank = std::max<int64_t>(1, input.rank());
  size_t dim = static_cast<size_t>(wrapDim(n.attr("dim")->toInt(), rank));
  ctx.define(n.result(0), ctx.pointwise(n.result(0)->meta().sizes, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> at(i.begin(), i.end());
    at.resize(static_cast<size_t>(rank), 0); // a 0-d index reads element 0 of the rest
    return ops.loadIndirect(source, at, dim, positionAt(ops, index, i));
  }));
}

/// index_select(input, index, dim): the entries index[j] of input along dim, in order.
void lowerIndexSelect(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &input = ctx.tensor(n.operand(0)), &index = ctx.tensor(n.operand(1));
  BufferId source = gatherSource(ctx, input);
  int64_t rank = std::max<int64_t>(1, input.rank());
  size_t dim = static_cast<size_t>(wrapDim(n.attr("dim")->toInt(), rank));
  ctx.define(n.result(0), ctx.pointwise(n.result(0)->meta().sizes, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> at(i.begin(), i.end());
    at.resize(static_cast<size_t>(rank), 0); // a 0-d input's result is 0-d
    IndexExpr j = at[dim];
    Val p = positionAt(ops, index, index.rank() == 0 ? Idx() : Idx(&j, 1));
    return ops.loadIndirect(source, at, dim, p);
  }));
}

} // namespace

void registerGathers(Registry &r) {
  r.add(OpKind::Embedding, lowerEmbedding);
  r.add(OpKind::Gather, lowerGather);
  r.add(OpKind::IndexSelect, lowerIndexSelect);
}

} // namespace kiln::passes::lower

// The gathers: embedding, gather, index_select and index (x[idx]), each one pointwise node whose
// body loads the index and then reads the source at it (an indirect load, ir/loop/expr.h), so
// they fuse with what computes the index and with what consumes the result like any elementwise
// op. A source that is a view (a slice, select or transpose) is read in place.

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
  TensorRef weight = ctx.gatherSource(ctx.tensor(n.operand(1)));
  size_t rank = static_cast<size_t>(indices.rank());
  ctx.define(n.result(0), ctx.pointwise(n.result(0)->meta().sizes, [&](Ops &ops, Idx i) {
    IndexExpr at[2] = {0, i[rank]};
    return ctx.loadAlong(ops, weight, at, 0, positionAt(ops, indices, i.first(rank)), false);
  }));
}

/// The source of a gather with rank >= 1 (a 0-d input counts as 1-d, as in eager).
TensorRef atLeast1d(LowerContext &ctx, const TensorRef &input) {
  return ctx.gatherSource(input.rank() == 0 ? input.view({SymInt(1)}, {}) : input);
}

/// A gather of operand 0 along the `dim` attribute over the result's points, the position at
/// each point given by `positionOf(ops, point)`.
template <class PositionOf>
void lowerAlongDim(LowerContext &ctx, const ir::Node &n, PositionOf positionOf) {
  TensorRef source = atLeast1d(ctx, ctx.tensor(n.operand(0)));
  size_t rank = static_cast<size_t>(source.rank());
  size_t dim = static_cast<size_t>(wrapDim(n.attr("dim")->toInt(), source.rank()));
  ctx.define(n.result(0), ctx.pointwise(n.result(0)->meta().sizes, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> at(i.begin(), i.end());
    at.resize(rank, 0); // a 0-d index (gather) or input (index_select) reads element 0
    return ctx.loadAlong(ops, source, at, dim, positionOf(ops, i, at[dim]), false);
  }));
}

/// gather(input, index, dim): out[i] = input[i with index[i] along dim], over index's shape.
void lowerGather(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &index = ctx.tensor(n.operand(1));
  lowerAlongDim(ctx, n,
                [&](Ops &ops, Idx i, const IndexExpr &) { return positionAt(ops, index, i); });
}

/// index_select(input, index, dim): the entries index[j] of input along dim, in order.
void lowerIndexSelect(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &index = ctx.tensor(n.operand(1));
  lowerAlongDim(ctx, n, [&](Ops &ops, Idx, const IndexExpr &j) {
    return positionAt(ops, index, index.rank() == 0 ? Idx() : Idx(&j, 1));
  });
}

/// index(input, index, dim): out[a..., j..., b...] = input[a..., index[j...], b...], negative
/// entries counting from the end (advanced indexing by one tensor).
void lowerIndex(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &index = ctx.tensor(n.operand(1));
  TensorRef source = ctx.gatherSource(ctx.tensor(n.operand(0)));
  size_t k = static_cast<size_t>(index.rank());
  size_t dim = static_cast<size_t>(wrapDim(n.attr("dim")->toInt(), source.rank()));
  ctx.define(n.result(0), ctx.pointwise(n.result(0)->meta().sizes, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> at(i.begin(), i.begin() + dim);
    at.push_back(0); // the position's dim
    at.insert(at.end(), i.begin() + dim + k, i.end());
    return ctx.loadAlong(ops, source, at, dim, positionAt(ops, index, i.subspan(dim, k)), true);
  }));
}

} // namespace

void registerGathers(Registry &r) {
  r.add(OpKind::Embedding, lowerEmbedding);
  r.add(OpKind::Gather, lowerGather);
  r.add(OpKind::IndexSelect, lowerIndexSelect);
  r.add(OpKind::Index, lowerIndex);
}

} // namespace kiln::passes::lower

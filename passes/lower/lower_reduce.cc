// Lowerings of reductions (sum, prod, mean, amax, amin, all, any, argmax, argmin, var, std,
// norm, logsumexp) and of softmax and log_softmax.
//
// A reduction over dims D of an input of rank n is a Reduction node whose ranges are the kept
// dims and whose reduction ranges are D (in dim order); `keepdim` is a view of its buffer with
// size-1 dims put back. Accumulation happens in the compute dtype (float32 for float16/bfloat16,
// int64 for integer sums); a pointwise epilogue (mean's division, var's correction, the cast to
// the result dtype) follows the reduction, and fusion later inlines it into its consumers.
// softmax, log_softmax and logsumexp subtract the row max before exp, as eager does.

#include "passes/lower/lower_context.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::passes::lower {

namespace {

using ir::OpKind;
using ir::loop::ReductionKind;

/// The split of an input's dims into kept (the node's ranges) and reduced (its reduction
/// ranges). With keepdim the reduced dims stay in the ranges as size 1, so the reduction's buffer
/// already has the result's shape.
struct ReduceShape {
  std::vector<int64_t> kept, reduced;
  std::vector<size_t> keptRange; ///< the range of each kept dim
  std::vector<SymInt> outer, inner;

  ReduceShape(const std::vector<SymInt> &sizes, std::vector<int64_t> dims, bool keepdim) {
    std::sort(dims.begin(), dims.end());
    for (int64_t d = 0; d < static_cast<int64_t>(sizes.size()); ++d) {
      if (std::binary_search(dims.begin(), dims.end(), d)) {
        reduced.push_back(d);
        inner.push_back(sizes[d]);
        if (keepdim)
          outer.push_back(1);
        continue;
      }
      kept.push_back(d);
      keptRange.push_back(outer.size());
      outer.push_back(sizes[d]);
    }
  }
  size_t rank() const { return kept.size() + reduced.size(); }

  /// The input point of a reduction body: kept dims from their ranges, reduced from the r-vars.
  std::vector<IndexExpr> inputPoint(Idx idx) const {
    std::vector<IndexExpr> p(rank());
    for (size_t k = 0; k < kept.size(); ++k)
      p[kept[k]] = idx[keptRange[k]];
    for (size_t k = 0; k < reduced.size(); ++k)
      p[reduced[k]] = idx[outer.size() + k];
    return p;
  }
  /// The point of the reduced buffer (without keepdim) that a full-rank point of the input
  /// belongs to.
  std::vector<IndexExpr> outerPoint(Idx idx) const {
    std::vector<IndexExpr> p;
    for (int64_t d : kept)
      p.push_back(idx[d]);
    return p;
  }
};

bool keepdim(const ir::Node &n) {
  const ir::Attribute *a = n.attr("keepdim");
  return a && a->toBool();
}

/// The dims a reduction node folds (no dim, or an empty list, is every dim), wrapped and sorted.
std::vector<int64_t> reductionDims(const ir::Node &n, int64_t rank) {
  std::vector<int64_t> dims;
  if (const ir::Attribute *a = n.attr("dim"))
    dims = a->is<int64_t>() ? std::vector<int64_t>{a->toInt()} : a->toInts();
  if (dims.empty())
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(d);
  for (int64_t &d : dims)
    d = wrapDim(d, rank);
  if (rank == 0)
    dims.clear();
  return dims;
}

/// The input converted to the compute dtype: through the `dtype` attribute first, as torch does.
Val inputAs(Ops &ops, const ir::Node &n, const TensorRef &x, Idx point, DType compute) {
  Val v = LowerContext::load(ops, x, point);
  if (const ir::Attribute *a = n.attr("dtype"))
    v = ops.cast(v, a->toDType());
  return ops.cast(v, compute);
}

/// The reduction kind of a simple reduction op.
ReductionKind simpleKind(OpKind op) {
  switch (op) {
  case OpKind::Amax:
  case OpKind::Any:
    return ReductionKind::Max;
  case OpKind::Amin:
  case OpKind::All:
    return ReductionKind::Min;
  case OpKind::Argmax:
    return ReductionKind::ArgMax;
  case OpKind::Argmin:
    return ReductionKind::ArgMin;
  case OpKind::Prod:
    return ReductionKind::Prod;
  default:
    return ReductionKind::Sum;
  }
}

/// sum, prod, mean, amax, amin, all, any, argmax, argmin: one reduction and an epilogue where the
/// dtypes or mean need it. all/any fold `x != 0` as u8 by min/max.
void lowerSimple(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  ReduceShape shape(x.sizes, reductionDims(n, x.rank()), keepdim(n));
  DType result = out.dtype;
  OpKind op = n.op();
  ReductionKind kind = simpleKind(op);
  bool accumulates = kind == ReductionKind::Sum || kind == ReductionKind::Prod;
  bool logical = op == OpKind::All || op == OpKind::Any;
  DType compute = accumulates ? computeDType(result) : logical ? DType::UInt8 : x.dtype;
  LoopProgram &p = ctx.program();
  BufferId acc = p.reduction(kind, shape.outer, shape.inner, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> point = shape.inputPoint(i);
    if (accumulates)
      return inputAs(ops, n, x, point, compute);
    Val v = LowerContext::load(ops, x, point);
    return logical ? ops.cast(ops.cast(v, DType::Bool), compute) : v;
  });
  TensorRef r = TensorRef::of(p, acc);
  // all/any fold u8 flags, whose min identity (an empty all) is 255: the result is 0 or 1.
  if (op == OpKind::Mean || logical || p.buffer(acc).meta.dtype != result) {
    SymInt count = numel(shape.inner);
    r = ctx.pointwise(shape.outer, [&](Ops &ops, Idx i) {
      Val v = ops.load(acc, i);
      if (op == OpKind::Mean)
        v = v / sizeAs(ops, count, compute);
      if (logical)
        v = ops.cast(v, DType::Bool);
      return ops.cast(v, result);
    });
  }
  ctx.define(n.result(0), r);
}

void lowerVar(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  ReduceShape shape(x.sizes, reductionDims(n, x.rank()), keepdim(n));
  DType result = out.dtype, compute = computeDType(result);
  const ir::Attribute *c = n.attr("correction");
  double correction = c ? c->toDouble() : 1.0;
  LoopProgram &p = ctx.program();
  ir::loop::WelfordBuffers w = p.welford(shape.outer, shape.inner, [&](Ops &ops, Idx i) {
    return inputAs(ops, n, x, shape.inputPoint(i), compute);
  });
  SymInt count = numel(shape.inner);
  TensorRef r = ctx.pointwise(shape.outer, [&](Ops &ops, Idx i) {
    // torch divides by max(0, N - correction); a constant N folds to one literal.
    Val dof = count.constant()
                  ? ops.constant(std::max(0.0, double(*count.constant()) - correction), compute)
                  : ops.maximum(sizeAs(ops, count, compute) - ops.constant(correction, compute),
                                ops.constant(0.0, compute));
    Val v = ops.load(w.m2, i) / dof;
    return ops.cast(n.op() == OpKind::Std ? ops.sqrt(v) : v, result);
  });
  ctx.define(n.result(0), r);
}

/// The vector p-norm: a sum of |x|^p (x^2 for p = 2, |x| for 1, x != 0 for 0) or a max/min of
/// |x| for +-inf, in the compute dtype, then the root (eager's NormReducer).
void lowerNorm(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  if (!isFloating(x.dtype))
    ctx.decline(n, "norm takes floating operands only");
  const ir::Attribute *pa = n.attr("p");
  double ord = pa ? pa->toDouble() : 2.0;
  bool inf = std::isinf(ord);
  ReduceShape shape(x.sizes, reductionDims(n, x.rank()), keepdim(n));
  if (inf && numel(shape.inner) == SymInt(0))
    ctx.decline(n, "an infinity norm of an empty tensor raises");
  DType result = out.dtype, compute = computeDType(result);
  LoopProgram &p = ctx.program();
  ReductionKind kind = !inf      ? ReductionKind::Sum
                       : ord > 0 ? ReductionKind::Max
                                 : ReductionKind::Min;
  BufferId acc = p.reduction(kind, shape.outer, shape.inner, [&](Ops &ops, Idx i) {
    Val v = inputAs(ops, n, x, shape.inputPoint(i), compute);
    if (ord == 2.0)
      return v * v;
    if (ord == 0.0)
      return ops.cast(ops.ne(v, ops.constant(0.0, compute)), compute);
    Val a = ops.abs(v);
    return ord == 1.0 || inf ? a : ops.pow(a, ops.constant(ord, compute));
  });
  ctx.define(n.result(0), ctx.pointwise(shape.outer, [&](Ops &ops, Idx i) {
    Val v = ops.load(acc, i);
    if (ord == 2.0)
      v = ops.sqrt(v);
    else if (ord != 1.0 && ord != 0.0 && !inf)
      v = ops.pow(v, ops.constant(1.0 / ord, compute));
    return ops.cast(v, result);
  }));
}

void lowerLogsumexp(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  ReduceShape shape(x.sizes, reductionDims(n, x.rank()), keepdim(n));
  DType result = out.dtype, compute = computeDType(result);
  LoopProgram &p = ctx.program();
  BufferId mx = p.reduction(ReductionKind::Max, shape.outer, shape.inner, [&](Ops &ops, Idx i) {
    return inputAs(ops, n, x, shape.inputPoint(i), compute);
  });
  // An infinite max would make x - max NaN; torch subtracts 0 instead.
  BufferId safe = p.pointwise(shape.outer, [&](Ops &ops, Idx i) {
    Val m = ops.load(mx, i);
    Val inf = ops.constant(std::numeric_limits<double>::infinity(), compute);
    return ops.where(ops.eq(ops.abs(m), inf), ops.constant(0.0, compute), m);
  });
  size_t numOuter = shape.outer.size();
  BufferId sum = p.reduction(ReductionKind::Sum, shape.outer, shape.inner, [&](Ops &ops, Idx i) {
    Val m = ops.load(safe, i.first(numOuter));
    return ops.exp(inputAs(ops, n, x, shape.inputPoint(i), compute) - m);
  });
  TensorRef r = ctx.pointwise(shape.outer, [&](Ops &ops, Idx i) {
    return ops.cast(ops.log(ops.load(sum, i)) + ops.load(safe, i), result);
  });
  ctx.define(n.result(0), r);
}

/// softmax = exp(x - max) / sum(exp(x - max)); log_softmax = (x - max) - log(sum(...)): a max
/// reduction, an exp-sum reduction and a pointwise node, which fusion schedules as one kernel.
void lowerSoftmax(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  std::vector<int64_t> dims;
  if (x.rank() > 0)
    dims.push_back(wrapDim(n.attr("dim")->toInt(), x.rank()));
  ReduceShape shape(x.sizes, dims, false);
  DType result = out.dtype, compute = computeDType(result);
  bool log = n.op() == OpKind::LogSoftmax;
  LoopProgram &p = ctx.program();
  size_t numOuter = shape.outer.size();
  BufferId mx = p.reduction(ReductionKind::Max, shape.outer, shape.inner, [&](Ops &ops, Idx i) {
    return inputAs(ops, n, x, shape.inputPoint(i), compute);
  });
  BufferId sum = p.reduction(ReductionKind::Sum, shape.outer, shape.inner, [&](Ops &ops, Idx i) {
    Val shifted =
        inputAs(ops, n, x, shape.inputPoint(i), compute) - ops.load(mx, i.first(numOuter));
    return ops.exp(shifted);
  });
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> row = shape.outerPoint(i);
    Val shifted = inputAs(ops, n, x, i, compute) - ops.load(mx, row);
    // exp times the row's reciprocal, as eager's softmax (and torch's) scales: one divide per
    // row, a multiply per element (a user's x / d stays a correctly rounded divide).
    Val v = log ? shifted - ops.log(ops.load(sum, row))
                : ops.exp(shifted) * (ops.constant(1.0, compute) / ops.load(sum, row));
    return ops.cast(v, result);
  }));
}

} // namespace

void registerReductions(Registry &r) {
  for (OpKind op : {OpKind::Sum, OpKind::Prod, OpKind::Mean, OpKind::Amax, OpKind::Amin,
                    OpKind::All, OpKind::Any, OpKind::Argmax, OpKind::Argmin})
    r.add(op, lowerSimple);
  r.add(OpKind::Var, lowerVar);
  r.add(OpKind::Std, lowerVar);
  r.add(OpKind::Norm, lowerNorm);
  r.add(OpKind::Logsumexp, lowerLogsumexp);
  r.add(OpKind::Softmax, lowerSoftmax);
  r.add(OpKind::LogSoftmax, lowerSoftmax);
}

} // namespace kiln::passes::lower

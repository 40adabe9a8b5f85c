// The class losses: nll_loss of log-probabilities and cross_entropy of logits, for class-index
// targets (an indirect load of the target's class, ir/loop/expr.h) and, for cross_entropy,
// class-probability targets. cross_entropy computes the row's logsumexp as log_softmax does
// (a max reduction, an exp-sum reduction), never the whole log_softmax; the per-sample losses
// then feed a sum (and, for the mean, a sum of the counted weights), all in the input's compute
// dtype as eager's kernels do.

#include "passes/lower/lower_context.h"

#include <limits>

namespace kiln::passes::lower {

namespace {

using ir::OpKind;
using ir::loop::ReductionKind;

/// The geometry of a class loss: samples over `samples` (the input without its class dim, or
/// the target's shape when the input is one row), classes along `classDim` of the input.
struct ClassLoss {
  const ir::Node &node;
  TensorRef x, target, weight;
  bool hasWeight = false, probabilities = false, logits = false;
  size_t classDim = 0;
  SymInt classes;
  std::vector<SymInt> samples;
  DType compute = DType::Float32;
  int64_t ignoreIndex = -100;
  double smoothing = 0;

  ClassLoss(LowerContext &ctx, const ir::Node &n) : node(n) {
    x = ctx.gatherSource(ctx.tensor(n.operand(0)));
    target = ctx.tensor(n.operand(1));
    if ((hasWeight = n.numOperands() > 2))
      weight = ctx.gatherSource(ctx.tensor(n.operand(2)));
    logits = n.op() == OpKind::CrossEntropy;
    probabilities = logits && isFloating(n.operand(1)->meta().dtype); // as the rule says
    classDim = x.rank() == 1 ? 0 : 1;
    classes = x.sizes[classDim];
    if (x.rank() == 1) {
      samples = probabilities ? std::vector<SymInt>{} : target.sizes;
    } else {
      samples = x.sizes;
      samples.erase(samples.begin() + 1);
    }
    compute = computeDType(n.result(0)->meta().dtype);
    if (const ir::Attribute *a = n.attr("ignore_index"))
      ignoreIndex = a->toInt();
    if (const ir::Attribute *a = n.attr("label_smoothing"))
      smoothing = a->toDouble();
  }

  /// The input's point of sample `s` (one expression per sample dim) and class `c`.
  std::vector<IndexExpr> inputPoint(Idx s, IndexExpr c) const {
    if (x.rank() == 1)
      return {c};
    std::vector<IndexExpr> at(s.begin(), s.end());
    at.insert(at.begin() + 1, c);
    return at;
  }
  Val input(Ops &ops, Idx s, IndexExpr c) const {
    return ops.cast(LowerContext::load(ops, x, inputPoint(s, c)), compute);
  }
  Val classWeight(Ops &ops, IndexExpr c) const {
    if (!hasWeight)
      return ops.constant(1.0, compute);
    IndexExpr at[1] = {c};
    return ops.cast(LowerContext::load(ops, weight, at), compute);
  }
  Val constant(Ops &ops, double v) const { return ops.constant(v, compute); }
  /// label_smoothing / C, the uniform distribution's share of each class.
  Val uniform(Ops &ops) const {
    if (std::optional<int64_t> c = classes.constant())
      return constant(ops, smoothing / static_cast<double>(*c));
    return constant(ops, smoothing) / sizeAs(ops, classes, compute);
  }
};

/// The per-sample statistics a cross_entropy loss needs beyond its own target: the row's
/// logsumexp and, for label smoothing or class-probability targets, WT = sum_c w[c] t[c] and
/// WTX = sum_c w[c] t[c] x[c], where t is the (smoothed) probability target, or 1 for class
/// indices. Then -sum_c w[c] t[c] (x[c] - lse) = lse * WT - WTX.
struct RowStatistics {
  BufferId lse, weightedTargets, weightedInputs;
};

/// logsumexp over the classes per sample: max, then log(sum(exp(x - max))) + max (an infinite
/// max subtracts 0, as torch's).
BufferId logSumExp(LowerContext &ctx, const ClassLoss &l) {
  LoopProgram &p = ctx.program();
  size_t n = l.samples.size();
  BufferId mx = p.reduction(ReductionKind::Max, l.samples, {l.classes},
                            [&](Ops &ops, Idx i) { return l.input(ops, i.first(n), i[n]); });
  auto safeMax = [&](Ops &ops, Idx s) {
    Val m = ops.load(mx, s);
    Val inf = l.constant(ops, std::numeric_limits<double>::infinity());
    return ops.where(ops.eq(ops.abs(m), inf), l.constant(ops, 0.0), m);
  };
  BufferId sum = p.reduction(ReductionKind::Sum, l.samples, {l.classes}, [&](Ops &ops, Idx i) {
    return ops.exp(l.input(ops, i.first(n), i[n]) - safeMax(ops, i.first(n)));
  });
  return p.pointwise(l.samples,
                     [&](Ops &ops, Idx s) { return ops.log(ops.load(sum, s)) + safeMax(ops, s); });
}

RowStatistics rowStatistics(LowerContext &ctx, const ClassLoss &l) {
  RowStatistics r;
  if (!l.logits)
    return r;
  r.lse = logSumExp(ctx, l);
  if (l.smoothing == 0 && !l.probabilities)
    return r;
  LoopProgram &p = ctx.program();
  size_t n = l.samples.size();
  auto term = [&](Ops &ops, Idx i) { // w[c] t[c] at sample i[:n], class i[n]
    Val w = l.classWeight(ops, i[n]);
    if (!l.probabilities)
      return w;
    Val t = ops.cast(LowerContext::load(ops, l.target, l.inputPoint(i.first(n), i[n])), l.compute);
    if (l.smoothing > 0)
      t = t * l.constant(ops, 1.0 - l.smoothing) + l.uniform(ops);
    return l.hasWeight ? w * t : t;
  };
  r.weightedTargets = p.reduction(ReductionKind::Sum, l.samples, {l.classes}, term);
  r.weightedInputs = p.reduction(ReductionKind::Sum, l.samples, {l.classes}, [&](Ops &ops, Idx i) {
    return term(ops, i) * l.input(ops, i.first(n), i[n]);
  });
  return r;
}

void lowerClassLoss(LowerContext &ctx, const ir::Node &n) {
  ClassLoss l(ctx, n);
  RowStatistics stats = rowStatistics(ctx, l);
  const ir::Attribute *r = n.attr("reduction");
  std::string reduction = r ? r->toString() : "mean";
  DType result = n.result(0)->meta().dtype;
  // Class-index targets: the target's class, or 0 for an ignored sample (whose terms are then
  // dropped, so nothing outside the row is read); weight: w[t] where counted, else 0.
  auto classOf = [&](Ops &ops, Idx s) {
    Val t = ops.cast(LowerContext::load(ops, l.target, s), DType::Int64);
    Val counted = ops.ne(t, ops.constant(l.ignoreIndex, DType::Int64));
    return std::pair{ops.where(counted, t, ops.constant(int64_t{0}, DType::Int64)), counted};
  };
  auto weightAt = [&](Ops &ops, Val t) { // w[t] (t in range)
    if (!l.hasWeight)
      return l.constant(ops, 1.0);
    IndexExpr at[1] = {0};
    return ops.cast(ctx.loadAlong(ops, l.weight, at, 0, t, false), l.compute);
  };
  auto sampleWeight = [&](Ops &ops, Idx s) {
    auto [t, counted] = classOf(ops, s);
    return ops.where(counted, weightAt(ops, t), l.constant(ops, 0.0));
  };
  auto smoothed = [&](Ops &ops, Idx s) { // -sum_c w[c] t[c] log p[c]
    return ops.load(stats.lse, s) * ops.load(stats.weightedTargets, s) -
           ops.load(stats.weightedInputs, s);
  };
  auto sampleLoss = [&](Ops &ops, Idx s) -> Val {
    if (l.probabilities)
      return smoothed(ops, s);
    auto [t, counted] = classOf(ops, s);
    Val xt = ops.cast(ctx.loadAlong(ops, l.x, l.inputPoint(s, 0), l.classDim, t, false), l.compute);
    Val logProb = l.logits ? xt - ops.load(stats.lse, s) : xt;
    Val v = l.hasWeight ? -(weightAt(ops, t) * logProb) : -logProb;
    if (l.smoothing > 0)
      v = v * l.constant(ops, 1.0 - l.smoothing) + smoothed(ops, s) * (l.uniform(ops));
    return ops.where(counted, v, l.constant(ops, 0.0));
  };
  if (reduction == "none")
    return ctx.define(n.result(0), ctx.pointwise(l.samples, [&](Ops &ops, Idx s) {
      return ops.cast(sampleLoss(ops, s), result);
    }));
  LoopProgram &p = ctx.program();
  BufferId total = p.reduction(ReductionKind::Sum, {}, l.samples, sampleLoss);
  BufferId count;
  if (reduction == "mean" && !l.probabilities)
    count = p.reduction(ReductionKind::Sum, {}, l.samples, sampleWeight);
  ctx.define(n.result(0), ctx.pointwise({}, [&](Ops &ops, Idx i) {
    Val v = ops.load(total, i);
    if (reduction == "mean")
      v = v / (l.probabilities ? sizeAs(ops, numel(l.samples), l.compute) : ops.load(count, i));
    return ops.cast(v, result);
  }));
}

} // namespace

void registerClassLosses(Registry &r) {
  r.add(OpKind::NllLoss, lowerClassLoss);
  r.add(OpKind::CrossEntropy, lowerClassLoss);
}

} // namespace kiln::passes::lower

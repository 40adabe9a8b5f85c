// Compiled derivatives of the op table's remaining pointwise math, activations and shape ops,
// written against the builder like the rules of autograd/derivatives.h (whose eager forms these
// ops take through their decompositions or fused kernels).
#include "passes/autodiff/node_vjp.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace kiln::passes::autodiff {

using ir::OpKind;
using B = GraphRuleBuilder;
using V = ir::Value *;
using Grads = std::vector<V>;
using Sizes = B::Sizes;

namespace {

double number(const ir::Node &n, std::string_view name, double fallback) {
  const ir::Attribute *a = n.attr(name);
  return a ? a->toDouble() : fallback;
}

V square(B &b, V x) { return b.mul(x, x); }

/// The gradient of a broadcast operand, or none when it is a number or needs none.
V toOperand(B &b, V grad, V operand, bool needed) {
  if (!needed || !operand->isTensor())
    return nullptr;
  return b.reduceTo(grad, B::sizes(operand), B::dtype(operand));
}

V reduced(B &b, V per, const ir::Node &n) {
  const ir::Attribute *r = n.attr("reduction");
  const std::string reduction = r ? r->toString() : "mean";
  if (reduction != "mean")
    return per;
  double count = 1;
  for (int64_t s : B::sizes(n.operand(0)))
    count *= static_cast<double>(s);
  return b.scale(per, count == 0 ? 0.0 : 1.0 / count);
}

V unaryGrad(B &b, const ir::Node &n, V g) {
  V x = n.operand(0), y = n.result(0);
  switch (n.op()) {
  case OpKind::Tan:
    return b.mul(g, b.addScalar(square(b, y), 1.0));
  case OpKind::Asin:
    return b.div(g, b.sqrt(b.rsubScalar(square(b, x), 1.0)));
  case OpKind::Acos:
    return b.neg(b.div(g, b.sqrt(b.rsubScalar(square(b, x), 1.0))));
  case OpKind::Atan:
    return b.div(g, b.addScalar(square(b, x), 1.0));
  case OpKind::Sinh:
    return b.mul(g, b.cosh(x));
  case OpKind::Cosh:
    return b.mul(g, b.sinh(x));
  case OpKind::Asinh:
    return b.div(g, b.sqrt(b.addScalar(square(b, x), 1.0)));
  case OpKind::Acosh:
    return b.div(g, b.sqrt(b.addScalar(square(b, x), -1.0)));
  case OpKind::Atanh:
    return b.div(g, b.rsubScalar(square(b, x), 1.0));
  case OpKind::Exp2:
    return b.mul(g, b.scale(y, M_LN2));
  case OpKind::Log2:
    return b.div(g, b.scale(x, M_LN2));
  case OpKind::Log10:
    return b.div(g, b.scale(x, M_LN10));
  case OpKind::Floor:
  case OpKind::Ceil:
  case OpKind::Trunc:
  case OpKind::Round:
  case OpKind::Sign:
    return b.zeros(B::sizes(x), B::dtype(g)); // flat almost everywhere, as torch says
  case OpKind::Frac:
    return g;
  case OpKind::Mish: { // tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x)
    V t = b.tanh(b.softplus(x));
    return b.mul(g, b.add(t, b.mul(b.mul(x, b.sigmoid(x)), b.rsubScalar(square(b, t), 1.0))));
  }
  case OpKind::Celu: {
    double alpha = number(n, "alpha", 1.0);
    return b.where(b.gtScalar(x, 0.0), g, b.mul(g, b.exp(b.scale(x, 1.0 / alpha))));
  }
  case OpKind::Hardsigmoid:
    return b.zeroWhere(b.scale(g, 1.0 / 6.0), b.logicalOr(b.leScalar(x, -3.0), b.geScalar(x, 3.0)));
  case OpKind::Hardswish: {
    V middle = b.mul(g, b.scale(b.addScalar(b.scale(x, 2.0), 3.0), 1.0 / 6.0));
    // torch's kinks: 0 at -3, 1 at 3
    return b.where(b.leScalar(x, -3.0), b.scale(g, 0.0), b.where(b.ltScalar(x, 3.0), middle, g));
  }
  case OpKind::LogSigmoid:
    return b.mul(g, b.rsubScalar(b.sigmoid(x), 1.0));
  case OpKind::Softsign:
    return b.div(g, square(b, b.addScalar(b.abs(x), 1.0)));
  case OpKind::Tanhshrink:
    return b.mul(g, square(b, b.tanh(x)));
  case OpKind::Hardshrink:
  case OpKind::Softshrink:
    return b.zeroWhere(g, b.leScalar(b.abs(x), number(n, "lambd", 0.5)));
  case OpKind::Threshold:
    return b.zeroWhere(g, b.leScalar(x, number(n, "threshold", 0.0)));
  case OpKind::NanToNum: // replaced values are constants
    return b.zeroWhere(g, b.logicalNot(b.op(OpKind::Isfinite, {x})));
  default:
    return nullptr;
  }
}

Grads binaryGrad(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  if (n.numOperands() < 2)
    return {};
  V a = n.operand(0), c = n.operand(1), y = n.result(0);
  switch (n.op()) {
  case OpKind::Remainder:
  case OpKind::Fmod: { // a - q b with q = floor(a / b) (trunc for fmod), flat in q
    V q = b.op(n.op() == OpKind::Remainder ? OpKind::Floor : OpKind::Trunc, {b.div(a, c)});
    return {toOperand(b, g, a, need[0]), toOperand(b, b.neg(b.mul(g, q)), c, need[1])};
  }
  case OpKind::Fmax:
  case OpKind::Fmin: { // the operand fmax/fmin took gets all of g (ties: the first), as torch
    V first = b.op(n.op() == OpKind::Fmax ? OpKind::Ge : OpKind::Le, {a, c});
    V took = b.logicalOr(first, b.op(OpKind::Isnan, {c}));
    return {toOperand(b, b.zeroWhere(g, b.logicalNot(took)), a, need[0]),
            toOperand(b, b.zeroWhere(g, took), c, need[1])};
  }
  case OpKind::Atan2: {
    V r2 = b.add(square(b, a), square(b, c));
    return {toOperand(b, b.mul(g, b.div(c, r2)), a, need[0]),
            toOperand(b, b.neg(b.mul(g, b.div(a, r2))), c, need[1])};
  }
  case OpKind::Hypot:
    return {toOperand(b, b.mul(g, b.div(a, y)), a, need[0]),
            toOperand(b, b.mul(g, b.div(c, y)), c, need[1])};
  case OpKind::Copysign: // torch's: g * (y / a), 0 where a is 0; the sign source gets zeros
    return {toOperand(b, b.mul(g, b.zeroWhere(b.div(y, a), b.eqScalar(a, 0.0))), a, need[0]),
            need[1] && c->isTensor() ? b.zeros(B::sizes(c), B::dtype(c)) : nullptr};
  case OpKind::Lerp: { // a + w (c - a)
    V w = n.operand(2);
    if (!w->isTensor()) { // a number weight: 1 - w in double, not in the tensor's dtype
      const ir::Node *d = w->definingNode();
      if (!d || d->op() != OpKind::Constant)
        throw Unsupported("lerp with a run-time number weight has no compiled derivative yet");
      const double wv = d->attr("value")->toDouble();
      return {toOperand(b, b.scale(g, 1.0 - wv), a, need[0]),
              toOperand(b, b.scale(g, wv), c, need[1]), nullptr};
    }
    return {toOperand(b, b.mul(g, b.rsubScalar(w, 1.0)), a, need[0]),
            toOperand(b, b.mul(g, w), c, need[1]), toOperand(b, b.mul(g, b.sub(c, a)), w, need[2])};
  }
  case OpKind::MseLoss: {
    V per = reduced(b, b.scale(b.sub(a, c), 2.0), n);
    V ga = b.mul(per, g);
    return {toOperand(b, ga, a, need[0]), toOperand(b, b.neg(ga), c, need[1])};
  }
  case OpKind::L1Loss: {
    V ga = b.mul(reduced(b, b.sign(b.sub(a, c)), n), g);
    return {toOperand(b, ga, a, need[0]), toOperand(b, b.neg(ga), c, need[1])};
  }
  default:
    return {};
  }
}

V repeatGrad(B &b, const ir::Node &n, V g) {
  Sizes xs = B::sizes(n.operand(0)), repeats = n.attr("repeats")->toInts();
  Sizes padded(repeats.size() - xs.size(), 1);
  padded.insert(padded.end(), xs.begin(), xs.end());
  Sizes split, dims;
  for (size_t d = 0; d < repeats.size(); ++d) {
    dims.push_back(static_cast<int64_t>(split.size()));
    split.push_back(repeats[d]);
    split.push_back(padded[d]);
  }
  return b.reshape(b.sum(b.reshape(g, split), dims, false), xs);
}

V nllLossGrad(B &b, const ir::Node &n, V g) {
  V x = n.operand(0), target = n.operand(1);
  Sizes xs = B::sizes(x);
  if (n.numOperands() > 2 || xs.size() != 2)
    throw Unsupported("nll_loss: compiled derivatives cover (N, C) inputs without weights");
  const ir::Attribute *ignore = n.attr("ignore_index");
  V valid = b.op(OpKind::Ne, {target, b.integer(ignore ? ignore->toInt() : -100)});
  V safe = b.where(valid, target, b.integer(0));
  V onehot = b.cast(b.op(OpKind::OneHot, {safe}, {{"num_classes", xs[1]}}), B::dtype(x));
  V rows = b.neg(b.mul(onehot, b.unsqueeze(b.cast(valid, B::dtype(x)), 1)));
  const ir::Attribute *r = n.attr("reduction");
  const std::string reduction = r ? r->toString() : "mean";
  if (reduction == "none")
    return b.mul(rows, b.unsqueeze(g, 1));
  if (reduction == "sum")
    return b.mul(rows, g);
  return b.mul(rows, b.div(g, b.sum(b.cast(valid, B::dtype(x)), std::nullopt, false)));
}

/// rms_norm: x * rstd * w with rstd = (mean(x^2) + eps)^-1/2 over the trailing dims.
Grads rmsNormGrad(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  V x = n.operand(0);
  V w = n.numOperands() > 1 ? n.operand(1) : nullptr;
  Sizes xs = B::sizes(x);
  const int64_t rank = static_cast<int64_t>(xs.size());
  const int64_t normDims = static_cast<int64_t>(n.attr("normalized_shape")->toSymInts().size());
  Sizes dims;
  for (int64_t d = rank - normDims; d < rank; ++d)
    dims.push_back(d);
  const double eps = n.attr("eps")                   ? n.attr("eps")->toDouble()
                     : B::dtype(x) == DType::Float64 ? std::numeric_limits<double>::epsilon()
                                                     : std::numeric_limits<float>::epsilon();
  double count = 1;
  for (int64_t d : dims)
    count *= static_cast<double>(xs[d]);
  auto mean = [&](V v) { return b.scale(b.sum(v, dims, true), 1.0 / count); };
  V rstd = b.powScalar(b.addScalar(mean(square(b, x)), eps), -0.5);
  V xhat = b.mul(x, rstd);
  Grads r(2);
  if (need[0]) {
    V gw = w ? b.mul(g, w) : g;
    r[0] = b.mul(rstd, b.sub(gw, b.mul(xhat, mean(b.mul(gw, xhat)))));
  }
  if (w && need[1])
    r[1] = b.reduceTo(b.mul(g, xhat), B::sizes(w), B::dtype(w));
  return r;
}

/// scatter_reduce through the rule eager autograd runs (derivatives.h); prod is not written.
Grads scatterReduceGrad(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  const std::string reduce = n.attr("reduce")->toString();
  if (reduce == "prod")
    throw Unsupported("scatter_reduce 'prod' has no compiled derivative");
  const ir::Attribute *inc = n.attr("include_self");
  return autograd::rules::scatterReduce(
      b, g, n.operand(0), n.operand(1), n.operand(2), n.result(0), n.attr("dim")->toInt(),
      reduce == "amax" || reduce == "amin", reduce == "mean", !inc || inc->toBool(), need);
}

/// The vector p-norm: sign(x) |x|^(p-1) / |x|_p^(p-1) (x / n for p = 2), zero where the norm is;
/// the inf-norms give g to the extremes of |x|, split evenly (as torch); p = 0 is flat.
V normGrad(B &b, const ir::Node &n, V g) {
  V x = n.operand(0), y = n.result(0);
  const double p = number(n, "p", 2.0);
  const int64_t rank = x->meta().rank();
  const ir::Attribute *d = n.attr("dim");
  B::DimList dims = d && !d->toInts().empty() ? B::DimList(d->toInts()) : std::nullopt;
  const bool keepdim = n.attr("keepdim") && n.attr("keepdim")->toBool();
  if (std::isinf(p)) {
    V ax = b.abs(x);
    return b.mul(autograd::rules::amax(b, g, ax, y, dims, keepdim), b.sign(x));
  }
  if (p == 0.0)
    return b.zeros(B::sizes(x), B::dtype(g));
  if (p < 1.0)
    throw Unsupported("norm with 0 < p < 1 has no compiled derivative yet");
  V gk = keepdim ? g : b.unsqueezeReduced(g, dims, rank);
  if (p == 1.0)
    return b.mul(gk, b.sign(x));
  V nk = keepdim ? y : b.unsqueezeReduced(y, dims, rank);
  V local = p == 2.0
                ? b.div(x, nk)
                : b.div(b.mul(b.sign(x), b.powScalar(b.abs(x), p - 1.0)), b.powScalar(nk, p - 1.0));
  return b.zeroWhere(b.mul(gk, local), b.eqScalar(nk, 0.0));
}

/// Exclusive products along dim from the left and from the right: their product at i is the
/// product of every other element, exact with zeros (as eager's prod rule).
V othersProduct(B &b, V x, int64_t dim) {
  Sizes xs = B::sizes(x);
  const int64_t n = xs[dim];
  Sizes edge = xs;
  edge[dim] = 1;
  V ones = b.op(OpKind::Full, {},
                {{"size", std::vector<ir::SymInt>(edge.begin(), edge.end())},
                 {"dtype", B::dtype(x)},
                 {"value", 1.0}});
  auto exclusive = [&](V v) {
    return b.op(OpKind::Cumprod, {b.cat({ones, b.slice(v, dim, 0, n - 1, 1)}, dim)},
                {{"dim", dim}});
  };
  return b.mul(exclusive(x), b.flip(exclusive(b.flip(x, {dim})), {dim}));
}

V prodGrad(B &b, const ir::Node &n, V g) {
  V x = b.cast(n.operand(0), B::dtype(n.result(0)));
  Sizes xs = B::sizes(x);
  const DType dt = B::dtype(n.operand(0));
  if (xs.empty())
    return b.cast(g, dt);
  const ir::Attribute *d = n.attr("dim");
  if (!d || d->toInts().empty()) { // the product of all elements
    V flat = b.reshape(x, {-1});
    if (B::sizes(flat)[0] == 0)
      return b.zeros(xs, dt);
    return b.cast(b.reshape(b.mul(g, othersProduct(b, flat, 0)), xs), dt);
  }
  const int64_t dim = wrapDim(d->toInts().at(0), static_cast<int64_t>(xs.size()));
  if (xs[dim] == 0)
    return b.zeros(xs, dt);
  const bool keepdim = n.attr("keepdim") && n.attr("keepdim")->toBool();
  V gk = keepdim ? g : b.unsqueeze(g, dim);
  return b.cast(b.mul(gk, othersProduct(b, x, dim)), dt);
}

/// grad_i = sum over j >= i of g_j exp(x_i - y_j), in log space with g split by sign (eager's
/// rule): exp(x + rlcse(log g+ - y)) - exp(x + rlcse(log g- - y)), rlcse the reversed scan.
V logcumsumexpGrad(B &b, const ir::Node &n, V g) {
  V x = n.operand(0), y = n.result(0);
  const int64_t rank = x->meta().rank();
  if (rank == 0)
    return g;
  const int64_t dim = wrapDim(n.attr("dim")->toInt(), rank);
  auto part = [&](V gp) {
    V t = b.flip(b.sub(b.log(gp), y), {dim});
    V r = b.flip(b.op(OpKind::Logcumsumexp, {t}, {{"dim", dim}}), {dim});
    return b.exp(b.add(x, r));
  };
  V zero = b.number(0.0);
  return b.sub(part(b.op(OpKind::Maximum, {g, zero})),
               part(b.op(OpKind::Maximum, {b.neg(g), zero})));
}

/// var and std over `dim` (all when absent) with `correction` (default 1), by eager's rule.
V varianceGrad(B &b, const ir::Node &n, V g) {
  V x = n.operand(0);
  Sizes xs = B::sizes(x);
  const int64_t rank = static_cast<int64_t>(xs.size());
  const ir::Attribute *d = n.attr("dim");
  B::DimList dims = d && !d->toInts().empty() ? B::DimList(d->toInts()) : std::nullopt;
  if (rank == 0) // one element: mean and x coincide, the spread is flat
    return b.zeros(xs, B::dtype(x));
  const double count = reducedCount(xs, dims);
  const bool keepdim = n.attr("keepdim") && n.attr("keepdim")->toBool();
  std::optional<V> stdOut;
  if (n.op() == OpKind::Std)
    stdOut = n.result(0);
  return autograd::rules::var(b, g, x, dims, number(n, "correction", 1.0), keepdim, count, stdOut);
}

} // namespace

bool hasExtraVjp(OpKind op) {
  switch (op) {
  case OpKind::Tan:
  case OpKind::Asin:
  case OpKind::Acos:
  case OpKind::Atan:
  case OpKind::Sinh:
  case OpKind::Cosh:
  case OpKind::Asinh:
  case OpKind::Acosh:
  case OpKind::Atanh:
  case OpKind::Exp2:
  case OpKind::Log2:
  case OpKind::Log10:
  case OpKind::Floor:
  case OpKind::Ceil:
  case OpKind::Trunc:
  case OpKind::Round:
  case OpKind::Sign:
  case OpKind::Frac:
  case OpKind::Mish:
  case OpKind::Celu:
  case OpKind::Hardsigmoid:
  case OpKind::Hardswish:
  case OpKind::LogSigmoid:
  case OpKind::Softsign:
  case OpKind::Tanhshrink:
  case OpKind::Hardshrink:
  case OpKind::Softshrink:
  case OpKind::Threshold:
  case OpKind::Remainder:
  case OpKind::Fmod:
  case OpKind::Atan2:
  case OpKind::Hypot:
  case OpKind::Copysign:
  case OpKind::Lerp:
  case OpKind::MseLoss:
  case OpKind::L1Loss:
  case OpKind::Tril:
  case OpKind::Triu:
  case OpKind::Flip:
  case OpKind::Roll:
  case OpKind::Logsumexp:
  case OpKind::Cumsum:
  case OpKind::Gather:
  case OpKind::IndexSelect:
  case OpKind::Repeat:
  case OpKind::NllLoss:
  case OpKind::RmsNorm:
  case OpKind::NanToNum:
  case OpKind::Fmax:
  case OpKind::Fmin:
  case OpKind::ScatterAdd:
  case OpKind::ScatterReduce:
  case OpKind::IndexAdd:
  case OpKind::Norm:
  case OpKind::Scatter:
  case OpKind::Prod:
  case OpKind::Cumprod:
  case OpKind::Logcumsumexp:
  case OpKind::Var:
  case OpKind::Std:
    return true;
  default:
    return false;
  }
}

std::optional<Grads> extraVjp(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  if (!hasExtraVjp(n.op()))
    return std::nullopt;
  V x = n.operand(0);
  if (V r = unaryGrad(b, n, g))
    return Grads{r};
  if (Grads r = binaryGrad(b, n, g, need); !r.empty())
    return r;
  const int64_t rank = x->isTensor() ? x->meta().rank() : 0;
  switch (n.op()) {
  case OpKind::Tril:
    return Grads{b.tril(g, n.attr("diagonal") ? n.attr("diagonal")->toInt() : 0)};
  case OpKind::Triu:
    return Grads{b.triu(g, n.attr("diagonal") ? n.attr("diagonal")->toInt() : 0)};
  case OpKind::Flip:
    return Grads{b.flip(g, n.attr("dims") ? n.attr("dims")->toInts() : Sizes{})};
  case OpKind::Roll: {
    Sizes shifts = n.attr("shifts")->toInts();
    for (int64_t &s : shifts)
      s = -s;
    if (!n.attr("dims")) // a roll of the flattened tensor
      return Grads{b.reshape(b.roll(b.reshape(g, {-1}), shifts, {0}), B::sizes(x))};
    return Grads{b.roll(g, shifts, n.attr("dims")->toInts())};
  }
  case OpKind::Logsumexp: {
    B::DimList dims = n.attr("dim")->toInts();
    return Grads{autograd::rules::logsumexp(b, g, x, n.result(0), dims,
                                            n.attr("keepdim") && n.attr("keepdim")->toBool())};
  }
  case OpKind::Cumsum: { // the reversed running sum of g
    const int64_t dim = wrapDim(n.attr("dim")->toInt(), rank);
    V rev = b.flip(g, {dim});
    V sums = b.op(OpKind::Cumsum, {rev}, {{"dim", dim}});
    return Grads{b.cast(b.flip(sums, {dim}), B::dtype(x))};
  }
  case OpKind::Gather:
    return Grads{b.scatterAdd(B::sizes(x), n.attr("dim")->toInt(), n.operand(1), g), nullptr};
  case OpKind::IndexSelect:
    return Grads{b.indexAdd(B::sizes(x), n.attr("dim")->toInt(), n.operand(1), g), nullptr};
  case OpKind::Repeat:
    return Grads{repeatGrad(b, n, g)};
  case OpKind::NllLoss:
    return Grads{nllLossGrad(b, n, g), nullptr, nullptr};
  case OpKind::RmsNorm:
    return rmsNormGrad(b, n, g, need);
  case OpKind::Norm:
    return Grads{normGrad(b, n, g)};
  case OpKind::Prod:
    return Grads{prodGrad(b, n, g)};
  case OpKind::Logcumsumexp:
    return Grads{logcumsumexpGrad(b, n, g)};
  case OpKind::Cumprod: // eager's exact reverse scan, as an extern
    return Grads{b.op(OpKind::CumprodBackward, {x, g},
                      {{"dim", wrapDim(n.attr("dim")->toInt(), std::max<int64_t>(rank, 1))}})};
  case OpKind::Var:
  case OpKind::Std:
    return Grads{varianceGrad(b, n, g)};
  case OpKind::Scatter: { // the overwritten positions of self get none; src gets g there
    if (n.attr("reduce"))
      throw Unsupported("scatter with reduce has no compiled derivative yet");
    V index = n.operand(1);
    const int64_t dim = n.attr("dim")->toInt();
    Grads r(3);
    if (need[0])
      r[0] =
          b.op(OpKind::Scatter, {g, index, b.zeros(B::sizes(index), B::dtype(g))}, {{"dim", dim}});
    if (need[2])
      r[2] = b.op(OpKind::Gather, {g, index}, {{"dim", dim}});
    return r;
  }
  case OpKind::ScatterReduce:
    return scatterReduceGrad(b, n, g, need);
  case OpKind::ScatterAdd: // self + the scattered src: src's gradient is g at its targets
    return Grads{need[0] ? g : nullptr, nullptr,
                 need[2]
                     ? b.op(OpKind::Gather, {g, n.operand(1)}, {{"dim", n.attr("dim")->toInt()}})
                     : nullptr};
  case OpKind::IndexAdd: { // self + alpha * src placed at index along dim
    V rows = b.op(OpKind::IndexSelect, {g, n.operand(1)}, {{"dim", n.attr("dim")->toInt()}});
    return Grads{need[0] ? g : nullptr, nullptr,
                 need[2] ? b.scale(rows, number(n, "alpha", 1.0)) : nullptr};
  }
  default:
    break;
  }
  throw Unsupported(fmt::format("'{}' has no compiled derivative yet", n.keyword()));
}

} // namespace kiln::passes::autodiff

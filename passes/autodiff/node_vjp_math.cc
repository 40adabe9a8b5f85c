// Compiled derivatives of the op table's remaining pointwise math, activations, scans and index
// ops: each node's attributes read into the rules eager autograd runs (autograd/derivatives_*.h).
// The rules written here (losses, rms_norm, var/std forms) are those of ops whose eager forms
// are decompositions or fused kernels with no rule of their own.
#include "passes/autodiff/node_vjp.h"

#include "autograd/derivatives_layout.h"
#include "autograd/derivatives_math.h"

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
  namespace rules = autograd::rules;
  V x = n.operand(0), y = n.result(0);
  switch (n.op()) {
  case OpKind::Tan:
    return rules::tan(b, g, y);
  case OpKind::Asin:
    return rules::asin(b, g, x);
  case OpKind::Acos:
    return rules::acos(b, g, x);
  case OpKind::Atan:
    return rules::atan(b, g, x);
  case OpKind::Sinh:
    return rules::sinh(b, g, x);
  case OpKind::Cosh:
    return rules::cosh(b, g, x);
  case OpKind::Asinh:
    return rules::asinh(b, g, x);
  case OpKind::Acosh:
    return rules::acosh(b, g, x);
  case OpKind::Atanh:
    return rules::atanh(b, g, x);
  case OpKind::Exp2:
    return rules::exp2(b, g, y);
  case OpKind::Log2:
    return rules::log2(b, g, x);
  case OpKind::Log10:
    return rules::log10(b, g, x);
  case OpKind::Floor:
  case OpKind::Ceil:
  case OpKind::Trunc:
  case OpKind::Round:
  case OpKind::Sign:
    return rules::flat(b, g);
  case OpKind::Frac:
    return g;
  case OpKind::Mish:
    return rules::mish(b, g, x);
  case OpKind::Celu:
    return rules::celu(b, g, x, number(n, "alpha", 1.0));
  case OpKind::Hardsigmoid:
    return rules::hardsigmoid(b, g, x);
  case OpKind::Hardswish:
    return rules::hardswish(b, g, x);
  case OpKind::LogSigmoid:
    return rules::logSigmoid(b, g, x);
  case OpKind::Softsign:
    return rules::softsign(b, g, x);
  case OpKind::Tanhshrink:
    return rules::tanhshrink(b, g, x);
  case OpKind::Hardshrink:
  case OpKind::Softshrink:
    return rules::shrink(b, g, x, number(n, "lambd", 0.5));
  case OpKind::Threshold:
    return rules::threshold(b, g, x, number(n, "threshold", 0.0));
  case OpKind::NanToNum:
    return rules::nanToNum(b, g, x);
  default:
    return nullptr;
  }
}

/// Both operands' gradients from a binary rule, each reduced to its operand where needed.
Grads reducedPair(B &b, const autograd::rules::Pair<B> &grads, V a, V c,
                  autograd::rules::Needs need) {
  return {toOperand(b, grads[0], a, need[0]), toOperand(b, grads[1], c, need[1])};
}

Grads binaryGrad(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  namespace rules = autograd::rules;
  if (n.numOperands() < 2)
    return {};
  V a = n.operand(0), c = n.operand(1), y = n.result(0);
  switch (n.op()) {
  case OpKind::Remainder:
  case OpKind::Fmod:
    return reducedPair(b, rules::remainder(b, g, a, c, n.op() == OpKind::Remainder), a, c, need);
  case OpKind::Fmax:
  case OpKind::Fmin:
    return reducedPair(b, rules::fmaxFmin(b, g, a, c, n.op() == OpKind::Fmax), a, c, need);
  case OpKind::Atan2:
    return reducedPair(b, rules::atan2(b, g, a, c), a, c, need);
  case OpKind::Hypot:
    return reducedPair(b, rules::hypot(b, g, a, c, y), a, c, need);
  case OpKind::Copysign: // torch's: g * (y / a), 0 where a is 0; the sign source gets zeros
    return {toOperand(b, b.mul(g, b.zeroWhere(b.div(y, a), b.eqScalar(a, 0.0))), a, need[0]),
            need[1] && c->isTensor() ? b.zeros(B::sizes(c), B::dtype(c)) : nullptr};
  case OpKind::Lerp: { // a + w (c - a)
    V w = n.operand(2);
    V keep;
    if (w->isTensor()) {
      keep = b.rsubScalar(w, 1.0);
    } else { // a number weight: 1 - w in double, not in the tensor's dtype
      const ir::Node *d = w->definingNode();
      if (!d || d->op() != OpKind::Constant)
        throw Unsupported("lerp with a run-time number weight has no compiled derivative yet");
      keep = b.number(1.0 - d->attr("value")->toDouble());
    }
    Grads r = rules::lerp(b, g, a, c, w, keep, need);
    for (size_t k = 0; k < r.size(); ++k)
      r[k] = r[k] ? toOperand(b, r[k], n.operand(k), true) : nullptr;
    return r;
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

V nllLossGrad(B &b, const ir::Node &n, V g) {
  V x = n.operand(0), target = n.operand(1);
  V weight = n.numOperands() > 2 ? n.operand(2) : nullptr;
  Sizes xs = B::sizes(x);
  if (xs.size() != 2)
    throw Unsupported("nll_loss: compiled derivatives cover (N, C) inputs");
  const ir::Attribute *ignore = n.attr("ignore_index");
  V valid = b.op(OpKind::Ne, {target, b.integer(ignore ? ignore->toInt() : -100)});
  V safe = b.where(valid, target, b.integer(0));
  V onehot = b.cast(b.op(OpKind::OneHot, {safe}, {{"num_classes", xs[1]}}), B::dtype(x));
  // Each row's weight: its target class's (1 without weights), 0 for an ignored row; the mean
  // divides by their sum, as the forward does. The class weights take no gradient (torch's).
  V rowWeight = b.cast(valid, B::dtype(x));
  if (weight)
    rowWeight =
        b.mul(rowWeight, b.sum(b.mul(onehot, b.cast(weight, B::dtype(x))), Sizes{1}, false));
  V rows = b.neg(b.mul(onehot, b.unsqueeze(rowWeight, 1)));
  const ir::Attribute *r = n.attr("reduction");
  const std::string reduction = r ? r->toString() : "mean";
  if (reduction == "none")
    return b.mul(rows, b.unsqueeze(g, 1));
  if (reduction == "sum")
    return b.mul(rows, g);
  return b.mul(rows, b.div(g, b.sum(rowWeight, std::nullopt, false)));
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
  V rstd = b.powScalar(b.addScalar(mean(autograd::rules::squared(b, x)), eps), -0.5);
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

/// The vector p-norm through the rule eager autograd runs; 0 < p < 1 divides by zero at zeros.
V normGrad(B &b, const ir::Node &n, V g) {
  const double p = number(n, "p", 2.0);
  if (p > 0.0 && p < 1.0)
    throw Unsupported("norm with 0 < p < 1 has no compiled derivative yet");
  const ir::Attribute *d = n.attr("dim");
  B::DimList dims = d && !d->toInts().empty() ? B::DimList(d->toInts()) : std::nullopt;
  return autograd::rules::vectorNorm(b, g, n.operand(0), n.result(0), p, dims,
                                     n.attr("keepdim") && n.attr("keepdim")->toBool());
}

V prodGrad(B &b, const ir::Node &n, V g) {
  const DType dt = B::dtype(n.operand(0));
  V x = b.cast(n.operand(0), B::dtype(n.result(0)));
  const int64_t rank = static_cast<int64_t>(B::sizes(x).size());
  const ir::Attribute *d = n.attr("dim");
  std::optional<int64_t> dim;
  if (d && !d->toInts().empty())
    dim = wrapDim(d->toInts().at(0), std::max<int64_t>(rank, 1));
  const bool keepdim = n.attr("keepdim") && n.attr("keepdim")->toBool();
  return b.cast(autograd::rules::prod(b, g, x, dim, keepdim), dt);
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
  case OpKind::Roll:
    return Grads{autograd::rules::roll(b, g, n.attr("shifts")->toInts(),
                                       n.attr("dims") ? n.attr("dims")->toInts() : Sizes{})};
  case OpKind::Logsumexp: {
    B::DimList dims = n.attr("dim")->toInts();
    return Grads{autograd::rules::logsumexp(b, g, x, n.result(0), dims,
                                            n.attr("keepdim") && n.attr("keepdim")->toBool())};
  }
  case OpKind::Cumsum:
    return Grads{autograd::rules::cumsum(
        b, g, wrapDim(n.attr("dim")->toInt(), std::max<int64_t>(rank, 1)), B::dtype(x))};
  case OpKind::Gather:
    return Grads{autograd::rules::gather(b, g, B::sizes(x), n.attr("dim")->toInt(), n.operand(1)),
                 nullptr};
  case OpKind::IndexSelect:
    return Grads{
        autograd::rules::indexSelect(b, g, B::sizes(x), n.attr("dim")->toInt(), n.operand(1)),
        nullptr};
  case OpKind::Repeat:
    return Grads{autograd::rules::repeat(b, g, B::sizes(x), n.attr("repeats")->toInts())};
  case OpKind::NllLoss:
    return Grads{nllLossGrad(b, n, g), nullptr, nullptr};
  case OpKind::RmsNorm:
    return rmsNormGrad(b, n, g, need);
  case OpKind::Norm:
    return Grads{normGrad(b, n, g)};
  case OpKind::Prod:
    return Grads{prodGrad(b, n, g)};
  case OpKind::Logcumsumexp:
    if (rank == 0)
      return Grads{g};
    return Grads{
        autograd::rules::logcumsumexp(b, g, x, n.result(0), wrapDim(n.attr("dim")->toInt(), rank))};
  case OpKind::Cumprod: // eager's exact reverse scan, as an extern
    return Grads{b.op(OpKind::CumprodBackward, {x, g},
                      {{"dim", wrapDim(n.attr("dim")->toInt(), std::max<int64_t>(rank, 1))}})};
  case OpKind::Var:
  case OpKind::Std:
    return Grads{varianceGrad(b, n, g)};
  case OpKind::Scatter:
    if (n.attr("reduce"))
      throw Unsupported("scatter with reduce has no compiled derivative yet");
    return autograd::rules::scatter(b, g, n.attr("dim")->toInt(), n.operand(1), need);
  case OpKind::ScatterReduce:
    return scatterReduceGrad(b, n, g, need);
  case OpKind::ScatterAdd:
    return autograd::rules::scatterAdd(b, g, n.attr("dim")->toInt(), n.operand(1), need);
  case OpKind::IndexAdd:
    return autograd::rules::indexAdd(b, g, n.attr("dim")->toInt(), n.operand(1),
                                     B::sizes(n.operand(2)), number(n, "alpha", 1.0), need);
  default:
    break;
  }
  throw Unsupported(fmt::format("'{}' has no compiled derivative yet", n.keyword()));
}

} // namespace kiln::passes::autodiff

// Regression-style losses: one loss value per (broadcast) element, then an optional reduction.
#include "runtime/ops/loss.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/elementwise_impl.h"
#include "runtime/ops/loss_impl.h"

namespace kiln::ops {

using namespace detail;

Reduction reductionFromInt(int64_t code, const char *op) {
  KILN_CHECK_KIND(Value, code >= 0 && code <= 2,
                  "{}: {} is not a valid value for reduction (expected 0 = 'none', 1 = 'mean' or "
                  "2 = 'sum')",
                  op, code);
  return static_cast<Reduction>(code);
}

namespace {

/// The floating dtype a regression loss of input and target computes in; integers are rejected
/// as torch rejects them (its kernels are floating-only).
DType floatingLossType(const char *op, const Tensor &input, const Tensor &target) {
  DType t = resultTypeOf({input, target});
  KILN_CHECK_KIND(NotImplemented, isFloating(t),
                  "{}: not implemented for dtype {} (input {}, target {}): expected floating "
                  "point input or target",
                  op, dtypeName(t), dtypeName(input.dtype()), dtypeName(target.dtype()));
  return t;
}

void checkWeightShape(const char *op, const Tensor &weight, const Tensor &input) {
  KILN_CHECK_KIND(Value, weight.sizes() == input.sizes(),
                  "{}: weights and input must have the same size, but got weight of shape {} and "
                  "input of shape {}",
                  op, weight.shapeStr(), input.shapeStr());
}

double tensorSum(const Tensor &t) {
  Tensor d = t.to(DType::Float64).contiguous();
  return sumContiguous(d.data<double>(), d.numel());
}

/// mse/l1 with a weight: torch's composition sum(w * l) / sum(w) for Mean.
Tensor weightedLoss(const char *op, const Tensor &values, const Tensor &weight, const Tensor &input,
                    Reduction reduction) {
  checkWeightShape(op, weight, input);
  Tensor weighted = mul(values, weight).contiguous();
  if (reduction != Reduction::Mean)
    return reduceLoss(op, weighted, reduction, 0.0);
  Tensor total = reduceLoss(op, weighted, Reduction::Sum, 0.0);
  return scalarResult(total.to(DType::Float64).item().toDouble() / tensorSum(weight),
                      weighted.dtype());
}

/// l1_loss on integers: exact int64 arithmetic; Sum returns int64 like torch.sum.
Tensor integerL1(const Tensor &input, const Tensor &target, DType out, Reduction reduction) {
  const char *op = "l1_loss";
  KILN_CHECK_KIND(Type, out != DType::Bool,
                  "{}: subtraction, the `-` operator, with two bool tensors is not supported", op);
  KILN_CHECK(reduction != Reduction::Mean,
             "{}: reduction='mean' could not infer an output dtype for the integer loss of dtype "
             "{}: use floating point inputs or reduction='sum'",
             op, dtypeName(out));
  Tensor values = elementwiseLoss<true>(op, input, target, DType::Int64, out,
                                        [](auto x, auto t) { return x > t ? x - t : t - x; });
  if (reduction == Reduction::None)
    return values;
  Tensor v = values.to(DType::Int64).contiguous();
  int64_t s = 0;
  for (int64_t i = 0, n = v.numel(); i < n; ++i)
    s += v.data<int64_t>()[i];
  return Tensor::scalarTensor(Scalar(s), DType::Int64);
}

} // namespace

Tensor mseLoss(const Tensor &input, const Tensor &target, const Tensor &weight,
               Reduction reduction) {
  const char *op = "mse_loss";
  DType t = floatingLossType(op, input, target);
  Tensor values = elementwiseLoss(op, input, target, computeDType(t), t, [](auto x, auto y) {
    auto d = x - y;
    return d * d;
  });
  if (weight.defined())
    return weightedLoss(op, values, weight, input, reduction);
  return reduceLoss(op, values, reduction, static_cast<double>(values.numel()));
}

Tensor l1Loss(const Tensor &input, const Tensor &target, const Tensor &weight,
              Reduction reduction) {
  const char *op = "l1_loss";
  DType t = resultTypeOf({input, target});
  if (!isFloating(t) && !weight.defined())
    return integerL1(input, target, t, reduction);
  t = floatingLossType(op, input, target);
  Tensor values = elementwiseLoss(op, input, target, computeDType(t), t,
                                  [](auto x, auto y) { return std::abs(x - y); });
  if (weight.defined())
    return weightedLoss(op, values, weight, input, reduction);
  return reduceLoss(op, values, reduction, static_cast<double>(values.numel()));
}

Tensor smoothL1Loss(const Tensor &input, const Tensor &target, Reduction reduction, double beta) {
  const char *op = "smooth_l1_loss";
  KILN_CHECK(beta >= 0, "{}: smooth_l1_loss does not support negative values for beta (got {})", op,
             beta);
  if (beta == 0.0)
    return l1Loss(input, target, Tensor(), reduction);
  DType t = floatingLossType(op, input, target);
  Tensor values = elementwiseLoss(op, input, target, computeDType(t), t, [beta](auto x, auto y) {
    using T = decltype(x);
    T z = std::abs(x - y);
    T b = static_cast<T>(beta);
    return z < b ? T(0.5) * z * z / b : z - T(0.5) * b;
  });
  return reduceLoss(op, values, reduction, static_cast<double>(values.numel()));
}

Tensor huberLoss(const Tensor &input, const Tensor &target, const Tensor &weight,
                 Reduction reduction, double delta) {
  const char *op = "huber_loss";
  KILN_CHECK(delta > 0, "{}: huber_loss does not support non-positive values for delta (got {})",
             op, delta);
  DType t = floatingLossType(op, input, target);
  KILN_CHECK(lossCanCast(t, input.dtype()),
             "{}: result type {} can't be cast to the desired output type {} (the input's dtype)",
             op, dtypeName(t), dtypeName(input.dtype()));
  Tensor values =
      elementwiseLoss(op, input, target, computeDType(t), input.dtype(), [delta](auto x, auto y) {
        using T = decltype(x);
        T z = std::abs(x - y);
        T d = static_cast<T>(delta);
        return z < d ? T(0.5) * z * z : d * (z - T(0.5) * d);
      });
  if (weight.defined()) {
    checkWeightShape(op, weight, input);
    values = mul(values, weight).contiguous();
  }
  return reduceLoss(op, values, reduction, static_cast<double>(values.numel()));
}

Tensor klDiv(const Tensor &input, const Tensor &target, Reduction reduction, bool logTarget) {
  const char *op = "kl_div";
  DType t = resultTypeOf({input, target});
  KILN_CHECK(isFloating(t), "{}: integral inputs not supported (input {}, target {})", op,
             dtypeName(input.dtype()), dtypeName(target.dtype()));
  Tensor values =
      elementwiseLoss(op, input, target, computeDType(t), t, [logTarget](auto x, auto y) {
        using T = decltype(x);
        if (logTarget)
          return std::exp(y) * (y - x);
        T xlogy = y == T(0) ? T(0) : y * std::log(y); // xlogy(0, 0) = 0; NaN stays NaN
        return xlogy - y * x;
      });
  return reduceLoss(op, values, reduction, static_cast<double>(values.numel()));
}

} // namespace kiln::ops

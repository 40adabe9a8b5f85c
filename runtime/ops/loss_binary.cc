// Binary cross entropy on probabilities and on logits.
#include "runtime/ops/loss.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/elementwise_impl.h"
#include "runtime/ops/loss_impl.h"

namespace kiln::ops {

using namespace detail;

namespace {

/// torch requires probabilities (and targets) of binary_cross_entropy to lie in [0, 1]; NaN
/// fails the check too.
void checkUnitInterval(const char *op, const char *name, const Tensor &t) {
  Tensor c = t.contiguous();
  bool ok = dispatchNormFloat(op, c.dtype(), [&]<typename T>() {
    const T *p = c.data<T>();
    bool inside = true;
    for (int64_t i = 0, n = c.numel(); i < n; ++i) {
      double v = widen(p[i]);
      inside = inside && v >= 0.0 && v <= 1.0;
    }
    return inside;
  });
  KILN_CHECK(ok, "{}: all elements of {} should be between 0 and 1", op, name);
}

/// Applies an optional elementwise weight to per-element losses (broadcast into their shape).
Tensor applyWeight(const char *op, const Tensor &values, const Tensor &weight, DType out) {
  if (!weight.defined())
    return values;
  checkBroadcastsTo(op, "weight", weight, values.sizes());
  return mul(values, weight).to(out).contiguous();
}

/// The logits loss with a pos_weight: three inputs, so it runs its own kernel.
template <typename T>
void logitsWithPosWeight(const Tensor &res, const Tensor &x, const Tensor &t, const Tensor &pw) {
  Tensor ins[3] = {x, t, pw};
  cpuKernel<T, T, T, T>(res, ins, [](T xv, T tv, T pv) -> T {
    T softplusNeg = std::log1p(std::exp(-std::abs(xv))) + std::max(-xv, T(0));
    return (T(1) - tv) * xv + (T(1) + (pv - T(1)) * tv) * softplusNeg;
  });
}

} // namespace

Tensor binaryCrossEntropy(const Tensor &input, const Tensor &target, const Tensor &weight,
                          Reduction reduction) {
  const char *op = "binary_cross_entropy";
  KILN_CHECK_KIND(Value, input.sizes() == target.sizes(),
                  "{}: using a target size ({}) that is different to the input size ({}) is "
                  "deprecated. Please ensure they have the same size.",
                  op, target.shapeStr(), input.shapeStr());
  KILN_CHECK(input.dtype() == target.dtype(),
             "{}: expected input and target of the same dtype, but got input {} and target {}", op,
             dtypeName(input.dtype()), dtypeName(target.dtype()));
  checkFloatInput(op, input);
  checkUnitInterval(op, "input", input);
  checkUnitInterval(op, "target", target);
  DType out = input.dtype();
  Tensor values = elementwiseLoss(op, input, target, computeDType(out), out, [](auto x, auto t) {
    using T = decltype(x);
    T logX = std::max(std::log(x), T(-100));
    T log1mX = std::max(std::log1p(-x), T(-100));
    return (t - T(1)) * log1mX - t * logX;
  });
  values = applyWeight(op, values, weight, out);
  return reduceLoss(op, values, reduction, static_cast<double>(values.numel()));
}

Tensor binaryCrossEntropyWithLogits(const Tensor &input, const Tensor &target, const Tensor &weight,
                                    const Tensor &posWeight, Reduction reduction) {
  const char *op = "binary_cross_entropy_with_logits";
  KILN_CHECK_KIND(Value, input.sizes() == target.sizes(),
                  "{}: target size ({}) must be the same as input size ({})", op, target.shapeStr(),
                  input.shapeStr());
  DType common = resultTypeOf({input, target});
  KILN_CHECK_KIND(NotImplemented, isFloating(common),
                  "{}: not implemented for dtype {}: expected floating point input or target", op,
                  dtypeName(common));
  // torch accumulates the loss in a tensor of the target's dtype.
  DType out = target.dtype();
  KILN_CHECK(lossCanCast(common, out),
             "{}: result type {} can't be cast to the desired output type {} (the target's dtype)",
             op, dtypeName(common), dtypeName(out));
  checkBroadcastsTo(op, "pos_weight", posWeight, input.sizes());
  DType compute = computeDType(out);
  Tensor values;
  if (posWeight.defined()) {
    const Shape &shape = input.sizes();
    Tensor res = Tensor::empty(shape, compute, input.device());
    Tensor x = input.to(compute), t = target.to(compute);
    Tensor pw = posWeight.to(compute).expand(shape);
    if (res.numel() > 0) {
      if (compute == DType::Float64)
        logitsWithPosWeight<double>(res, x, t, pw);
      else
        logitsWithPosWeight<float>(res, x, t, pw);
    }
    values = res.to(out);
  } else {
    values = elementwiseLoss(op, input, target, compute, out, [](auto x, auto t) {
      using T = decltype(x);
      T softplusNeg = std::log1p(std::exp(-std::abs(x))) + std::max(-x, T(0));
      return (T(1) - t) * x + softplusNeg;
    });
  }
  values = applyWeight(op, values, weight, out);
  return reduceLoss(op, values, reduction, static_cast<double>(values.numel()));
}

} // namespace kiln::ops

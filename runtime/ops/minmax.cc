// Ops that select between operands or interpolate: maximum/minimum (NaN-propagating), fmax/fmin
// (NaN-ignoring), clamp, where, lerp; and the two-argument float functions atan2 and hypot.
#include "runtime/device_ops.h"
#include "runtime/ops/elementwise.h"

#include "runtime/ops/elementwise_impl.h"

namespace kiln::ops {

using namespace detail;

Tensor detail::clampToScalars(const char *op, const Tensor &a, DType t,
                              const std::optional<Scalar> &lo, const std::optional<Scalar> &hi) {
  DType compute = computeDType(t);
  Tensor in[1] = {a.to(compute)};
  Tensor out = Tensor::empty(a.sizes(), compute, a.device());
  dispatchCompute(compute, [&]<typename T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      T l = lo ? castScalarChecked<T>(op, *lo, t) : std::numeric_limits<T>::lowest();
      T h = hi ? castScalarChecked<T>(op, *hi, t) : std::numeric_limits<T>::max();
      if constexpr (std::is_floating_point_v<T>) {
        if (!lo)
          l = -std::numeric_limits<T>::infinity();
        if (!hi)
          h = std::numeric_limits<T>::infinity();
      }
      // The NaN-propagating selects vectorize; a branch on NaN kept the loop scalar (20x slower).
      cpuKernel<T, T>(out, in,
                      [l, h](T x) -> T { return minPropagateNan(maxPropagateNan(x, l), h); });
    }
  });
  return compute == t ? out : out.to(t);
}

Tensor maximum(const Tensor &a, const Tensor &b) {
  if (onDevice({&a, &b}))
    return deviceOp("maximum", {a, b});
  DType t = resultTypeOf({a, b});
  return binaryKernel("maximum", a, b, t, t,
                      []<typename T>(T x, T y) -> T { return maxPropagateNan(x, y); });
}

Tensor minimum(const Tensor &a, const Tensor &b) {
  if (onDevice({&a, &b}))
    return deviceOp("minimum", {a, b});
  DType t = resultTypeOf({a, b});
  return binaryKernel("minimum", a, b, t, t,
                      []<typename T>(T x, T y) -> T { return minPropagateNan(x, y); });
}

Tensor fmax(const Tensor &a, const Tensor &b) {
  DType t = resultTypeOf({a, b});
  return binaryKernel("fmax", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_floating_point_v<T>)
      return std::fmax(x, y);
    else
      return maxPropagateNan(x, y);
  });
}

Tensor fmin(const Tensor &a, const Tensor &b) {
  DType t = resultTypeOf({a, b});
  return binaryKernel("fmin", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_floating_point_v<T>)
      return std::fmin(x, y);
    else
      return minPropagateNan(x, y);
  });
}

Tensor clamp(const Tensor &a, const std::optional<Tensor> &lo, const std::optional<Tensor> &hi) {
  KILN_CHECK(lo || hi, "clamp: at least one of 'min' or 'max' must not be None");
  DType t = lo && hi ? resultTypeOf({a, *lo, *hi})
            : lo     ? resultTypeOf({a, *lo})
                     : resultTypeOf({a, *hi});
  checkNotBool("clamp", t);
  if ((!lo || lo->isWrappedNumber()) && (!hi || hi->isWrappedNumber()))
    return clampToScalars("clamp", a, t, lo ? std::optional<Scalar>(lo->item()) : std::nullopt,
                          hi ? std::optional<Scalar>(hi->item()) : std::nullopt);
  // Every operand is cast to t first: a 0-d input would otherwise lose to a dimensioned bound's
  // narrower dtype inside maximum/minimum's own promotion.
  Tensor r = a.to(t);
  if (lo)
    r = maximum(r, lo->to(t));
  if (hi)
    r = minimum(r, hi->to(t));
  return r;
}

Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b) {
  KILN_CHECK(cond.dtype() == DType::Bool || cond.dtype() == DType::UInt8,
             "where: expected condition to be a boolean tensor, but got a tensor with dtype {}",
             dtypeName(cond.dtype()));
  if (onDevice({&cond, &a, &b}))
    return deviceOp("where", {cond, a, b});
  checkSameDevice("where", a, b);
  DType t = resultTypeOf({a, b});
  Shape shape =
      broadcastShapes(broadcastShapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  Tensor ins[3] = {cond.to(DType::Bool).expand(shape), a.to(t).expand(shape),
                   b.to(t).expand(shape)};
  Tensor out = Tensor::empty(shape, t, cond.device());
  // A pure selection: move bytes of the element size, whatever the dtype. Masking instead of a
  // branch lets the loop vectorize (a random mask would mispredict half the branches).
  dispatchBySize(itemsize(t), [&]<typename U>() {
    cpuKernel<U, bool, U, U>(out, ins, [](bool c, U x, U y) -> U {
      const U mask = static_cast<U>(U(0) - static_cast<U>(c));
      return static_cast<U>((x & mask) | (y & static_cast<U>(~mask)));
    });
  });
  return out;
}

Tensor lerp(const Tensor &a, const Tensor &end, const Tensor &weight) {
  checkFloating("lerp", a.dtype());
  KILN_CHECK(end.isWrappedNumber() || end.dtype() == a.dtype(),
             "lerp: expected dtype {} for `end` but got dtype {}", dtypeName(a.dtype()),
             dtypeName(end.dtype()));
  const bool scalarWeight = weight.isWrappedNumber();
  KILN_CHECK(scalarWeight || weight.dtype() == a.dtype(),
             "lerp: expected dtype {} for `weight` but got dtype {}", dtypeName(a.dtype()),
             dtypeName(weight.dtype()));
  DType t = a.dtype();
  Shape shape = broadcastShapes(a.sizes(), end.sizes(), "lerp");
  if (!scalarWeight)
    shape = broadcastShapes(shape, weight.sizes(), "lerp");
  Tensor ins[3] = {a.expand(shape), end.to(t).expand(shape),
                   scalarWeight ? Tensor() : weight.expand(shape)};
  Tensor out = Tensor::empty(shape, t, a.device());
  const double w = scalarWeight ? weight.item().toDouble() : 0.0;
  dispatchFloating(t, [&]<typename S>() {
    using T = OpMath<S>;
    auto f = [](T x, T y, T wt) -> T {
      return std::abs(wt) < T(0.5) ? x + wt * (y - x) : y - (y - x) * (T(1) - wt);
    };
    if (scalarWeight)
      cpuKernelWidened<S, S, S>(out, std::span<const Tensor>(ins, 2),
                                [f, w](T x, T y) -> T { return f(x, y, T(w)); });
    else
      cpuKernelWidened<S, S, S, S>(out, ins, f);
  });
  return out;
}

Tensor atan2(const Tensor &a, const Tensor &b) {
  DType t = floatResult(resultTypeOf({a, b}));
  return floatBinaryKernel("atan2", a, b, t,
                           []<typename T>(T y, T x) -> T { return std::atan2(y, x); });
}

Tensor hypot(const Tensor &a, const Tensor &b) {
  DType t = resultTypeOf({a, b});
  checkFloating("hypot", t);
  return floatBinaryKernel("hypot", a, b, t,
                           []<typename T>(T x, T y) -> T { return std::hypot(x, y); });
}

} // namespace kiln::ops

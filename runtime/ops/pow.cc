// pow and float_power: torch's dtype rules, integer powers by squaring, and the fast paths
// torch takes for common scalar exponents (x ** 2 is x * x, x ** 0.5 is sqrt(x), ...).
#include "runtime/device_ops.h"
#include "runtime/ops/elementwise.h"

#include "runtime/ops/elementwise_impl.h"

namespace kiln::ops {

using namespace detail;

namespace {
/// Integer a ** b by squaring, wrapping on overflow. Negative exponents give 1/a truncated:
/// 1 for a == 1, +/-1 for a == -1, else 0 (torch's powi).
template <typename T> T powi(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a || !b;
  } else {
    if constexpr (std::is_signed_v<T>) {
      if (b < 0) {
        if (a == 1)
          return T(1);
        if (a == -1)
          return (b & 1) ? T(-1) : T(1);
        return T(0);
      }
    }
    T result = 1;
    while (b) {
      if (b & 1)
        result = wrapMul(result, a);
      b = static_cast<T>(b / 2);
      a = wrapMul(a, a);
    }
    return result;
  }
}

/// Exponents with an exact, faster form than std::pow.
enum class PowCase { General, Zero, One, Two, Three, Half, MinusHalf, MinusOne, MinusTwo };

PowCase classifyExponent(double e) {
  if (e == 0)
    return PowCase::Zero;
  if (e == 1)
    return PowCase::One;
  if (e == 2)
    return PowCase::Two;
  if (e == 3)
    return PowCase::Three;
  if (e == 0.5)
    return PowCase::Half;
  if (e == -0.5)
    return PowCase::MinusHalf;
  if (e == -1)
    return PowCase::MinusOne;
  if (e == -2)
    return PowCase::MinusTwo;
  return PowCase::General;
}

/// Floating tensor ** Python number.
Tensor powFloatScalar(const Tensor &a, DType t, double e) {
  PowCase c = classifyExponent(e);
  return floatUnaryKernel(a, t, [c, e]<typename T>(T x) -> T {
    switch (c) {
    case PowCase::Zero:
      return T(1);
    case PowCase::One:
      return x;
    case PowCase::Two:
      return x * x;
    case PowCase::Three:
      return x * x * x;
    case PowCase::Half:
      return std::sqrt(x);
    case PowCase::MinusHalf:
      return T(1) / std::sqrt(x);
    case PowCase::MinusOne:
      return T(1) / x;
    case PowCase::MinusTwo:
      return T(1) / (x * x);
    default:
      return std::pow(x, static_cast<T>(e));
    }
  });
}
} // namespace

Tensor pow(const Tensor &a, const Tensor &b) {
  if (onDevice({&a, &b}))
    return deviceOp("pow", {a, b});
  DType t = resultTypeOf({a, b});
  const bool scalarExponent = b.isWrappedNumber() && !a.isWrappedNumber();
  if (scalarExponent) {
    // torch answers x ** 0 and x ** 1 without a kernel, so they work for every dtype (bool too).
    Scalar e = b.item();
    if (e.toDouble() == 0.0) {
      Tensor ones = Tensor::empty(a.sizes(), t, a.device());
      ones.fill_(Scalar(int64_t{1}));
      return ones;
    }
    if (e.toDouble() == 1.0)
      return a.to(t, /*copy=*/true);
  }
  if (t == DType::Bool)
    unsupportedDType("pow", t);
  if (isFloating(t)) {
    if (scalarExponent)
      return powFloatScalar(a, t, b.item().toDouble());
    return floatBinaryKernel("pow", a, b, t,
                             []<typename T>(T x, T y) -> T { return std::pow(x, y); });
  }
  if (scalarExponent) {
    int64_t e = b.item().toInt();
    KILN_CHECK(e >= 0, "pow: integers to negative integer powers are not allowed (got {} ** {})",
               dtypeName(a.dtype()), e);
    return unaryKernel(a, t, t, [e]<typename T>(T x) -> T {
      if constexpr (std::is_floating_point_v<T>)
        return x; // unreachable: t is integral here
      else
        return powi(x, static_cast<T>(e));
    });
  }
  return binaryKernel("pow", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_floating_point_v<T>)
      return std::pow(x, y);
    else
      return powi(x, y);
  });
}

Tensor floatPower(const Tensor &a, const Tensor &b) {
  if (b.isWrappedNumber())
    return powFloatScalar(a, DType::Float64, b.item().toDouble());
  return floatBinaryKernel("float_power", a, b, DType::Float64,
                           []<typename T>(T x, T y) -> T { return std::pow(x, y); });
}

} // namespace kiln::ops

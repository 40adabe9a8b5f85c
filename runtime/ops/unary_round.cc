// Rounding (floor, ceil, trunc, round, frac), floating-point classification (isnan, isinf,
// signbit ...) and nan_to_num.
#include "runtime/ops/unary_math.h"

#include "runtime/ops/elementwise_impl.h"

#include <limits>

namespace kiln::ops {

using namespace detail;

namespace {
/// Rounding ops: integers are already integral (a copy, as torch returns); bool is rejected.
template <typename F> Tensor roundingOp(const char *op, const Tensor &a, F f) {
  checkNotBool(op, a.dtype());
  if (!isFloating(a.dtype()))
    return a.clone();
  return floatUnaryKernel(a, a.dtype(), f);
}

/// A bool-valued test of floats; for other dtypes every element gets `nonFloatValue`.
template <typename F> Tensor floatPredicate(const Tensor &a, bool nonFloatValue, F f) {
  Tensor out = Tensor::empty(a.sizes(), DType::Bool, a.device());
  if (!isFloating(a.dtype())) {
    out.fill_(Scalar(nonFloatValue));
    return out;
  }
  Tensor in[1] = {a};
  dispatchFloating(a.dtype(), [&]<typename S>() { cpuKernelWidened<bool, S>(out, in, f); });
  return out;
}

/// The largest finite value of a floating dtype.
double maxFinite(DType t) {
  switch (t) {
  case DType::Float16:
    return 65504.0;
  case DType::BFloat16:
    return 3.3895313892515355e38;
  case DType::Float32:
    return std::numeric_limits<float>::max();
  default:
    return std::numeric_limits<double>::max();
  }
}
} // namespace

Tensor floor(const Tensor &a) {
  return roundingOp("floor", a, []<typename T>(T x) -> T { return std::floor(x); });
}

Tensor ceil(const Tensor &a) {
  return roundingOp("ceil", a, []<typename T>(T x) -> T { return std::ceil(x); });
}

Tensor trunc(const Tensor &a) {
  return roundingOp("trunc", a, []<typename T>(T x) -> T { return std::trunc(x); });
}

Tensor round(const Tensor &a, std::optional<int64_t> decimals) {
  if (decimals)
    checkFloating("round(decimals=...)", a.dtype());
  if (decimals.value_or(0) == 0)
    return roundingOp("round", a, []<typename T>(T x) -> T { return std::nearbyint(x); });
  const bool negative = *decimals < 0;
  const double scale = std::pow(10.0, static_cast<double>(negative ? -*decimals : *decimals));
  return floatUnaryKernel(a, a.dtype(), [negative, scale]<typename T>(T x) -> T {
    const T s = static_cast<T>(scale);
    return negative ? std::nearbyint(x / s) * s : std::nearbyint(x * s) / s;
  });
}

Tensor frac(const Tensor &a) {
  checkFloating("frac", a.dtype());
  return floatUnaryKernel(a, a.dtype(), []<typename T>(T x) -> T { return x - std::trunc(x); });
}

Tensor isnan(const Tensor &a) {
  return floatPredicate(a, false, []<typename T>(T x) { return std::isnan(x); });
}

Tensor isinf(const Tensor &a) {
  return floatPredicate(a, false, []<typename T>(T x) { return std::isinf(x); });
}

Tensor isfinite(const Tensor &a) {
  return floatPredicate(a, true, []<typename T>(T x) { return std::isfinite(x); });
}

Tensor isposinf(const Tensor &a) {
  return floatPredicate(a, false,
                        []<typename T>(T x) { return x == std::numeric_limits<T>::infinity(); });
}

Tensor isneginf(const Tensor &a) {
  return floatPredicate(a, false,
                        []<typename T>(T x) { return x == -std::numeric_limits<T>::infinity(); });
}

Tensor signbit(const Tensor &a) {
  if (isFloating(a.dtype())) {
    // Test the stored sign bit as an integer: exact for -0.0 and NaN, and it sidesteps a GCC 12
    // internal compiler error when vectorizing std::signbit over converted 16-bit floats.
    Tensor out = Tensor::empty(a.sizes(), DType::Bool, a.device());
    Tensor in[1] = {a};
    auto run = [&]<typename U>() {
      cpuKernel<bool, U>(out, in,
                         [](U bits) -> bool { return (bits >> (sizeof(U) * 8 - 1)) != 0; });
    };
    if (a.itemsize() == 2)
      run.template operator()<uint16_t>();
    else if (a.itemsize() == 4)
      run.template operator()<uint32_t>();
    else
      run.template operator()<uint64_t>();
    return out;
  }
  return unaryKernel(a, a.dtype(), DType::Bool, []<typename T>(T x) -> bool {
    if constexpr (std::is_signed_v<T>)
      return x < 0;
    else
      return false;
  });
}

Tensor nanToNum(const Tensor &a, std::optional<double> nan, std::optional<double> posinf,
                std::optional<double> neginf) {
  if (!isFloating(a.dtype()))
    return a.clone();
  const double big = maxFinite(a.dtype());
  const double n = nan.value_or(0.0), p = posinf.value_or(big), m = neginf.value_or(-big);
  return floatUnaryKernel(a, a.dtype(), [n, p, m]<typename T>(T x) -> T {
    if (x != x)
      return static_cast<T>(n);
    if (x == std::numeric_limits<T>::infinity())
      return static_cast<T>(p);
    if (x == -std::numeric_limits<T>::infinity())
      return static_cast<T>(m);
    return x;
  });
}

} // namespace kiln::ops

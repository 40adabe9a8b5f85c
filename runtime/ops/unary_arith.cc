// Unary arithmetic: neg, positive, abs, sign, reciprocal, square.
#include "runtime/device_ops.h"
#include "runtime/ops/elementwise.h"

#include "runtime/ops/elementwise_impl.h"

namespace kiln::ops {

using namespace detail;

Tensor neg(const Tensor &a) {
  if (onDevice({&a}) && a.dtype() != DType::Bool)
    return deviceOp("neg", {a});
  KILN_CHECK(a.dtype() != DType::Bool,
             "neg: negation, the `-` operator, on a bool tensor is not supported; use the `~` or "
             "logical_not() operator instead");
  return sameTypeUnaryKernel(a, []<typename T>(T x) -> T {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
      return wrapSub(T(0), x);
    else
      return -x;
  });
}

Tensor positive(const Tensor &a) {
  KILN_CHECK(a.dtype() != DType::Bool,
             "positive: the `+` operator on a bool tensor is not supported");
  return a;
}

Tensor abs(const Tensor &a) {
  checkNotBool("abs", a.dtype());
  if (onDevice({&a}))
    return deviceOp("abs", {a});
  if (isIntegral(a.dtype(), false) && a.dtype() == DType::UInt8)
    return a.clone();
  return sameTypeUnaryKernel(a, []<typename T>(T x) -> T {
    if constexpr (std::is_floating_point_v<T>)
      return std::abs(x);
    else if constexpr (std::is_signed_v<T>)
      return x < 0 ? wrapSub(T(0), x) : x;
    else
      return x;
  });
}

Tensor sign(const Tensor &a) {
  if (a.dtype() == DType::Bool)
    return a.clone();
  return sameTypeUnaryKernel(a, []<typename T>(T x) -> T {
    if constexpr (std::is_same_v<T, bool>)
      return x;
    else
      return static_cast<T>(static_cast<int>(T(0) < x) - static_cast<int>(x < T(0)));
  });
}

Tensor reciprocal(const Tensor &a) {
  return floatUnaryKernel(a, floatResult(a.dtype()), []<typename T>(T x) -> T { return T(1) / x; });
}

Tensor square(const Tensor &a) { return pow(a, Tensor::wrapScalar(Scalar(int64_t{2}))); }

} // namespace kiln::ops

// Bitwise ops and shifts: integers and bool only, as in torch.
#include "runtime/ops/compare.h"

#include "runtime/ops/elementwise_impl.h"

#include <climits>

namespace kiln::ops {

using namespace detail;

namespace {
/// Runs an integer-only binary kernel; f is only ever called with integral T (and bool unless
/// rejected), other instantiations are dead.
template <typename F>
Tensor bitwiseOp(const char *op, const Tensor &a, const Tensor &b, bool allowBool, F f) {
  DType t = resultTypeOf({a, b});
  if (isFloating(t) || (!allowBool && t == DType::Bool))
    unsupportedDType(op, t);
  return binaryKernel(op, a, b, t, t, [f]<typename T>(T x, T y) -> T {
    if constexpr (std::is_floating_point_v<T>)
      return x;
    else
      return f(x, y);
  });
}
} // namespace

Tensor bitwiseAnd(const Tensor &a, const Tensor &b) {
  return bitwiseOp("bitwise_and", a, b, true,
                   []<typename T>(T x, T y) { return static_cast<T>(x & y); });
}
Tensor bitwiseOr(const Tensor &a, const Tensor &b) {
  return bitwiseOp("bitwise_or", a, b, true,
                   []<typename T>(T x, T y) { return static_cast<T>(x | y); });
}
Tensor bitwiseXor(const Tensor &a, const Tensor &b) {
  return bitwiseOp("bitwise_xor", a, b, true,
                   []<typename T>(T x, T y) { return static_cast<T>(x ^ y); });
}

Tensor bitwiseNot(const Tensor &a) {
  if (isFloating(a.dtype()))
    unsupportedDType("bitwise_not", a.dtype());
  return sameTypeUnaryKernel(a, []<typename T>(T x) -> T {
    if constexpr (std::is_same_v<T, bool>)
      return !x;
    else if constexpr (std::is_floating_point_v<T>)
      return x;
    else
      return static_cast<T>(~x);
  });
}

Tensor bitwiseLeftShift(const Tensor &a, const Tensor &b) {
  return bitwiseOp("bitwise_left_shift", a, b, false, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_same_v<T, bool>) {
      return x;
    } else {
      constexpr T maxShift = sizeof(T) * CHAR_BIT;
      if (static_cast<std::make_signed_t<T>>(y) < 0 || y >= maxShift)
        return T(0);
      return static_cast<T>(static_cast<std::make_unsigned_t<T>>(x) << y);
    }
  });
}

Tensor bitwiseRightShift(const Tensor &a, const Tensor &b) {
  return bitwiseOp("bitwise_right_shift", a, b, false, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_same_v<T, bool>) {
      return x;
    } else {
      // Out-of-range shifts keep only the sign bit for signed types and nothing for unsigned.
      constexpr T maxShift = sizeof(T) * CHAR_BIT - std::is_signed_v<T>;
      if (static_cast<std::make_signed_t<T>>(y) < 0 || y >= maxShift)
        return static_cast<T>(x >> maxShift);
      return static_cast<T>(x >> y);
    }
  });
}

} // namespace kiln::ops

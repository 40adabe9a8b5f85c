// Binary arithmetic (add, sub, mul, the divisions and moduli) and the in-place / out= write-back.
#include "runtime/ops/elementwise.h"
#include "runtime/device_ops.h"

#include "runtime/ops/elementwise_impl.h"

namespace kiln::ops {

using namespace detail;

bool canCast(DType from, DType to) {
  if (isFloating(from) && !isFloating(to))
    return false;
  if (from != DType::Bool && to == DType::Bool)
    return false;
  return true;
}

Tensor &inplace(const char *op, Tensor &self, const Tensor &result) {
  KILN_CHECK(canCast(result.dtype(), self.dtype()),
             "{}: result type {} can't be cast to the desired output type {}", op,
             dtypeName(result.dtype()), dtypeName(self.dtype()));
  Shape b = broadcastShapes(self.sizes(), result.sizes(), op);
  KILN_CHECK(b == self.sizes(), "{}: output with shape {} doesn't match the broadcast shape {}", op,
             self.shapeStr(), shapeToString(b));
  copyInto(self, result.to(self.dtype()).expand(self.sizes()));
  self.bumpVersion();
  return self;
}

Tensor &writeOut(const char *op, Tensor &out, const Tensor &result) {
  KILN_CHECK(canCast(result.dtype(), out.dtype()),
             "{}: result type {} can't be cast to the desired output type {}", op,
             dtypeName(result.dtype()), dtypeName(out.dtype()));
  KILN_CHECK(out.sizes() == result.sizes(),
             "{}: the out= tensor has shape {} but the result has shape {} (kiln does not resize "
             "out= tensors)",
             op, out.shapeStr(), result.shapeStr());
  copyInto(out, result.to(out.dtype()));
  out.bumpVersion();
  return out;
}

namespace detail {
bool anyZero(const Tensor &t) {
  bool found = false;
  Tensor ops[1] = {t};
  NdLoop loop(t.sizes(), ops);
  dispatchAll(t.dtype(), [&]<typename T>() {
    loop.runSerial([&](char **p, const int64_t *s, int64_t n) {
      const char *q = p[0];
      for (int64_t i = 0; i < n && !found; ++i, q += s[0])
        found = static_cast<float>(*reinterpret_cast<const T *>(q)) == 0.0f;
    });
  });
  return found;
}
} // namespace detail

namespace {
/// a + alpha * b with alpha folded into the kernel (no temporary for alpha * b).
Tensor addScaled(const char *op, const Tensor &a, const Tensor &b, DType t, const Scalar &alpha) {
  KILN_CHECK(isFloating(t) || !alpha.isFloating(),
             "{}: for integral input tensors, argument alpha must not be a floating point "
             "number",
             op);
  KILN_CHECK(alpha.dtype() != DType::Bool || t == DType::Bool,
             "{}: boolean alpha is only supported for bool results, got {}", op, dtypeName(t));
  const double ad = alpha.toDouble();
  const int64_t ai = alpha.toInt();
  return binaryKernel(op, a, b, t, t, [ad, ai]<typename T>(T x, T y) -> T {
    if constexpr (std::is_same_v<T, bool>)
      return x || (ai != 0 && y);
    else if constexpr (std::is_floating_point_v<T>)
      return x + static_cast<T>(ad) * y;
    else
      return wrapAdd(x, wrapMul(static_cast<T>(ai), y));
  });
}

/// Integer division by zero has no value: torch raises, and so do we (never UB).
void checkIntegerDivisor(const char *op, DType t, const Tensor &b) {
  if (isIntegral(t, true))
    // Checked in the result dtype: int32 -2^31 becomes 0 as a uint8 divisor.
    KILN_CHECK(!anyZero(b.to(t)), "ZeroDivisionError: integer division by zero in {}", op);
}

template <typename T> T divFloorFloating(T a, T b) {
  if (b == 0)
    return a / b;
  T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0))
    div -= T(1);
  if (div == 0)
    return std::copysign(T(0), a / b);
  T fl = std::floor(div);
  return div - fl > T(0.5) ? fl + T(1) : fl;
}

/// Integer quotient rounded toward zero; x / -1 wraps instead of trapping on the minimum value.
template <typename T> T divTruncInteger(T x, T y) {
  if constexpr (std::is_signed_v<T>)
    if (y == T(-1))
      return wrapSub(T(0), x);
  return static_cast<T>(x / y);
}

template <typename T> T divFloorInteger(T x, T y) {
  T q = divTruncInteger(x, y);
  if constexpr (std::is_signed_v<T>)
    if (y != T(-1) && (x < 0) != (y < 0) && static_cast<T>(x % y) != 0)
      --q;
  return q;
}

template <typename T> T remainderOf(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    T mod = std::fmod(x, y);
    if (mod != 0 && (y < 0) != (mod < 0))
      mod += y;
    return mod;
  } else if constexpr (std::is_signed_v<T>) {
    if (y == T(-1))
      return T(0);
    T r = static_cast<T>(x % y);
    if (r != 0 && (r < 0) != (y < 0))
      r = static_cast<T>(r + y);
    return r;
  } else {
    return static_cast<T>(x % y);
  }
}
} // namespace

Tensor add(const Tensor &a, const Tensor &b, const Scalar &alpha) {
  if (onDevice({&a, &b}))
    return deviceOp("add", {a, alpha.dtype() == DType::Int64 && alpha.toInt() == 1
                                   ? DeviceOperand(b)
                                   : DeviceOperand(deviceOp("mul", {b, alpha}))});
  DType t = resultTypeOf({a, b});
  if (alpha.dtype() != DType::Int64 || alpha.toInt() != 1)
    return addScaled("add", a, b, t, alpha);
  return binaryKernel("add", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_same_v<T, bool>)
      return x || y;
    else if constexpr (std::is_integral_v<T>)
      return wrapAdd(x, y);
    else
      return x + y;
  });
}

Tensor sub(const Tensor &a, const Tensor &b, const Scalar &alpha) {
  if (onDevice({&a, &b}))
    return deviceOp("sub", {a, alpha.dtype() == DType::Int64 && alpha.toInt() == 1
                                   ? DeviceOperand(b)
                                   : DeviceOperand(deviceOp("mul", {b, alpha}))});
  DType t = resultTypeOf({a, b});
  KILN_CHECK(a.dtype() != DType::Bool && b.dtype() != DType::Bool,
             "sub: subtraction, the `-` operator, with a bool tensor is not supported; to invert a "
             "mask use the `~` or logical_not() operator instead");
  if (alpha.dtype() == DType::Bool) // always rejected: t is never bool here
    return addScaled("sub", a, b, t, alpha);
  if (alpha.isFloating())
    return addScaled("sub", a, b, t, Scalar(-alpha.toDouble()));
  if (alpha.toInt() != 1)
    return addScaled("sub", a, b, t, Scalar(wrapSub(int64_t{0}, alpha.toInt())));
  return binaryKernel("sub", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
      return wrapSub(x, y);
    else
      return x - y;
  });
}

Tensor mul(const Tensor &a, const Tensor &b) {
  if (onDevice({&a, &b}))
    return deviceOp("mul", {a, b});
  DType t = resultTypeOf({a, b});
  return binaryKernel("mul", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_same_v<T, bool>)
      return x && y;
    else if constexpr (std::is_integral_v<T>)
      return wrapMul(x, y);
    else
      return x * y;
  });
}

Tensor div(const Tensor &a, const Tensor &b, const std::string &mode) {
  if (onDevice({&a, &b})) {
    KILN_CHECK_KIND(NotImplemented, mode.empty() || mode == "none",
                    "kiln: div(rounding_mode='{}') has no CUDA implementation yet", mode);
    return deviceOp("div", {a, b});
  }
  DType t = resultTypeOf({a, b});
  if (mode.empty()) {
    DType ft = floatResult(t);
    return floatBinaryKernel("div", a, b, ft, []<typename T>(T x, T y) -> T { return x / y; });
  }
  KILN_CHECK_KIND(Value, mode == "trunc" || mode == "floor",
                  "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                  "'{}'",
                  mode);
  if (mode == "floor")
    return floorDivide(a, b);
  checkNotBool("div(rounding_mode='trunc')", t);
  checkIntegerDivisor("div(rounding_mode='trunc')", t, b);
  return binaryKernel("div", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_floating_point_v<T>)
      return std::trunc(x / y);
    else if constexpr (std::is_same_v<T, bool>)
      return x;
    else
      return divTruncInteger(x, y);
  });
}

Tensor floorDivide(const Tensor &a, const Tensor &b) {
  DType t = resultTypeOf({a, b});
  checkNotBool("floor_divide", t);
  checkIntegerDivisor("floor_divide", t, b);
  return binaryKernel("floor_divide", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_floating_point_v<T>)
      return divFloorFloating(x, y);
    else if constexpr (std::is_same_v<T, bool>)
      return x;
    else
      return divFloorInteger(x, y);
  });
}

Tensor remainder(const Tensor &a, const Tensor &b) {
  DType t = resultTypeOf({a, b});
  checkNotBool("remainder", t);
  checkIntegerDivisor("remainder", t, b);
  return binaryKernel("remainder", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_same_v<T, bool>)
      return x;
    else
      return remainderOf(x, y);
  });
}

Tensor fmod(const Tensor &a, const Tensor &b) {
  DType t = resultTypeOf({a, b});
  checkNotBool("fmod", t);
  checkIntegerDivisor("fmod", t, b);
  return binaryKernel("fmod", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_floating_point_v<T>)
      return std::fmod(x, y);
    else if constexpr (std::is_same_v<T, bool>)
      return x;
    else if constexpr (std::is_signed_v<T>)
      return y == T(-1) ? T(0) : static_cast<T>(x % y);
    else
      return static_cast<T>(x % y);
  });
}

} // namespace kiln::ops

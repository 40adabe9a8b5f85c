#include "runtime/ops/elementwise.h"

#include "runtime/ops/elementwise_impl.h"

namespace kiln::ops {

using namespace detail;

namespace {
bool canCast(DType from, DType to) {
  // torch.can_cast: no float -> integral, no non-bool -> bool.
  if (isFloating(from) && !isFloating(to))
    return false;
  if (from != DType::Bool && to == DType::Bool)
    return false;
  return true;
}

} // namespace

Tensor &inplace(const char *op, Tensor &self, const Tensor &result) {
  KILN_CHECK(canCast(result.dtype(), self.dtype()),
             "{}: result type {} can't be cast to the desired output type {}", op,
             dtypeName(result.dtype()), dtypeName(self.dtype()));
  Shape b = broadcastShapes(self.sizes(), result.sizes(), op);
  KILN_CHECK(b == self.sizes(),
             "{}: output with shape {} doesn't match the broadcast shape {}", op, self.shapeStr(),
             shapeToString(b));
  copyInto(self, result.to(self.dtype()).expand(self.sizes()));
  self.bumpVersion();
  return self;
}

Tensor add(const Tensor &a, const Tensor &b, const Scalar &alpha) {
  DType t = resultTypeOf({a, b});
  if (alpha.isFloating() || alpha.toInt() != 1) {
    KILN_CHECK_KIND(Type, isFloating(t) || !alpha.isFloating(),
                    "add: for integral input tensors, argument alpha must not be a floating point "
                    "number");
    return add(a, mul(b, Tensor::wrapScalar(alpha)));
  }
  return binaryKernel("add", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_same_v<T, bool>)
      return x || y;
    else
      return x + y;
  });
}

Tensor sub(const Tensor &a, const Tensor &b, const Scalar &alpha) {
  DType t = resultTypeOf({a, b});
  KILN_CHECK(a.dtype() != DType::Bool && b.dtype() != DType::Bool,
             "sub: subtraction, the `-` operator, with a bool tensor is not supported; to invert a "
             "mask use the `~` or logical_not() operator instead");
  if (alpha.isFloating() || alpha.toInt() != 1)
    return sub(a, mul(b, Tensor::wrapScalar(alpha)));
  return binaryKernel("sub", a, b, t, t, []<typename T>(T x, T y) -> T { return x - y; });
}

Tensor mul(const Tensor &a, const Tensor &b) {
  DType t = resultTypeOf({a, b});
  return binaryKernel("mul", a, b, t, t, []<typename T>(T x, T y) -> T {
    if constexpr (std::is_same_v<T, bool>)
      return x && y;
    else
      return x * y;
  });
}

Tensor div(const Tensor &a, const Tensor &b, const std::string &mode) {
  DType t = resultTypeOf({a, b});
  if (mode.empty()) {
    DType ft = floatResult(t);
    return binaryKernel("div", a, b, ft, ft, []<typename T>(T x, T y) -> T { return x / y; });
  }
  KILN_CHECK_KIND(Value, mode == "trunc" || mode == "floor",
                  "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found "
                  "'{}'", mode);
  bool floor = mode == "floor";
  if (isIntegral(t, true)) {
    // Integer division by zero has no value: torch raises, and so do we (never UB).
    Tensor bc = b.to(t);
    bool hasZero = false;
    dispatchCompute(computeDType(t), [&]<typename T>() {
      Tensor c = bc.contiguous();
      const T *p = c.data<T>();
      for (int64_t i = 0, n = c.numel(); i < n && !hasZero; ++i)
        hasZero = p[i] == T(0);
    });
    KILN_CHECK(!hasZero, "ZeroDivisionError: integer division by zero in div(rounding_mode='{}')",
               mode);
    if (t == DType::Bool)
      t = DType::Int64;
  }
  return binaryKernel("div", a, b, t, t, [floor]<typename T>(T x, T y) -> T {
    if constexpr (std::is_floating_point_v<T>) {
      T q = x / y;
      return floor ? std::floor(q) : std::trunc(q);
    } else if constexpr (std::is_same_v<T, bool>) {
      return x;
    } else {
      T q = x / y;
      if (floor && (x % y != 0) && ((x < 0) != (y < 0)))
        --q;
      return q;
    }
  });
}

Tensor neg(const Tensor &a) {
  KILN_CHECK(a.dtype() != DType::Bool,
             "neg: negation, the `-` operator, on a bool tensor is not supported; use the `~` or "
             "logical_not() operator instead");
  return unaryKernel(a, a.dtype(), a.dtype(), []<typename T>(T x) -> T { return -x; });
}

Tensor exp(const Tensor &a) {
  DType t = floatResult(a.dtype());
  return unaryKernel(a, t, t, []<typename T>(T x) -> T { return std::exp(x); });
}

} // namespace kiln::ops

// Comparisons, torch.equal / isclose / allclose, and the logical ops.
#include "runtime/ops/compare.h"
#include "runtime/device_ops.h"

#include "runtime/ops/elementwise_impl.h"

namespace kiln::ops {

using namespace detail;

namespace {
template <typename F> Tensor compareOp(const char *op, const Tensor &a, const Tensor &b, F f) {
  if (onDevice({&a, &b}))
    return deviceOp(op, {a, b});
  return binaryKernel(op, a, b, resultTypeOf({a, b}), DType::Bool, f);
}

/// True when every element of a bool tensor is true.
bool allTrue(const Tensor &t) {
  bool all = true;
  Tensor ops[1] = {t};
  NdLoop loop(t.sizes(), ops);
  loop.runSerial([&](char **p, const int64_t *s, int64_t n) {
    const char *q = p[0];
    for (int64_t i = 0; i < n && all; ++i, q += s[0])
      all = *reinterpret_cast<const bool *>(q);
  });
  return all;
}

template <typename F> Tensor logicalOp(const char *op, const Tensor &a, const Tensor &b, F f) {
  checkSameDevice(op, a, b);
  Shape shape = broadcastShapes(a.sizes(), b.sizes(), op);
  // Like torch, a tensor operand goes through the common dtype first: an int64 0-d tensor
  // holding -2^63 meets a uint8 tensor as 0, i.e. false.
  const DType common = resultTypeOf({a, b});
  auto toBool = [&](const Tensor &t) {
    bool viaCommon = t.dtype() != common && !t.isWrappedNumber();
    return (viaCommon ? t.to(common) : t).to(DType::Bool).expand(shape);
  };
  Tensor ins[2] = {toBool(a), toBool(b)};
  Tensor out = Tensor::empty(shape, DType::Bool, a.isWrappedNumber() ? b.device() : a.device());
  cpuKernel<bool, bool, bool>(out, ins, f);
  return out;
}
} // namespace

Tensor eq(const Tensor &a, const Tensor &b) {
  return compareOp("eq", a, b, []<typename T>(T x, T y) { return x == y; });
}
Tensor ne(const Tensor &a, const Tensor &b) {
  return compareOp("ne", a, b, []<typename T>(T x, T y) { return x != y; });
}
Tensor lt(const Tensor &a, const Tensor &b) {
  return compareOp("lt", a, b, []<typename T>(T x, T y) { return x < y; });
}
Tensor le(const Tensor &a, const Tensor &b) {
  return compareOp("le", a, b, []<typename T>(T x, T y) { return x <= y; });
}
Tensor gt(const Tensor &a, const Tensor &b) {
  return compareOp("gt", a, b, []<typename T>(T x, T y) { return x > y; });
}
Tensor ge(const Tensor &a, const Tensor &b) {
  return compareOp("ge", a, b, []<typename T>(T x, T y) { return x >= y; });
}

bool equal(const Tensor &a, const Tensor &b) {
  checkSameDevice("equal", a, b);
  if (a.sizes() != b.sizes())
    return false;
  return allTrue(eq(a, b));
}

Tensor isclose(const Tensor &a, const Tensor &b, double rtol, double atol, bool equalNan) {
  KILN_CHECK(a.isWrappedNumber() || b.isWrappedNumber() || a.dtype() == b.dtype(),
             "isclose: expected both inputs to have the same dtype, but got {} and {}",
             dtypeName(a.dtype()), dtypeName(b.dtype()));
  KILN_CHECK(rtol >= 0, "isclose: rtol must be greater than or equal to zero, but got {}", rtol);
  KILN_CHECK(atol >= 0, "isclose: atol must be greater than or equal to zero, but got {}", atol);
  DType t = a.isWrappedNumber() ? b.dtype() : a.dtype();
  return binaryKernel("isclose", a, b, t, DType::Bool,
                      [rtol, atol, equalNan]<typename T>(T x, T y) -> bool {
                        if (x == y)
                          return true;
                        if constexpr (std::is_floating_point_v<T>) {
                          if (x != x || y != y)
                            return equalNan && x != x && y != y;
                          T diff = std::abs(x - y);
                          return std::isfinite(diff) &&
                                 diff <= static_cast<T>(atol) + std::abs(static_cast<T>(rtol) * y);
                        } else {
                          double diff = std::abs(static_cast<double>(x) - static_cast<double>(y));
                          return diff <= atol + std::abs(rtol * static_cast<double>(y));
                        }
                      });
}

bool allclose(const Tensor &a, const Tensor &b, double rtol, double atol, bool equalNan) {
  return allTrue(isclose(a, b, rtol, atol, equalNan));
}

Tensor logicalAnd(const Tensor &a, const Tensor &b) {
  return logicalOp("logical_and", a, b, [](bool x, bool y) { return x && y; });
}
Tensor logicalOr(const Tensor &a, const Tensor &b) {
  return logicalOp("logical_or", a, b, [](bool x, bool y) { return x || y; });
}
Tensor logicalXor(const Tensor &a, const Tensor &b) {
  return logicalOp("logical_xor", a, b, [](bool x, bool y) { return x != y; });
}
Tensor logicalNot(const Tensor &a) {
  Tensor in[1] = {a.to(DType::Bool)};
  Tensor out = Tensor::empty(a.sizes(), DType::Bool, a.device());
  cpuKernel<bool, bool>(out, in, [](bool x) { return !x; });
  return out;
}

} // namespace kiln::ops

#pragma once
/// Internal helpers shared by the eager elementwise kernels: dtype resolution, broadcasting,
/// casting to the compute dtype, and the typed kernel call. Not part of the public op API.

#include "runtime/copy.h"
#include "runtime/error.h"
#include "runtime/loops.h"
#include "runtime/ops/factory.h"
#include "runtime/tensor.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <string_view>
#include <type_traits>

namespace kiln::ops::detail {

inline PromotionOperand promotionOf(const Tensor &t) {
  return {t.dtype(), t.isWrappedNumber() ? PromotionPriority::Scalar
                     : t.dim() == 0      ? PromotionPriority::ZeroDim
                                         : PromotionPriority::Tensor};
}

inline DType resultTypeOf(std::initializer_list<Tensor> ts) {
  PromotionOperand ops[8];
  size_t n = 0;
  for (const Tensor &t : ts)
    ops[n++] = promotionOf(t);
  return resultType(std::span<const PromotionOperand>(ops, n));
}

inline void checkSameDevice(const char *op, const Tensor &a, const Tensor &b) {
  if (a.device() != b.device() && !a.isWrappedNumber() && !b.isWrappedNumber())
    fail(ErrorKind::Runtime,
         "{}: expected all tensors to be on the same device, but found {} and {}", op,
         a.device().str(), b.device().str());
}

/// Runs out = f(a, b) elementwise with T the compute type of `common`; out has dtype outDType
/// (common for arithmetic, Bool for comparisons). f is a generic lambda `<typename T>(T, T)`.
template <typename F>
Tensor binaryKernel(const char *op, const Tensor &a, const Tensor &b, DType common, DType outDType,
                    F f) {
  checkSameDevice(op, a, b);
  Shape shape = broadcastShapes(a.sizes(), b.sizes(), op);
  DType compute = computeDType(common);
  if (compute != common && !a.isWrappedNumber() && !b.isWrappedNumber() &&
      (outDType == common || outDType == DType::Bool)) {
    // float16/bfloat16 tensors: read and write the 16-bit values directly and compute each
    // element in float, instead of materializing float32 copies of both operands and the result
    // (three extra passes over memory). Wrapped Python numbers keep the general path below.
    Tensor ins[2] = {a.to(common).expand(shape), b.to(common).expand(shape)};
    Tensor out = Tensor::empty(shape, outDType, a.device());
    auto run = [&]<typename H>() {
      if (outDType == DType::Bool)
        cpuKernelWidened<bool, H, H>(out, ins, [f](float x, float y) -> bool { return f(x, y); });
      else
        cpuKernelWidened<H, H, H>(out, ins, f);
    };
    if (common == DType::Float16)
      run.template operator()<Half>();
    else
      run.template operator()<BFloat16>();
    return out;
  }
  DType kernelOut = outDType == common ? compute : outDType;
  // Like torch, an operand is first cast to the common dtype, so an int64 beyond the float16
  // range becomes inf (and 2049 becomes 2048) before the float32 computation. A Python number is
  // too (torch converts CPU scalars to the common dtype: f16 + 0.1 adds f16(0.1)), except for mul,
  // whose kernel reads the scalar's original value in float32.
  bool keepScalar = std::string_view(op) == "mul";
  auto toCompute = [&](const Tensor &t) {
    bool viaCommon =
        compute != common && t.dtype() != common && (!t.isWrappedNumber() || !keepScalar);
    return (viaCommon ? t.to(common) : t).to(compute).expand(shape);
  };
  Tensor ins[2] = {toCompute(a), toCompute(b)};
  Tensor out = Tensor::empty(shape, kernelOut, a.isWrappedNumber() ? b.device() : a.device());
  dispatchCompute(compute, [&]<typename T>() {
    if (kernelOut == DType::Bool)
      cpuKernel<bool, T, T>(out, ins, [f](T x, T y) -> bool { return f(x, y); });
    else
      cpuKernel<T, T, T>(out, ins, [f](T x, T y) -> T { return f(x, y); });
  });
  return kernelOut == outDType ? out : out.to(outDType);
}

/// Runs out = f(a) with T the compute type of `dtype` (a is cast to dtype first).
template <typename F> Tensor unaryKernel(const Tensor &a, DType dtype, DType outDType, F f) {
  DType compute = computeDType(dtype);
  if (compute != dtype && (outDType == dtype || outDType == DType::Bool)) {
    // float16/bfloat16: read and write the 16-bit values, computing in float (no copies).
    Tensor in[1] = {a.to(dtype)};
    Tensor out = Tensor::empty(a.sizes(), outDType, a.device());
    auto run = [&]<typename H>() {
      if (outDType == DType::Bool)
        cpuKernelWidened<bool, H>(out, in, [f](float x) -> bool { return f(x); });
      else
        cpuKernelWidened<H, H>(out, in, f);
    };
    if (dtype == DType::Float16)
      run.template operator()<Half>();
    else
      run.template operator()<BFloat16>();
    return out;
  }
  DType kernelOut = outDType == dtype ? compute : outDType;
  Tensor in[1] = {a.to(compute)};
  Tensor out = Tensor::empty(a.sizes(), kernelOut, a.device());
  dispatchCompute(compute, [&]<typename T>() {
    if (kernelOut == DType::Bool)
      cpuKernel<bool, T>(out, in, [f](T x) -> bool { return f(x); });
    else
      cpuKernel<T, T>(out, in, [f](T x) -> T { return f(x); });
  });
  return kernelOut == outDType ? out : out.to(outDType);
}

/// Float ops promote integers and bool to the default float dtype (torch.exp(int) is float).
inline DType floatResult(DType t) { return isFloating(t) ? t : defaultFloatDType(); }

/// Throws torch's NotImplementedError for a dtype `op` has no kernel for.
[[noreturn]] inline void unsupportedDType(const char *op, DType t) {
  fail(ErrorKind::NotImplemented, "{}: not implemented for dtype {}", op, dtypeName(t));
}
/// Rejects non-floating dtypes (ops like gelu or frac that torch defines for floats only).
inline void checkFloating(const char *op, DType t) {
  if (!isFloating(t))
    unsupportedDType(op, t);
}
/// Rejects bool (ops like abs or floor that torch defines for numbers only).
inline void checkNotBool(const char *op, DType t) {
  if (t == DType::Bool)
    unsupportedDType(op, t);
}

/// Calls fn.template operator()<T>() with T the storage type of a floating dtype. Kernels of
/// float-valued functions dispatch only here: their integer inputs are promoted first, so integer
/// instantiations would be dead code (and compile time).
template <typename Fn> decltype(auto) dispatchFloating(DType t, Fn &&fn) {
  switch (t) {
  case DType::Float16:
    return fn.template operator()<Half>();
  case DType::BFloat16:
    return fn.template operator()<BFloat16>();
  case DType::Float64:
    return fn.template operator()<double>();
  default:
    return fn.template operator()<float>();
  }
}

/// out = f(a) for a float-valued function: out has floating dtype `dtype` (a is cast to it).
/// f is a generic lambda `<typename T>(T) -> T` called with T float or double; float16/bfloat16
/// are read and written directly and computed in float, so no temporaries are made.
template <typename F> Tensor floatUnaryKernel(const Tensor &a, DType dtype, F f) {
  Tensor in[1] = {a.to(dtype)};
  Tensor out = Tensor::empty(a.sizes(), dtype, a.device());
  dispatchFloating(dtype, [&]<typename S>() { cpuKernelWidened<S, S>(out, in, f); });
  return out;
}

/// out = f(a, b) broadcast, for a float-valued function computed in floating dtype `dtype`.
template <typename F>
Tensor floatBinaryKernel(const char *op, const Tensor &a, const Tensor &b, DType dtype, F f) {
  checkSameDevice(op, a, b);
  Shape shape = broadcastShapes(a.sizes(), b.sizes(), op);
  Tensor out = Tensor::empty(shape, dtype, a.isWrappedNumber() ? b.device() : a.device());
  if (b.isWrappedNumber() && !a.isWrappedNumber() && computeDType(dtype) != dtype &&
      std::string_view(op) == "div") {
    // torch's true division of float16/bfloat16 by a Python number reads the number's original
    // value in float32 (f16 / 0.1 divides by 0.1f, not by f16(0.1)).
    float y = static_cast<float>(b.item().toDouble());
    Tensor in[1] = {a.to(dtype).expand(shape)};
    dispatchFloating(dtype, [&]<typename S>() {
      using T = OpMath<S>;
      cpuKernelWidened<S, S>(out, in, [f, y](T x) -> T { return f(x, T(y)); });
    });
    return out;
  }
  Tensor ins[2] = {a.to(dtype).expand(shape), b.to(dtype).expand(shape)};
  dispatchFloating(dtype, [&]<typename S>() { cpuKernelWidened<S, S, S>(out, ins, f); });
  return out;
}

/// out = f(a) in a's own dtype, for any non-float-valued op (abs, floor, relu on integers ...).
template <typename F> Tensor sameTypeUnaryKernel(const Tensor &a, F f) {
  return unaryKernel(a, a.dtype(), a.dtype(), f);
}

/// Integer arithmetic that wraps on overflow (as torch's does) instead of being undefined.
template <typename T> inline T wrapAdd(T x, T y) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(x) + static_cast<U>(y));
}
template <typename T> inline T wrapSub(T x, T y) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(x) - static_cast<U>(y));
}
template <typename T> inline T wrapMul(T x, T y) {
  using U = std::make_unsigned_t<T>;
  if constexpr (sizeof(T) < sizeof(int))
    return static_cast<T>(static_cast<int>(x) * static_cast<int>(y));
  else
    return static_cast<T>(static_cast<U>(x) * static_cast<U>(y));
}

/// s as a T, throwing (naming `op`) when the value does not fit dtype t, under the one overflow
/// rule factories use too (ops::checkFits: uint8 reads -1 as 255, floats must be in range).
template <typename T> T castScalarChecked(const char *op, const Scalar &s, DType t) {
  checkFits(s, t, op, /*checkFloatTargets=*/false);
  if constexpr (std::is_same_v<T, bool>)
    return s.toBool();
  else if constexpr (std::is_integral_v<T>)
    return static_cast<T>(s.toInt());
  else
    return static_cast<T>(s.toDouble());
}

/// max/min that return a NaN operand (torch.maximum/minimum, clamp, hardtanh); written as
/// selects the compiler vectorizes.
template <typename T> T maxPropagateNan(T x, T y) {
  if constexpr (std::is_same_v<T, bool>)
    return x || y;
  else
    return (x > y || x != x) ? x : y;
}
template <typename T> T minPropagateNan(T x, T y) {
  if constexpr (std::is_same_v<T, bool>)
    return x && y;
  else
    return (x < y || x != x) ? x : y;
}

/// a clamped to [lo, hi] (a missing bound: none) in dtype t, one pass with the bounds cast to t
/// (checked, naming `op`): clamp with Python-number bounds, hardtanh (minmax.cc).
Tensor clampToScalars(const char *op, const Tensor &a, DType t, const std::optional<Scalar> &lo,
                      const std::optional<Scalar> &hi);

/// True when some element of t is zero (integer division checks its divisor with this).
bool anyZero(const Tensor &t);

} // namespace kiln::ops::detail

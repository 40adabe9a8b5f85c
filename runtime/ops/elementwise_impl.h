#pragma once
/// Internal helpers shared by the eager elementwise kernels: dtype resolution, broadcasting,
/// casting to the compute dtype, and the typed kernel call. Not part of the public op API.

#include "runtime/copy.h"
#include "runtime/error.h"
#include "runtime/loops.h"
#include "runtime/tensor.h"

#include <cmath>
#include <initializer_list>

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
  DType kernelOut = outDType == common ? compute : outDType;
  Tensor ins[2] = {a.to(compute).expand(shape), b.to(compute).expand(shape)};
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


} // namespace kiln::ops::detail

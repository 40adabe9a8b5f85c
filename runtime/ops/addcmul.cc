// addcmul and addcdiv: self + value * t1 * t2 and self + value * t1 / t2, one pass over the
// three broadcast operands (torch's pointwise ops of the optimizers' update rules).

#include "runtime/device_ops.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/elementwise_impl.h"

namespace kiln::ops {
using namespace detail;

namespace {

/// The result, written into `into` (self, for the in-place form) when it has the result's dtype
/// and shape: the optimizers' `v.addcmul_(g, g)` then makes no temporary.
template <bool Divide>
Tensor addcOp(const char *op, const Tensor &self, const Tensor &t1, const Tensor &t2,
              const Scalar &value, Tensor *into = nullptr) {
  if (onDevice({&self, &t1, &t2})) { // no device kernel of its own: the same ops composed
    Tensor scaled = mul(t1, Tensor::wrapScalar(value));
    return add(self, Divide ? div(scaled, t2) : mul(scaled, t2));
  }
  checkSameDevice(op, self, t1);
  checkSameDevice(op, self, t2);
  DType t = resultTypeOf({self, t1, t2});
  if constexpr (Divide)
    KILN_CHECK(isFloating(t1.dtype()) || isFloating(t2.dtype()),
               "Integer division with addcdiv is no longer supported, and in a future  release "
               "addcdiv will perform a true division of tensor1 and tensor2. The historic addcdiv "
               "behavior can be implemented as (input + value * torch.trunc(tensor1 / "
               "tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / "
               "tensor2) for float inputs. The future addcdiv behavior is just the latter "
               "implementation: (input + value * tensor1 / tensor2), for all dtypes.");
  checkNotBool(op, t);
  Shape shape = broadcastShapes(broadcastShapes(self.sizes(), t1.sizes(), op), t2.sizes(), op);
  Tensor ins[3] = {self.to(t).expand(shape), t1.to(t).expand(shape), t2.to(t).expand(shape)};
  // Written in place only where each element of self is its own memory (not an expanded view).
  bool direct = into && into->dtype() == t && into->sizes() == shape && into->isContiguous();
  Tensor out = direct ? *into : Tensor::empty(shape, t, self.device());
  if (isFloating(t)) {
    // torch's CPU kernel: self + (value * t1) * t2, the product and sum one fused multiply-add
    // where the target has it (this file is built with the same contraction torch's kernel is).
    dispatchFloating(t, [&]<typename S>() {
      using T = OpMath<S>;
      const T v = static_cast<T>(value.toDouble());
      cpuKernelWidened<S, S, S, S>(out, ins, [v](T x, T a, T b) -> T {
        if constexpr (Divide)
          return x + v * a / b;
        else
          return x + v * a * b;
      });
    });
    return out;
  }
  dispatchCompute(t, [&]<typename T>() {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T v = static_cast<T>(value.toInt()); // torch casts the value to the integer type
      cpuKernel<T, T, T, T>(
          out, ins, [v](T x, T a, T b) -> T { return wrapAdd(x, wrapMul(wrapMul(v, a), b)); });
    }
  });
  return out;
}

/// In place: written directly when self has the result's dtype and shape, else torch's
/// in-place rules (a result self cannot hold is an error) through a temporary.
template <bool Divide>
Tensor &addcInplace(const char *op, Tensor &self, const Tensor &t1, const Tensor &t2,
                    const Scalar &value) {
  Tensor result = addcOp<Divide>(op, self, t1, t2, value, &self);
  if (result.isSameAs(self)) {
    self.bumpVersion();
    return self;
  }
  return inplace(op, self, result);
}

} // namespace

Tensor addcmul(const Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value) {
  return addcOp<false>("addcmul", self, t1, t2, value);
}

Tensor addcdiv(const Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value) {
  return addcOp<true>("addcdiv", self, t1, t2, value);
}

Tensor &addcmul_(Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value) {
  return addcInplace<false>("addcmul_", self, t1, t2, value);
}

Tensor &addcdiv_(Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value) {
  return addcInplace<true>("addcdiv_", self, t1, t2, value);
}

} // namespace kiln::ops

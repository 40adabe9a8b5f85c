// Float-valued unary functions: integer and bool inputs promote to the default float dtype.
#include "runtime/ops/unary_math.h"
#include "runtime/device_ops.h"

#include "runtime/fast_math.h"
#include "runtime/ops/elementwise_impl.h"

namespace kiln::ops {

using namespace detail;

// Each op is one line of math; the macro keeps the dtype handling in one place.
#define KILN_FLOAT_UNARY(NAME, EXPR)                                                               \
  Tensor NAME(const Tensor &a) {                                                                   \
    if (onDevice({&a}))                                                                            \
      return deviceOp(#NAME, {a});                                                                 \
    return floatUnaryKernel(a, floatResult(a.dtype()), []<typename T>(T x) -> T { return EXPR; }); \
  }

// exp, expm1, sigmoid and erf on the vectorizable fast math too (runtime/fast_math.h: a few ulp;
// erf's formula is the one torch's vectorized CPU erf uses).
KILN_FLOAT_UNARY(exp, fastExp(x))
KILN_FLOAT_UNARY(exp2, std::exp2(x))
KILN_FLOAT_UNARY(expm1, fastExpm1(x))
KILN_FLOAT_UNARY(log, std::log(x))
KILN_FLOAT_UNARY(log2, std::log2(x))
KILN_FLOAT_UNARY(log10, std::log10(x))
KILN_FLOAT_UNARY(log1p, std::log1p(x))
KILN_FLOAT_UNARY(sqrt, std::sqrt(x))
KILN_FLOAT_UNARY(rsqrt, T(1) / std::sqrt(x))
KILN_FLOAT_UNARY(sin, std::sin(x))
KILN_FLOAT_UNARY(cos, std::cos(x))
KILN_FLOAT_UNARY(tan, std::tan(x))
KILN_FLOAT_UNARY(asin, std::asin(x))
KILN_FLOAT_UNARY(acos, std::acos(x))
KILN_FLOAT_UNARY(atan, std::atan(x))
KILN_FLOAT_UNARY(sinh, std::sinh(x))
KILN_FLOAT_UNARY(cosh, std::cosh(x))
// tanh on the activations' vectorizable fast math (libm's tanh keeps the loop scalar, 12x
// slower); copysign keeps tanh(-0.0) = -0.0 and vectorizes, a branch would not.
KILN_FLOAT_UNARY(tanh, std::copysign(fastTanh(x), x))
KILN_FLOAT_UNARY(asinh, std::asinh(x))
KILN_FLOAT_UNARY(acosh, std::acosh(x))
KILN_FLOAT_UNARY(atanh, std::atanh(x))
KILN_FLOAT_UNARY(sigmoid, T(1) / (T(1) + fastExp(-x)))
KILN_FLOAT_UNARY(erf, fastErf(x))
KILN_FLOAT_UNARY(erfc, std::erfc(x))

#undef KILN_FLOAT_UNARY

} // namespace kiln::ops

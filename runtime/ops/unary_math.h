#pragma once
/// Eager unary math ops: float-valued functions (exp, log, trig, erf ...), rounding and
/// floating-point classification. Float-valued functions promote integer and bool inputs to the
/// default float dtype, as torch does; float16/bfloat16 are computed in float32.

#include "runtime/tensor.h"

#include <optional>

namespace kiln::ops {

// Float-valued functions (integer inputs promote to the default float dtype).
Tensor exp(const Tensor &a);
Tensor exp2(const Tensor &a);
Tensor expm1(const Tensor &a);
Tensor log(const Tensor &a);
Tensor log2(const Tensor &a);
Tensor log10(const Tensor &a);
Tensor log1p(const Tensor &a);
Tensor sqrt(const Tensor &a);
/// 1 / sqrt(a).
Tensor rsqrt(const Tensor &a);
Tensor sin(const Tensor &a);
Tensor cos(const Tensor &a);
Tensor tan(const Tensor &a);
Tensor asin(const Tensor &a);
Tensor acos(const Tensor &a);
Tensor atan(const Tensor &a);
Tensor sinh(const Tensor &a);
Tensor cosh(const Tensor &a);
Tensor tanh(const Tensor &a);
Tensor asinh(const Tensor &a);
Tensor acosh(const Tensor &a);
Tensor atanh(const Tensor &a);
/// 1 / (1 + exp(-a)).
Tensor sigmoid(const Tensor &a);
Tensor erf(const Tensor &a);
Tensor erfc(const Tensor &a);

// Rounding: integer inputs are returned as a copy; bool is rejected.
Tensor floor(const Tensor &a);
Tensor ceil(const Tensor &a);
Tensor trunc(const Tensor &a);
/// Round half to even. With `decimals` (floats only, as torch's round.decimals overload), rounds
/// to that many decimal places; negative decimals round to tens, hundreds, ...
Tensor round(const Tensor &a, std::optional<int64_t> decimals = std::nullopt);
/// a - trunc(a); floating dtypes only.
Tensor frac(const Tensor &a);

// Classification (bool results; integers are finite and never NaN).
Tensor isnan(const Tensor &a);
Tensor isinf(const Tensor &a);
Tensor isfinite(const Tensor &a);
Tensor isposinf(const Tensor &a);
Tensor isneginf(const Tensor &a);
/// True where the sign bit is set (so -0.0 counts as negative).
Tensor signbit(const Tensor &a);
/// Replaces NaN with `nan` and +/-inf with posinf/neginf (default: the dtype's largest/lowest
/// finite value). Non-floating inputs are returned as a copy.
Tensor nanToNum(const Tensor &a, std::optional<double> nan = 0.0,
                std::optional<double> posinf = std::nullopt,
                std::optional<double> neginf = std::nullopt);

} // namespace kiln::ops

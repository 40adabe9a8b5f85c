#pragma once
/// Eager elementwise ops with PyTorch semantics: broadcasting, type promotion (Python numbers
/// arrive as wrapped-number tensors, see Tensor::wrapScalar), float16/bfloat16 computed in
/// float32. In-place forms (`add_`) compute out of place and write back under torch's casting rule.
///
/// This header declares the arithmetic ops and includes the rest of the elementwise op set
/// (unary_math.h, compare.h, activation.h), so callers include just this one.

#include "runtime/tensor.h"

#include <optional>
#include <string>

namespace kiln::ops {

// Binary arithmetic.
Tensor add(const Tensor &a, const Tensor &b, const Scalar &alpha = Scalar(int64_t{1}));
Tensor sub(const Tensor &a, const Tensor &b, const Scalar &alpha = Scalar(int64_t{1}));
Tensor mul(const Tensor &a, const Tensor &b);
/// roundingMode: "" (true division), "trunc" or "floor".
Tensor div(const Tensor &a, const Tensor &b, const std::string &roundingMode = "");
/// Division rounded toward -inf (Python's `//`); integer division by zero throws.
Tensor floorDivide(const Tensor &a, const Tensor &b);
/// Python-style modulus: the result has the sign of the divisor.
Tensor remainder(const Tensor &a, const Tensor &b);
/// C-style modulus: the result has the sign of the dividend.
Tensor fmod(const Tensor &a, const Tensor &b);
/// a ** b. Integer results use exponentiation by squaring; an integer tensor to a negative
/// Python-int power throws, as torch does.
Tensor pow(const Tensor &a, const Tensor &b);
/// a ** b computed in float64 (torch.float_power).
Tensor floatPower(const Tensor &a, const Tensor &b);
/// atan2(a, b), the angle of the point (b, a).
Tensor atan2(const Tensor &a, const Tensor &b);
/// sqrt(a^2 + b^2) without intermediate overflow; floating dtypes only.
Tensor hypot(const Tensor &a, const Tensor &b);

// Unary arithmetic.
Tensor neg(const Tensor &a);
/// +a: a itself (bool rejected, as torch does).
Tensor positive(const Tensor &a);
Tensor abs(const Tensor &a);
/// -1, 0 or 1 in a's dtype (bool: a itself); NaN maps to 0.
Tensor sign(const Tensor &a);
/// 1 / a, promoted to a floating dtype.
Tensor reciprocal(const Tensor &a);
/// a * a, typed as pow(a, 2) (bool becomes int64).
Tensor square(const Tensor &a);

// Selection between operands.
/// Elementwise maximum; a NaN in either operand gives NaN.
Tensor maximum(const Tensor &a, const Tensor &b);
Tensor minimum(const Tensor &a, const Tensor &b);
/// Elementwise maximum ignoring NaN: NaN only where both operands are NaN.
Tensor fmax(const Tensor &a, const Tensor &b);
Tensor fmin(const Tensor &a, const Tensor &b);
/// min(max(a, lo), hi) with the bounds' dtypes taking part in promotion; at least one bound must
/// be given. NaN inputs stay NaN.
Tensor clamp(const Tensor &a, const std::optional<Tensor> &lo, const std::optional<Tensor> &hi);
/// cond ? a : b, broadcast over all three; the result type promotes a and b only.
Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b);
/// a + weight * (end - a) for floating a; end (and a tensor weight) must share a's dtype.
Tensor lerp(const Tensor &a, const Tensor &end, const Tensor &weight);
/// self + value * t1 * t2 and self + value * t1 / t2, broadcast, in the promoted dtype of the
/// three (addcdiv of integers is torch's error; an integer result casts value to its type).
Tensor addcmul(const Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value);
Tensor addcdiv(const Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value);
Tensor &addcmul_(Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value);
Tensor &addcdiv_(Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value);

/// In-place: self = result cast to self's dtype; throws when the result type cannot be cast
/// (e.g. a float result into an int tensor), as torch does.
Tensor &inplace(const char *op, Tensor &self, const Tensor &result);
/// The `out=` form: writes result into out, which must have result's shape and a dtype the
/// result can be cast to.
Tensor &writeOut(const char *op, Tensor &out, const Tensor &result);
/// torch.can_cast: no floating -> integral, no non-bool -> bool.
bool canCast(DType from, DType to);

} // namespace kiln::ops

#include "runtime/ops/activation.h"
#include "runtime/ops/compare.h"
#include "runtime/ops/unary_math.h"

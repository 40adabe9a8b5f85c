#pragma once
/// The scalar semantics of the loop IR's prims and casts, in one place: the reference
/// interpreter evaluates bodies with it, the recorder rounds literals with it and the graph pass
/// const-fold folds elementwise ops with it, so the three cannot drift apart.
///
/// The semantics are those of the eager kernels (torch's), element by element:
/// - floating prims compute in the kernels' compute type (float for f32/f16/bf16, double for
///   f64) with the same libm calls, and the result is rounded once to the result dtype;
/// - integer prims wrap around (two's complement) at the result's width; `floordiv`/`mod`
///   round toward negative infinity, `x floordiv -1` wraps, and a zero divisor has no value;
///   `pow` squares (a negative exponent gives 1/x truncated: 1, -1 or 0, like torch's powi);
/// - `max`/`min` propagate NaN and pick the second operand on ties (`max(-0.0, 0.0)` is 0.0);
/// - casts truncate toward zero into integers and test `!= 0` into b8; integers convert to
///   f32/f16/bf16 through float (one rounding), like `Tensor::to`. A float outside the target's
///   range (or NaN) has no defined integer value: `convert` still answers (truncate to int64,
///   lowest int64 when that is impossible, then wrap), `convertDefined` says it is undefined.

#include "ir/loop/expr.h"
#include "runtime/dtype.h"

#include <cstdint>
#include <span>
#include <string>
#include <utility>

namespace kiln::ir::loop {

/// One element value: `f` for floating dtypes (already rounded to the dtype), `i` for integers
/// and b8 (0 or 1).
struct Elem {
  double f = 0;
  int64_t i = 0;
};

/// The int64 range of an integer or b8 dtype.
std::pair<int64_t, int64_t> intLimits(DType t);
/// `v` rounded to floating dtype `t` (f16/bf16 through float, as the kernels round).
double roundFloat(double v, DType t);
/// `v` wrapped into integer dtype `t` (two's complement; b8: v != 0).
int64_t wrapInt(int64_t v, DType t);

/// `v` of dtype `from` converted to `to` (a cast).
Elem convert(Elem v, DType from, DType to);
/// False where the cast has no defined value: NaN, infinities and floats whose truncation is
/// outside the range of integer dtype `to`.
bool convertDefined(Elem v, DType from, DType to);

/// A prim applied to its operands, whose dtype (for where: the dtype of the two values) is
/// `operandType`; the result has dtype `resultType`. Throws a `kiln::Error` (Value) where the
/// prim has no value (see primUndefined).
Elem evalPrim(ExprKind kind, DType operandType, DType resultType, std::span<const Elem> args);
/// Why the prim has no value for these operands (an integer `floordiv` or `mod` by zero), or
/// an empty string when it has one.
std::string primUndefined(ExprKind kind, DType operandType, std::span<const Elem> args);

} // namespace kiln::ir::loop

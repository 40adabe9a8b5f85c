#pragma once
/// The loop bodies of elementwise graph ops: what one element of the result is, written
/// define-by-run against Ops (lower_elementwise.cc builds the pointwise node around them).
///
/// Operands arrive converted to the compute dtype (the result dtype, float32 for
/// float16/bfloat16; the promoted operand dtype for ops with bool results), and the caller casts
/// the value to the result dtype once. Each body follows the expression of the eager kernel it
/// stands for (runtime/ops), so compiled and eager results agree to the rounding of the math
/// functions.

#include "ir/graph.h"
#include "ir/loop/ops.h"

#include <string>

namespace kiln::passes::lower {

/// Why `n` cannot be computed with operands in `compute` (eager raises for them, or the body has
/// no form for that dtype), or "" when it can. Checked before any body is recorded.
std::string elementwiseUnsupported(const ir::Node &n, DType compute);

/// The body of a one-operand op of the elementwise families (math, rounding, predicates,
/// activations, clamp) on `x`.
ir::loop::Val unaryBody(ir::loop::Ops &ops, const ir::Node &n, ir::loop::Val x, DType result);
/// The body of a two-operand op (arithmetic, comparisons, logical and bitwise ops, fmax/fmin,
/// the division family, atan2, hypot, copysign) on operands in one dtype.
ir::loop::Val binaryBody(ir::loop::Ops &ops, const ir::Node &n, ir::loop::Val a,
                         ir::loop::Val b);
/// lerp(start, end, weight).
ir::loop::Val lerpBody(ir::loop::Ops &ops, ir::loop::Val start, ir::loop::Val end,
                       ir::loop::Val weight);

/// `v` as a constant of x's dtype.
ir::loop::Val constantLike(ir::loop::Ops &ops, const ir::loop::Val &x, double v);
/// `v` as a constant of `dtype` the way eager casts a Python number into an integer dtype
/// (truncated toward zero, then wrapped to the width), or exactly for floating dtypes.
ir::loop::Val castConstant(ir::loop::Ops &ops, double v, DType dtype);

/// The attribute `name` of `n` as a number (ints and bools too), or `fallback` when absent.
double numberAttr(const ir::Node &n, std::string_view name, double fallback);

} // namespace kiln::passes::lower

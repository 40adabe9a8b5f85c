#pragma once
/// const-fold: evaluates elementwise ops whose operands are all constants.
///
/// A `constant` is a Python number (`int`, `float`, `bool`) or a tensor filled with one value,
/// so an elementwise op of constants is again a constant of the op's result type. Folding
/// computes exactly what the eager kernels compute, in the result's dtype:
/// - operands are cast to the computation dtype (torch.result_type of the operands; for
///   comparisons the promoted operand dtype, for `cast` the target), then the op runs in it:
///   f32 in float, f16/bf16 in float rounded once to the dtype, f64 in double, integers with
///   two's-complement wrap-around at their width, bool as logic (`add` is or, `mul` is and);
/// - Python numbers follow Python: an int result that leaves int64 is not folded, nor are ints
///   beyond 2^53 mixed with floats;
/// - folded: neg, abs, relu, sqrt, cast, add, sub, mul, div, maximum, minimum (NaN-propagating),
///   the comparisons and where. Not folded: exp, log, rsqrt, tanh, sigmoid, erf, gelu, silu and
///   pow, whose kernels use fast approximations that a folded libm value would not match
///   bit for bit; nor casts of NaN, infinities or out-of-range floats to integers (undefined).
/// Folded nodes are replaced by a new `constant` (the old operands are left to dce).
///
///   %0 = constant() {value = 2} : int
///   %1 = constant() {value = 0.5} : f32[]
///   %2 = mul(%1, %0) : f32[]
/// becomes
///   %2 = constant() {value = 1.0} : f32[]

#include "passes/pass.h"

namespace kiln::passes {

/// Runs const-fold on `graph`; returns true when it folded a node.
bool foldConstants(ir::Graph &graph);
std::unique_ptr<Pass> createConstFoldPass();

} // namespace kiln::passes

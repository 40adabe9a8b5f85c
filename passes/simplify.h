#pragma once
/// simplify: algebraic rewrites that make a node's result one of its operands (or a constant).
///
/// Every rewrite keeps the result's exact type (dtype, sizes and strides) and, for floats, every
/// result bit, NaN, infinities and the sign of zero included:
/// - `x + 0`, `0 + x`, `x - 0` → x and `x * 0`, `0 * x` → 0 for integer and bool results;
///   for floating results only the identities that hold bit for bit: `x + (-0.0)`,
///   `(-0.0) + x`, `x - 0.0`, `x * 1`, `1 * x`, `x / 1` (`x + 0.0` turns -0.0 into +0.0 and
///   `x * 0` is NaN for infinities and NaNs, so neither is applied);
/// - `neg(neg(x))` → x;
/// - `transpose(transpose(x, a, b), a, b)` → x; `expand(x)` to x's own shape → x;
/// - `view(view(x))` → `view(x)` and `reshape(reshape(x))` → `reshape(x)` (also mixed), or x when
///   the shape is x's own; a view or reshape to x's own type → x;
/// - `cast(x)` to x's own dtype → x.
/// The operand of a rewritten view stays a view of the same storage, so the view rewrites always
/// apply. The others make a result share storage that was a fresh tensor (`x + 0` was a copy), so
/// they apply only to functional graphs (see functionalize.h: run functionalize first), and not
/// when x is (a view of) an input the graph writes back at its end.
/// Rewritten nodes are deleted; operands left unused are dce's.
///
///   %0 = constant() {value = 1} : int
///   %1 = mul(%x, %0) : f32[4]
///   %2 = neg(%1) : f32[4]
///   %3 = neg(%2) : f32[4]
///   return %3
/// becomes
///   %0 = constant() {value = 1} : int
///   return %x

#include "passes/pass.h"

namespace kiln::passes {

/// Runs simplify on `graph`; returns true when it rewrote a node.
bool simplify(ir::Graph &graph);
std::unique_ptr<Pass> createSimplifyPass();

} // namespace kiln::passes

#pragma once
// Private to the interpreter: element values and the scalar semantics of every prim.

#include "ir/loop/expr.h"
#include "runtime/tensor.h"

#include <span>
#include <utility>

namespace kiln::ir::loop::detail {

/// One element: `f` for floating dtypes, `i` for integers and b8 (0 or 1).
struct Elem {
  double f = 0;
  int64_t i = 0;
};

/// The int64 range of an integer or b8 dtype.
std::pair<int64_t, int64_t> intLimits(DType t);
/// `v` rounded to floating dtype `t`.
double roundFloat(double v, DType t);
/// `v` wrapped into integer dtype `t` (two's complement; b8: v != 0).
int64_t wrapInt(int64_t v, DType t);
/// `v` of dtype `from` converted to `to` (a cast).
Elem convert(Elem v, DType from, DType to);
/// A prim applied to its operands, whose dtype (for where: the dtype of the two values) is
/// `operandType`; the result has dtype `resultType`.
Elem evalPrim(ExprKind kind, DType operandType, DType resultType, std::span<const Elem> args);

/// The element at flat `offset` (in elements, from the tensor's first element).
Elem readElem(const Tensor &t, int64_t offset);
void writeElem(const Tensor &t, int64_t offset, Elem v);

} // namespace kiln::ir::loop::detail

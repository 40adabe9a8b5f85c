#pragma once
// Private to the interpreter: element I/O. The scalar semantics of every prim live in
// prim_eval.h, shared with the recorder and the graph pass const-fold.

#include "ir/loop/prim_eval.h"
#include "runtime/tensor.h"

namespace kiln::ir::loop::detail {

using loop::convert;
using loop::Elem;
using loop::intLimits;
using loop::roundFloat;
using loop::wrapInt;

/// loop::evalPrim, with an error naming the interpreter where the prim has no value.
Elem evalPrim(ExprKind kind, DType operandType, DType resultType, std::span<const Elem> args);

/// The element at flat `offset` (in elements, from the tensor's first element).
Elem readElem(const Tensor &t, int64_t offset);
void writeElem(const Tensor &t, int64_t offset, Elem v);

} // namespace kiln::ir::loop::detail

#pragma once
/// Eager implementations of the extern ops lowering emits (matmul, linear, conv2d,
/// scaled_dot_product_attention, embedding), for the reference interpreter.
///
/// A separate target (`//passes/lower:eager_externs`): it links the runtime's kernels, which the
/// compiler layers never do; tests and tools that run lowered programs use it.

#include "ir/loop/interpreter.h"

namespace kiln::passes::lower {

/// Registers every extern of passes/lower/README.md on `interp` (replacing the interpreter's own
/// `matmul`, which ignores `transpose_a`/`transpose_b`).
void registerEagerExterns(ir::loop::Interpreter &interp);

} // namespace kiln::passes::lower

#pragma once
/// The extern ops lowering emits (passes/lower/README.md, "Extern contract"), implemented by
/// kiln's eager kernels: the one table the CPU and CUDA executors and the reference interpreter
/// run extern nodes with (through ir::loop::runExtern, which checks every call's results).
///
/// A target of its own (`//codegen:externs`): it links the runtime's kernels, which the
/// compiler layers never do.

#include "ir/loop/binding.h"

namespace kiln::ir::loop {
class Interpreter;
} // namespace kiln::ir::loop

namespace kiln::codegen {

using ir::loop::ExternFn;
using ir::loop::ExternTable;

/// Every extern of the contract, keyed by op name (built once).
const ExternTable &eagerExterns();

/// Registers every entry of eagerExterns() on `interp` (replacing the interpreter's own
/// `matmul`, which ignores `transpose_a`/`transpose_b`).
void registerEagerExterns(ir::loop::Interpreter &interp);

} // namespace kiln::codegen

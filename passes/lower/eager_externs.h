#pragma once
/// The extern ops lowering emits (passes/lower/README.md, "Extern contract"), implemented by
/// kiln's eager kernels: one table used by the reference interpreter and by compiled programs.
///
/// A separate target (`//passes/lower:eager_externs`): it links the runtime's kernels, which the
/// compiler layers never do; tests, tools and compiled programs that run lowered code use it.

#include "ir/attribute.h"
#include "runtime/tensor.h"

#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace kiln::ir::loop {
class Interpreter;
} // namespace kiln::ir::loop

namespace kiln::passes::lower {

/// Computes an extern node: its input tensors and attributes to one tensor per output buffer.
using ExternFn =
    std::function<std::vector<Tensor>(std::span<const Tensor> inputs, const ir::Attributes &attrs)>;
using ExternTable = std::map<std::string, ExternFn, std::less<>>;

/// Every extern of the contract, keyed by op name (built once).
const ExternTable &eagerExterns();

/// Registers every entry of eagerExterns() on `interp` (replacing the interpreter's own
/// `matmul`, which ignores `transpose_a`/`transpose_b`).
void registerEagerExterns(ir::loop::Interpreter &interp);

} // namespace kiln::passes::lower

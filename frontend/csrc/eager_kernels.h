#pragma once
/// The eager kernel of each op-table row (ir/ops.def KILN_SPELLING): what a call of any of the
/// row's spellings runs, given its arguments bound to the row's schema. bind_op_table.cc binds
/// every spelling of a row that has a kernel here; a row without one is still bound by hand
/// (bind_reduce.cc, bind_indexing.cc, ...) until it moves here.

#include "frontend/csrc/arg_parser.h"
#include "ir/op_kind.h"

#include <span>
#include <string_view>

namespace kiln::frontend {

using EagerFn = Tensor (*)(const BoundArgs &);
/// Writes the op's result into `self` (argument 0) directly.
using EagerInplaceFn = void (*)(Tensor &self, const BoundArgs &);

struct EagerKernel {
  ir::OpKind op;
  std::string_view name; ///< the row's schema name (`selu` for the Elu row that spells selu)
  EagerFn fn;
  /// An in-place kernel that writes without a temporary (masked_fill_, scatter_add_), used by
  /// the in-place spellings when nothing requires grad; null: the result of `fn` is copied in.
  EagerInplaceFn inplace = nullptr;
};

/// The kernel of the row of `op` whose schema is called `name`, or null.
const EagerKernel *findEagerKernel(ir::OpKind op, std::string_view name);

} // namespace kiln::frontend

#pragma once
/// The eager kernel of each op-table row (ir/ops.def KILN_SPELLING): what a call of any of the
/// row's spellings runs, given its arguments bound to the row's schema. bind_op_table.cc binds
/// every spelling of a row that has a kernel here; a row without one is still bound by hand
/// (bind_reduce.cc, bind_indexing.cc, ...) until it moves here.

#include "frontend/csrc/arg_parser.h"
#include "ir/op_kind.h"

#include <optional>
#include <span>
#include <string_view>

namespace kiln::frontend {

using EagerFn = Tensor (*)(const BoundArgs &);
/// A kernel whose result is not one tensor (values and indices, a tuple of tensors).
using EagerObjectFn = py::object (*)(const BoundArgs &);
/// Writes the op's result into `self` (argument 0) directly.
using EagerInplaceFn = void (*)(Tensor &self, const BoundArgs &);

struct EagerKernel {
  /// The row's node kind; nullopt for a KILN_EAGER_SPELLING row.
  std::optional<ir::OpKind> op;
  std::string_view name; ///< the row's schema name (`selu` for the Elu row that spells selu)
  EagerFn fn;
  /// An in-place kernel that writes without a temporary (masked_fill_, scatter_add_), used by
  /// the in-place spellings when nothing requires grad; null: the result of `fn` is copied in.
  EagerInplaceFn inplace = nullptr;
  /// Set instead of `fn` for a result that is not one tensor (never spelled in place).
  EagerObjectFn object = nullptr;
  /// The row's number of arguments, telling apart rows of one name and kind (`where(cond)` and
  /// Tensor.where's `where(input, condition, other)`); -1: any.
  int numArgs = -1;
  /// A number never stands for a Tensor argument (products: torch's `mm(x, 2)` is a TypeError,
  /// where `add(x, 2)` adds a scalar).
  bool tensorsOnly = false;
};

/// The kernel of the row of `op` (nullopt: a KILN_EAGER_SPELLING row) with `schema`, or null.
const EagerKernel *findEagerKernel(std::optional<ir::OpKind> op, const ir::OpSchema &schema);

/// The kernels of the view and shape rows (eager_kernels_shape.cc), of the reduction, scan and
/// sorting rows (eager_kernels_reduce.cc) and of the product and convolution rows
/// (eager_kernels_linalg.cc), of the indexing rows (eager_kernels_index.cc) and of the sampling
/// rows (eager_kernels_random.cc), searched by findEagerKernel.
std::span<const EagerKernel> shapeEagerKernels();
std::span<const EagerKernel> reduceEagerKernels();
std::span<const EagerKernel> linalgEagerKernels();
std::span<const EagerKernel> indexEagerKernels();
std::span<const EagerKernel> randomEagerKernels();

} // namespace kiln::frontend

#pragma once
// Private to the verifier and the shape rules: the result types of the ops eager's kernels run
// as externs (cumsum, cumprod, argsort, topk_indices, scatter, scatter_add, index_add,
// index_put), computed and checked in shape_rules_sort.cc.

#include "ir/graph.h"
#include "ir/shape_rules.h"

namespace kiln::ir::detail {

/// Whether `op` is one of the ops above.
bool isScanOrSortOp(OpKind op);
/// The result type of a scan or sort, or a rule failure worded as eager kiln's.
TensorMeta scanOrSortType(const Node &n);
/// Whether `op` is a LAPACK-backed op (shape_rules_linalg.cc), and its result type: scanOrSortType
/// and checkScanOrSort serve them too.
bool isLinalgOp(OpKind op);
TensorMeta linalgType(const Node &n);
/// The verifier's check: the result is what scanOrSortType computes.
void checkScanOrSort(const Node &n);

} // namespace kiln::ir::detail

#pragma once
// Private to the verifier and the shape rules: the result types of the layout copies and masks
// (masked_fill, tril/triu, flip, roll, repeat, stack, pad, one_hot), computed in
// shape_rules_layout.cc and checked in verifier_rules_layout.cc.

#include "ir/graph.h"
#include "ir/shape_rules.h"

namespace kiln::ir::detail {

/// Whether `op` is one of the ops below (their rules live in these two files).
bool isLayoutOp(OpKind op);
/// The result type of a layout op, or a rule failure (bad dims, a non-bool mask, pads that
/// leave a negative size, ...) with eager kiln's conditions.
TensorMeta layoutType(const Node &n, SymAssumptions *assumed);
/// The verifier's check of a layout op: its result is what layoutType computes.
void checkLayout(const Node &n);

} // namespace kiln::ir::detail

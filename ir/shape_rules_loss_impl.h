#pragma once
// Private to the verifier and the shape rules: the result types of the class losses (nll_loss,
// cross_entropy), computed and checked in shape_rules_loss.cc.

#include "ir/graph.h"
#include "ir/shape_rules.h"

namespace kiln::ir::detail {

/// Whether `op` is nll_loss or cross_entropy.
bool isClassLossOp(OpKind op);
/// The result type of a class loss, or a rule failure worded as eager kiln's (a target of the
/// wrong dtype or shape, a weight not of one entry per class, an unknown reduction).
TensorMeta classLossType(const Node &n, SymAssumptions *assumed);
/// The verifier's check of a class loss: its result is what classLossType computes.
void checkClassLoss(const Node &n);

} // namespace kiln::ir::detail

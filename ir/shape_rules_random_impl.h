#pragma once
// Private to the verifier and the shape rules: the result types of the random ops (philox_state,
// dropout, rand, randn, bernoulli), computed and checked in shape_rules_random.cc.

#include "ir/graph.h"
#include "ir/shape_rules.h"

namespace kiln::ir::detail {

/// Whether `op` is one of the ops above.
bool isRandomOp(OpKind op);
/// The result type of a random op, or a rule failure worded as eager kiln's.
TensorMeta randomType(const Node &n);
/// The verifier's check: the result is what randomType computes.
void checkRandom(const Node &n);

} // namespace kiln::ir::detail

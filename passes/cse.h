#pragma once
/// cse: common subexpression elimination.
///
/// Two pure nodes (trait::Pure) compute the same values when they have the same op, the same
/// operands (in any order for trait::Commutative ops), equal attributes and equal result types;
/// the later one's results are replaced by the earlier one's and the later node is deleted.
/// Walking in order with operands already rewritten merges whole duplicate chains in one run.
/// An in-place op (trait::InPlace) may change what a pure node would compute, so it ends the
/// region in which nodes are merged.
///
///   %0 = mul(%x, %y) : f32[4]
///   %1 = mul(%y, %x) : f32[4]
///   %2 = add(%0, %1) : f32[4]
/// becomes
///   %0 = mul(%x, %y) : f32[4]
///   %1 = add(%0, %0) : f32[4]

#include "passes/pass.h"

namespace kiln::passes {

/// Runs cse on `graph`; returns true when it merged a node.
bool eliminateCommonSubexpressions(ir::Graph &graph);
std::unique_ptr<Pass> createCsePass();

} // namespace kiln::passes

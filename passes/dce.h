#pragma once
/// dce: dead code elimination.
///
/// Deletes every pure node (trait::Pure) none of whose results is used, walking the graph
/// backwards so a whole dead chain goes in one run. Inputs, the `return` node and nodes with
/// side effects (in-place ops) always stay.
///
///   %0 = exp(%x) : f32[4]          (unused)
///   %1 = neg(%x) : f32[4]
///   return %1
/// becomes
///   %0 = neg(%x) : f32[4]
///   return %0

#include "passes/pass.h"

namespace kiln::passes {

/// Runs dce on `graph`; returns true when it deleted a node.
bool eliminateDeadCode(ir::Graph &graph);
std::unique_ptr<Pass> createDcePass();

} // namespace kiln::passes

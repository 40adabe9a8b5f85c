#pragma once
/// shape-infer: recomputes the type of every node's result from its operands and attributes.
///
/// Walks the graph in order and sets each result to what its op's shape rule computes
/// (ir/shape_rules.h): dtype by torch's promotion (Python scalars weak), symbolic sizes, view
/// strides for views and contiguous strides for everything else. Inputs, constants and `call`
/// nodes keep their given types; later nodes see the recomputed types of earlier ones, so a
/// symbolic input size flows through the whole graph. Where two sizes must agree without the
/// text showing it (broadcasting `s0` with `s1`), the left one is kept and the equality is
/// recorded in the returned assumptions. A rule that cannot hold (`4` broadcast with `3`) is a
/// DiagnosticError naming the node: `%2 = add: operand shapes do not broadcast: 4 vs 3 in dim -1`.
///
///   graph @f(%x: f32[s0, 8], %w: f32[16, 8]) {
///     %0 = linear(%x, %w) : f32[2, 16]        (typed by one example)
///     %1 = sum(%0) {dim = [1]} : f32[2]
/// becomes
///     %0 = linear(%x, %w) : f32[s0, 16]
///     %1 = sum(%0) {dim = [1]} : f32[s0]

#include "ir/shape_rules.h"
#include "passes/pass.h"

namespace kiln::passes {

/// What inferShapes did: whether a type changed, and the facts about symbols it assumed.
struct ShapeInference {
  bool changed = false;
  ir::SymAssumptions assumed;
};

/// Runs shape-infer on `graph`; throws ir::DiagnosticError (naming the node) when a rule fails.
ShapeInference inferShapes(ir::Graph &graph);
std::unique_ptr<Pass> createShapeInferPass();

} // namespace kiln::passes

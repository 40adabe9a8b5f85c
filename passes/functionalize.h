#pragma once
/// functionalize: turns mutation into data flow, so that later passes see pure SSA values.
///
/// A mutation is a `copy_(dst, src)` (write src, cast to dst's dtype and broadcast to its shape,
/// into dst) or an in-place `call`: one whose target ends in a single `_` (`kiln.Tensor.add_`,
/// the torch naming convention the frontend follows) mutates its operand 0 and returns it.
/// Every tensor value belongs to a base (a graph input or the result of a non-view node) through
/// a chain of views. A mutation gives its base a new value:
/// - writing the base itself: the new value is src (cast/expanded as copy_ would);
/// - writing through `slice` / `select` views: the base's new value is built back out through
///   the chain with `slice_scatter` / `select_scatter` (torch's functional scatters);
/// - writing through any other view (transpose, view, expand, ...) is rejected with a diagnostic
///   naming the view, as are `operator.setitem` calls (frontend item assignment).
/// An in-place call becomes its out-of-place variant (`kiln.Tensor.add`, reading the current
/// value of operand 0); its result is the new value.
///
/// Uses after a mutation read the new value: a use of the base reads it directly, a use of a
/// view made before the mutation reads the same view chain re-applied to the new value (new view
/// nodes, inserted before the use). The `copy_` nodes themselves disappear.
///
/// A mutated graph input is written back once, at the end: one `copy_(input, newValue)` per
/// mutated input, in input order, just before `return` (the only mutation left in the graph). A
/// returned or written-back value that still shares storage with a written-back input is copied
/// first (`cast` to its own dtype), so the write-back cannot change it.
///
/// Assumed: `call` results do not alias their operands (a callee's views are not tracked), and
/// calls that are not marked in-place do not mutate their operands.
///
///   graph @f(%x: f32[4, 8], %y: f32[8]) {
///     %0 = select(%x) {dim = 0, index = 1} : f32[8]
///     %1 = copy_(%0, %y) : f32[8]
///     %2 = exp(%x) : f32[4, 8]
///     return %2
/// becomes
///     %0 = select(%x) {dim = 0, index = 1} : f32[8]
///     %1 = select_scatter(%x, %y) {dim = 0, index = 1} : f32[4, 8]
///     %2 = exp(%1) : f32[4, 8]
///     %3 = copy_(%x, %1) : f32[4, 8]
///     return %2
/// (dce then deletes the unused select).

#include "passes/pass.h"

#include <optional>
#include <span>
#include <vector>

namespace kiln::passes {

/// Whether `node` mutates a tensor: `copy_`, an in-place `call` (target ending in one `_`) or
/// item assignment (`operator.setitem`). Graphs without such nodes are functional.
bool isMutation(const ir::Node &node);

/// The inputs a functional graph writes back: the operand 0 of its trailing
/// `copy_(input, value)` nodes (results unused, one per input, just before `return`), or nullopt
/// when the graph mutates anything else.
std::optional<std::vector<ir::Value *>> writtenBackInputs(const ir::Graph &graph);

/// Removes the write-backs of a functional graph and returns them as (input, new value) pairs,
/// in graph order: a runner that copies each value into its input after the call does what they
/// did. Throws kiln::Error when the graph mutates anything else.
std::vector<std::pair<ir::Value *, ir::Value *>> takeWriteBacks(ir::Graph &graph);

/// Whether `v` is one of `inputs` or a view of one (it would see their write-back).
bool sharesStorage(const ir::Value *v, std::span<ir::Value *const> inputs);

/// Runs functionalize on `graph`; returns true when it removed a mutation. Throws
/// ir::DiagnosticError naming the node for a mutation it cannot express.
bool functionalize(ir::Graph &graph);
std::unique_ptr<Pass> createFunctionalizePass();

} // namespace kiln::passes

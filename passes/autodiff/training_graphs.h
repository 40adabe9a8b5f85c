#pragma once
/// Compiled training: the joint forward+backward graph of a captured graph and its split into a
/// forward graph and a backward graph (AOTAutograd's scheme, at the graph-IR level).
///
/// The joint graph is the forward graph followed by the vector-Jacobian product of every node
/// that carries a gradient, built by the same derivative rules eager autograd runs
/// (autograd/derivatives.h, through node_vjp.h on a GraphRuleBuilder), in reverse order, with a
/// gradient accumulated by `add` where a value has several uses. Its inputs are the forward's
/// inputs and one gradient per differentiable output; its outputs the forward's outputs and the
/// gradients of the inputs that need one.
///
/// The split is a min-cut rematerialization (AOTAutograd's partitioner): of the values the
/// backward reads from the forward's region, the forward saves the set of fewest bytes from
/// which the backward can recompute the rest with cheap ops only (pointwise, views, reductions;
/// never a library call such as a GEMM or a convolution), found as a minimum cut (min_cut.h).
/// The forward graph returns its outputs and then the saved values that it computes; saved
/// forward inputs are passed to the backward by the caller as they are. Mutations of the graph's
/// inputs (BatchNorm's running statistics, counters) are functionalized and written back once at
/// the end of the forward graph (`copy_` nodes, as the inference path compiles them); an input that
/// requires grad may not be mutated.

#include "ir/graph.h"
#include "ir/parser.h"

#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace kiln::passes::autodiff {

/// A value the backward takes from the forward: one of the forward's inputs, or one of the
/// forward graph's outputs (index among all of them, after the original outputs).
struct SavedValue {
  bool isInput = false;
  int index = 0;
  int64_t bytes = 0;
  std::string producer; ///< the op that computes it (`input` for an input), for logs and tests
};

/// An in-place update, with grad, of a forward input that requires grad (relu_ of an activation
/// an eager node computed): the forward returns the updated value as an extra output and the
/// caller copies it into the input with autograd recording, as eager's in-place op would.
struct WriteBack {
  int input = 0;  ///< the forward input updated
  int output = 0; ///< the forward output holding its new value (after the graph's outputs)
  /// The graph's outputs that are this same updated value: the caller returns the input there.
  std::vector<int> sameOutputs;
};

struct TrainingGraphs {
  std::unique_ptr<ir::Graph> forward, backward;
  ir::NodePositions forwardPositions, backwardPositions;
  /// The backward's first inputs, in order.
  std::vector<SavedValue> saved;
  /// The forward outputs that take a gradient; the backward's remaining inputs, in order.
  std::vector<int> gradOutputs;
  /// The forward inputs whose gradients the backward returns, in order (inputs that need a
  /// gradient and get none are absent: their gradient is None).
  std::vector<int> inputGrads;
  /// The forward's updates with grad that the caller writes back (their outputs follow the
  /// graph's outputs, before the saved values).
  std::vector<WriteBack> writeBacks;
  /// The joint graph, printed (KILN_LOGS=aot).
  std::string jointText;
};

/// Builds the joint graph of `graph` and splits it. `inputNeedsGrad[i]`: graph input i requires
/// grad; the results of `noGrad` nodes carry no gradient (what a `no_grad` block computed). Throws
/// Unsupported (graph_rule_builder.h) for what it cannot differentiate: an op without a compiled
/// derivative on a path that needs gradients, symbolic sizes, a backward that reads an input from
/// before the forward's update of it.
TrainingGraphs buildTrainingGraphs(const ir::Graph &graph, const std::vector<bool> &inputNeedsGrad,
                                   const std::unordered_set<const ir::Node *> &noGrad = {});

} // namespace kiln::passes::autodiff

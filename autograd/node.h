#pragma once
/// The autograd graph: a Node per recorded op (its grad_fn), edges to the nodes of its inputs.
///
/// A node maps the gradients of its outputs to the gradients of its inputs (one per `next` edge,
/// an undefined tensor where an input needs none). Leaves that require grad end in an
/// AccumulateGrad node that adds into their `.grad`. Nodes are created in increasing `sequence`
/// order; the engine runs a later node before an earlier one when both are ready, which is a
/// reverse topological order of the forward, and a ready AccumulateGrad before either.

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/tensor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kiln::autograd {

class Node;

/// Where a gradient goes: input `inputNr` of node `fn` (an output slot of the forward op).
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t inputNr = 0;
  bool valid() const { return fn != nullptr; }
};

/// Shape, dtype and device of one forward output: what a missing gradient materializes as.
struct OutputInfo {
  Shape sizes;
  DType dtype = DType::Float32;
  Device device;
};

/// A hook on the gradient of one output of a node (Tensor.register_hook on a non-leaf): returns a
/// replacement gradient, or an undefined tensor to keep the one it got.
using GradHook = std::function<Tensor(const Tensor &)>;

class Node : public std::enable_shared_from_this<Node> {
public:
  Node();
  virtual ~Node() = default;
  Node(const Node &) = delete;
  Node &operator=(const Node &) = delete;

  /// Gradients of the inputs (one per `next` edge) from the gradients of the outputs (one per
  /// output; the engine materializes missing ones as zeros).
  virtual std::vector<Tensor> apply(std::vector<Tensor> &&gradOutputs) = 0;
  /// torch's class name of the node (`MulBackward0`).
  virtual std::string name() const = 0;
  /// Frees what the node saved for backward (after a backward without retain_graph).
  virtual void releaseSaved() {}

  /// Whether the engine fills the gradients of unused outputs with zeros before apply (a
  /// compiled backward instead tells which input gradients they reach, and answers None).
  bool materializeGrads = true;

  /// Whether input `i` of the forward op needs a gradient.
  bool needsInputGrad(size_t i) const { return i < next.size() && next[i].valid(); }

  std::vector<Edge> next;
  std::vector<OutputInfo> outputs;
  /// Hooks per output, run in order before the node; then the retain_grad hooks, which see the
  /// gradient the others left.
  std::vector<std::vector<GradHook>> preHooks;
  std::vector<std::pair<uint32_t, GradHook>> retainHooks;
  uint64_t sequence;
};

/// The node every use of one leaf tensor shares: adds incoming gradients into the leaf's `.grad`.
class AccumulateGrad final : public Node {
public:
  explicit AccumulateGrad(const Tensor &leaf);
  std::vector<Tensor> apply(std::vector<Tensor> &&gradOutputs) override;
  std::string name() const override { return "AccumulateGrad"; }
  /// The leaf, while it is alive.
  Tensor variable() const;

private:
  std::weak_ptr<TensorImpl> leaf_;
};

} // namespace kiln::autograd

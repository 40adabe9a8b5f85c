#pragma once
/// The compiled derivative of one graph-IR node: which ops have one, and the nodes of its
/// vector-Jacobian product, built by the rules of autograd/derivatives.h on a GraphRuleBuilder.

#include "autograd/derivatives.h"
#include "passes/autodiff/graph_rule_builder.h"

#include <optional>
#include <vector>

namespace kiln::passes::autodiff {

enum class Differentiability : uint8_t {
  Rule,     ///< gradients flow through the node by its rule (nodeVjp)
  Constant, ///< its results never carry gradients (comparisons, indices, random draws, sizes)
  Missing,  ///< a differentiable op without a compiled derivative yet
};

/// A dim counted from the end (negative) as one counted from the front.
inline int64_t wrapDim(int64_t dim, int64_t rank) { return dim < 0 ? dim + rank : dim; }

/// The number of elements a reduction over `dims` (all when absent) folds into one.
inline double reducedCount(const GraphRuleBuilder::Sizes &sizes,
                           const GraphRuleBuilder::DimList &dims) {
  const int64_t rank = static_cast<int64_t>(sizes.size());
  double count = 1;
  if (!dims) {
    for (int64_t s : sizes)
      count *= static_cast<double>(s);
    return count;
  }
  for (int64_t d : *dims)
    count *= static_cast<double>(sizes[wrapDim(d, rank)]);
  return count;
}

/// Rule for the ops nodeVjp differentiates; Constant for the ops ir/ops.def marks NoGradient,
/// Comparison or Integral (and graph leaves); Missing otherwise (tests/cpp/autodiff_coverage_test
/// lists them, so a new op must choose).
Differentiability differentiability(ir::OpKind op);
inline Differentiability differentiability(const ir::Node &node) {
  return differentiability(node.op());
}

/// The gradients of `node`'s operands (nullptr where `need` does not ask or none flows), given
/// `grad`, the gradient of its one result. Throws Unsupported for a form the rules do not cover.
std::vector<ir::Value *> nodeVjp(GraphRuleBuilder &b, const ir::Node &node, ir::Value *grad,
                                 autograd::rules::Needs need);

/// The rules of node_vjp_math.cc (the remaining pointwise math, activations, shape ops and
/// losses): whether `op` has one, and its gradients (nullopt for another op).
bool hasExtraVjp(ir::OpKind op);
std::optional<std::vector<ir::Value *>> extraVjp(GraphRuleBuilder &b, const ir::Node &node,
                                                 ir::Value *grad, autograd::rules::Needs need);

/// The rules of node_vjp_layout.cc (stack, pad, interpolation, fold / unfold, advanced
/// indexing): whether `op` has one, and its gradients (nullopt for another op).
bool hasLayoutVjp(ir::OpKind op);
std::optional<std::vector<ir::Value *>> layoutVjp(GraphRuleBuilder &b, const ir::Node &node,
                                                  ir::Value *grad, autograd::rules::Needs need);

/// The rules of node_vjp_nn.cc (im2col forms), which nodeVjp dispatches to.
std::vector<ir::Value *> convolutionVjp(GraphRuleBuilder &b, const ir::Node &node, ir::Value *grad,
                                        autograd::rules::Needs need);
std::vector<ir::Value *> conv3dVjp(GraphRuleBuilder &b, const ir::Node &node, ir::Value *grad,
                                   autograd::rules::Needs need);
std::vector<ir::Value *> convTransposeVjp(GraphRuleBuilder &b, const ir::Node &node,
                                          ir::Value *grad, autograd::rules::Needs need);
std::vector<ir::Value *> batchNormVjp(GraphRuleBuilder &b, const ir::Node &node, ir::Value *grad,
                                      autograd::rules::Needs need);
std::vector<ir::Value *> maxPoolVjp(GraphRuleBuilder &b, const ir::Node &node, ir::Value *grad);
std::vector<ir::Value *> avgPoolVjp(GraphRuleBuilder &b, const ir::Node &node, ir::Value *grad);
std::vector<ir::Value *> attentionVjp(GraphRuleBuilder &b, const ir::Node &node, ir::Value *grad,
                                      autograd::rules::Needs need);
std::vector<ir::Value *> adaptiveAvgPoolVjp(GraphRuleBuilder &b, const ir::Node &node,
                                            ir::Value *grad);

} // namespace kiln::passes::autodiff

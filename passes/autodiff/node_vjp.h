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

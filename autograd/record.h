#pragma once
/// Recording an op: a FunctionNode whose rule (a lambda holding what it saved) computes the
/// input gradients, attached as the history of the op's outputs.
///
///   Tensor out = kiln::ops::mul(a, b);
///   record("MulBackward0", {&a, &b}, out, [&](const NodePtr &self) {
///     return [sa = SavedTensor(a), sb = SavedTensor(b)](EagerBuilder &bd, const Node &n,
///                                                       Grads &g) { ... };
///   });
///
/// `make` runs only when grad mode is on and an input requires grad, so an op that records
/// nothing saves nothing. `make` gets the new node to save outputs against (SavedTensor's owner).

#include "autograd/builder.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "autograd/node.h"
#include "autograd/saved.h"
#include "runtime/device_ops.h"
#include "runtime/error.h"

#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln::autograd {

using NodePtr = std::shared_ptr<Node>;
using Grads = std::vector<Tensor>;

template <class Rule> class FunctionNode final : public Node {
public:
  explicit FunctionNode(const char *name) : name_(name) {}
  void setRule(Rule rule) { rule_.emplace(std::move(rule)); }

  std::vector<Tensor> apply(std::vector<Tensor> &&gradOutputs) override {
    if (!rule_)
      throwReleased();
    EagerBuilder b;
    std::vector<Tensor> grads = (*rule_)(b, *this, gradOutputs);
    grads.resize(next.size());
    return grads;
  }
  std::string name() const override { return name_; }
  void releaseSaved() override { rule_.reset(); }

private:
  [[noreturn]] void throwReleased() const {
    SavedTensor released;
    released.release();
    released.unpack(*this);
    std::abort();
  }
  const char *name_;
  std::optional<Rule> rule_;
};

/// Records the op that made `outputs` from `inputs` when anyRequiresGrad(inputs); returns whether
/// it did. An undefined input pointer or tensor is an input that never needs a gradient.
template <class Make>
bool record(const char *name, std::span<const Tensor *const> inputs, std::span<Tensor> outputs,
            Make &&make) {
  bool any = false;
  if (isGradEnabled())
    for (const Tensor *t : inputs)
      any = any || (t && t->defined() && t->requiresGrad());
  if (!any)
    return false;
  // A kernel may hand back an input itself (a no-op cast, dropout in eval): the output gets its
  // own handle, so the history set below is not the input's.
  for (Tensor &out : outputs)
    for (const Tensor *t : inputs)
      if (t && out.defined() && out.isSameAs(*t))
        out = detach(out);
  using Rule = std::invoke_result_t<Make, const NodePtr &>;
  auto node = std::make_shared<FunctionNode<Rule>>(name);
  node->next.reserve(inputs.size());
  for (const Tensor *t : inputs)
    node->next.push_back(t ? gradEdge(*t) : Edge{});
  for (const Tensor &out : outputs)
    node->outputs.push_back({out.sizes(), out.dtype(), out.device()});
  NodePtr base = node;
  node->setRule(make(base));
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].defined())
      setHistory(outputs[i], base, static_cast<uint32_t>(i));
  return true;
}

template <class Make>
bool record(const char *name, std::initializer_list<const Tensor *> inputs, Tensor &output,
            Make &&make) {
  return record(name, std::span<const Tensor *const>(inputs.begin(), inputs.size()),
                std::span<Tensor>(&output, 1), std::forward<Make>(make));
}

/// For ops whose recorded forward differs from the kernel (a decomposition, extra outputs) on
/// device tensors: the kernel runs, and the node raises when a backward reaches it. Returns
/// whether the inputs were on a device.
bool recordUnsupportedOnDevice(const char *op, std::initializer_list<const Tensor *> inputs,
                               Tensor &output);

/// A Python number as an operand (a wrapped scalar: it promotes weakly).
inline Tensor number(double v) { return Tensor::wrapScalar(Scalar(v)); }

/// Records the rule of a pooling op whose kernel returned, per output, the index of the input
/// element it came from within the flattened input plane (max pooling): the gradient is
/// scattered back there.
void recordIndexedPool(const char *name, const Tensor &input, Tensor &output, const Tensor &indices,
                       int64_t spatialDims);

/// One-input ops whose rule reads the input (`fromInput`) or the output (`fromOutput`):
/// `rule(b, grad, saved)` gives the input's gradient.
template <class RuleFn>
Tensor unaryFromInput(const char *name, const Tensor &a, Tensor out, RuleFn rule) {
  record(name, {&a}, out, [&](const NodePtr &) {
    return [sa = SavedTensor(a), rule](EagerBuilder &b, const Node &n, Grads &g) {
      return Grads{rule(b, g[0], sa.unpack(n))};
    };
  });
  return out;
}

template <class RuleFn>
Tensor unaryFromOutput(const char *name, const Tensor &a, Tensor out, RuleFn rule) {
  record(name, {&a}, out, [&](const NodePtr &self) {
    return [so = SavedTensor(out, self), rule](EagerBuilder &b, const Node &n, Grads &g) {
      return Grads{rule(b, g[0], so.unpack(n))};
    };
  });
  return out;
}

} // namespace kiln::autograd

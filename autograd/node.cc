#include "autograd/node.h"

#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "autograd/ops.h"

#include <atomic>

namespace kiln::autograd {
namespace {
std::atomic<uint64_t> nextSequence{0};
} // namespace

Node::Node() : sequence(nextSequence.fetch_add(1, std::memory_order_relaxed)) {}

AccumulateGrad::AccumulateGrad(const Tensor &leaf) : leaf_(leaf.implPtr()) {
  // Ready leaves accumulate before any other ready node runs (torch orders them the same way),
  // so post-accumulate hooks fire as early as possible: DistributedDataParallel starts a
  // bucket's all-reduce there while the rest of the backward computes.
  sequence = UINT64_MAX;
  outputs.push_back({leaf.sizes(), leaf.dtype(), leaf.device()});
}

Tensor AccumulateGrad::variable() const {
  std::shared_ptr<TensorImpl> impl = leaf_.lock();
  return impl ? Tensor(std::move(impl)) : Tensor();
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor> &&gradOutputs) {
  Tensor leaf = variable();
  Tensor g = std::move(gradOutputs[0]);
  if (!leaf.defined() || !g.defined())
    return {};
  AutogradMeta &m = meta(leaf);
  for (const GradHook &hook : m.hooks)
    if (Tensor replaced = hook(g); replaced.defined())
      g = std::move(replaced);
  if (!m.grad.defined()) {
    // The stored gradient must not alias anything the graph or the caller still holds.
    m.grad = isGradEnabled() ? g : g.clone();
    if (!isGradEnabled())
      m.grad.setRequiresGrad(false);
  } else if (isGradEnabled()) {
    m.grad = ops::add(m.grad, g); // create_graph: the sum is itself differentiable
  } else {
    kiln::ops::inplace("add_", m.grad, kiln::ops::add(m.grad, g));
  }
  for (size_t i = 0; i < m.postAccumulateHooks.size(); ++i) // a hook may add hooks
    m.postAccumulateHooks[i](leaf);
  return {};
}

} // namespace kiln::autograd

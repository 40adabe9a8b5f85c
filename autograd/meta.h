#pragma once
/// A tensor's autograd state and the accessors the ops, the engine and the bindings share.
///
/// [Note: leaves and history]
/// A tensor with no grad_fn is a leaf; a leaf that requires grad accumulates into `.grad` through
/// one AccumulateGrad node (held weakly, so it lives as long as some graph uses it). A tensor made
/// by a recorded op has `requiresGrad` set and `gradFn`/`outputNr` naming the node output that
/// produced it. A view made by a recorded view op also remembers its base: an in-place op through
/// such a view rewrites the base's history (copy_slices.cc).

#include "autograd/node.h"
#include "runtime/tensor.h"

#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

namespace kiln {

struct AutogradMeta {
  std::shared_ptr<autograd::Node> gradFn;
  uint32_t outputNr = 0;
  Tensor grad;
  bool retainsGrad = false;
  std::weak_ptr<autograd::Node> accumulator;
  /// Hooks of a leaf, run on each gradient before it accumulates.
  std::vector<autograd::GradHook> hooks;
  /// Hooks of a leaf run after a gradient has accumulated into `.grad`, given the leaf
  /// (torch's register_post_accumulate_grad_hook: data-parallel training starts its gradient
  /// all-reduce from them).
  std::vector<std::function<void(const Tensor &)>> postAccumulateHooks;
  /// The base of a view recorded by a differentiable view op, and the base's history the view
  /// was cut from (an in-place write through another view rewrites it: see copy_slices.cc).
  Tensor viewBase;
  const autograd::Node *baseHistory = nullptr;
  /// A view made by an op with several view outputs (split, chunk), or a view of one: torch
  /// refuses in-place writes into it.
  bool multiOutputView = false;
};

} // namespace kiln

namespace kiln::autograd {

/// The tensor's autograd state, created on first use.
AutogradMeta &meta(const Tensor &t);
/// The tensor's autograd state, or null when it has none.
inline AutogradMeta *metaOrNull(const Tensor &t) { return t.impl().autograd.get(); }

/// The node that produced t, or null for a leaf.
inline Node *gradFn(const Tensor &t) {
  AutogradMeta *m = metaOrNull(t);
  return m ? m->gradFn.get() : nullptr;
}
inline bool isLeaf(const Tensor &t) { return gradFn(t) == nullptr; }

/// Where t's gradient goes: its grad_fn output, or its leaf accumulator (created on demand); an
/// invalid edge when t does not require grad.
Edge gradEdge(const Tensor &t);

/// Makes `node` output `outputNr` the history of t (t requires grad from now on).
void setHistory(const Tensor &t, const std::shared_ptr<Node> &node, uint32_t outputNr);

/// A new tensor sharing t's storage and geometry with no autograd history (torch.detach).
Tensor detach(const Tensor &t);

/// Whether an op over these tensors records: grad mode on and any defined one requires grad.
bool anyRequiresGrad(std::initializer_list<const Tensor *> ts);
bool anyRequiresGrad(std::span<const Tensor> ts);

/// Refuses an in-place write into t that autograd could not follow, in torch's words: a leaf
/// that requires grad (while grad mode is on), or a view of one.
void checkInplace(const Tensor &t, const char *op);

/// Marks `view`, recorded from `self`, as a view of self's root base (self's own base when self is
/// a view, else self), remembering the root's current history; `multiOutput` for split/chunk's
/// pieces (and views of them, which inherit it).
void markView(const Tensor &view, const Tensor &self, bool multiOutput = false);
/// Whether a recorded view's base has had its history rewritten since the view was cut from it.
inline bool viewHistoryStale(const AutogradMeta &m) {
  return m.viewBase.defined() && m.baseHistory != gradFn(m.viewBase);
}

/// Writes `result` (with its history) into `view`, a view of base's memory, and rewrites the
/// history of base's root as torch's CopySlices does.
void writeThroughView(const char *op, const Tensor &base, Tensor &view, const Tensor &result);
/// Re-cuts a view's history from its base's current one (after a write through another view).
void refreshViewHistory(const Tensor &view);

} // namespace kiln::autograd

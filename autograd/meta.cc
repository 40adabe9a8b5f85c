#include "autograd/meta.h"

#include "autograd/grad_mode.h"
#include "autograd/record.h"
#include "runtime/device_ops.h"
#include "runtime/error.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/index.h"
#include "runtime/ops/pool.h"

namespace kiln::autograd {

AutogradMeta &meta(const Tensor &t) {
  auto &slot = t.impl().autograd;
  if (!slot)
    slot = std::make_shared<AutogradMeta>();
  return *slot;
}

Edge gradEdge(const Tensor &t) {
  if (!t.defined() || !t.requiresGrad())
    return {};
  AutogradMeta &m = meta(t);
  if (viewHistoryStale(m))
    refreshViewHistory(t);
  if (m.gradFn)
    return {m.gradFn, m.outputNr};
  std::shared_ptr<Node> acc = m.accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    m.accumulator = acc;
  }
  return {acc, 0};
}

void markView(const Tensor &view, const Tensor &self, bool multiOutput) {
  AutogradMeta *base = metaOrNull(self);
  AutogradMeta &m = meta(view);
  m.viewBase = base && base->viewBase.defined() ? base->viewBase : self;
  m.baseHistory = gradFn(m.viewBase);
  m.multiOutputView = multiOutput || (base && base->multiOutputView);
}

void setHistory(const Tensor &t, const std::shared_ptr<Node> &node, uint32_t outputNr) {
  AutogradMeta &m = meta(t);
  m.gradFn = node;
  m.outputNr = outputNr;
  t.impl().requiresGrad = true;
}

Tensor detach(const Tensor &t) {
  // alias() builds a new TensorImpl without history over the same storage and version counter.
  return t.alias();
}

bool anyRequiresGrad(std::initializer_list<const Tensor *> ts) {
  if (!isGradEnabled())
    return false;
  for (const Tensor *t : ts)
    if (t && t->defined() && t->requiresGrad())
      return true;
  return false;
}

bool anyRequiresGrad(std::span<const Tensor> ts) {
  if (!isGradEnabled())
    return false;
  for (const Tensor &t : ts)
    if (t.defined() && t.requiresGrad())
      return true;
  return false;
}

void checkInplace(const Tensor &t, const char *op) {
  if (!isGradEnabled())
    return;
  if (t.requiresGrad() && isLeaf(t))
    fail(ErrorKind::Runtime,
         "a leaf Variable that requires grad is being used in an in-place operation ({}).", op);
  AutogradMeta *m = metaOrNull(t);
  if (m && m->multiOutputView && m->viewBase.defined() && m->viewBase.requiresGrad()) {
    std::string fn = m->gradFn ? m->gradFn->name() : "a split";
    if (auto at = fn.find("Backward"); at != std::string::npos)
      fn = fn.substr(0, at);
    fail(ErrorKind::Runtime,
         "Output {} of {} is a view and is being modified inplace. This view is the output of a "
         "function that returns multiple views. Such functions do not allow the output views to "
         "be modified inplace. You should replace the inplace operation by an out-of-place one.",
         m->outputNr, fn);
  }
  if (m && m->viewBase.defined() && m->viewBase.requiresGrad() && isLeaf(m->viewBase))
    fail(ErrorKind::Runtime,
         "a view of a leaf Variable that requires grad is being used in an in-place operation "
         "({}).",
         op);
}

bool recordUnsupportedOnDevice(const char *op, std::initializer_list<const Tensor *> inputs,
                               Tensor &output) {
  if (!onDevice(inputs))
    return false;
  std::string name = op;
  record("NotImplementedOnDevice", std::span<const Tensor *const>(inputs.begin(), inputs.size()),
         std::span<Tensor>(&output, 1), [&](const NodePtr &) {
           return [name](EagerBuilder &, const Node &, Grads &) -> Grads {
             fail(ErrorKind::NotImplemented,
                  "the derivative of {} on CUDA tensors is not implemented yet: train on the "
                  "CPU for now",
                  name);
           };
         });
  return true;
}

void recordIndexedPool(const char *name, const Tensor &input, Tensor &output, const Tensor &indices,
                       int64_t spatialDims) {
  record(name, {&input}, output, [&](const NodePtr &) {
    return [idx = indices, xs = input.sizes(), nd = spatialDims](EagerBuilder &b, const Node &,
                                                                 Grads &g) {
      if (!isGradEnabled() && g[0].isCpu()) // one pass, no index tensors reshaped
        return Grads{kiln::ops::maxPoolBackward(g[0], idx, xs, nd)};
      Shape flat(xs.begin(), xs.end() - nd), gflat = flat;
      int64_t plane = 1;
      for (size_t d = xs.size() - nd; d < xs.size(); ++d)
        plane *= xs[d];
      flat.push_back(plane);
      gflat.push_back(-1);
      // A recorded scatter: its own derivative (the gather) makes max pooling twice
      // differentiable.
      Tensor gx = b.scatterAdd(flat, -1, idx.reshape(gflat), b.reshape(g[0], gflat));
      return Grads{b.reshape(gx, xs)};
    };
  });
}

} // namespace kiln::autograd

// In-place writes through views: the base's history is rewritten (torch's CopySlices).
//
// [Note: writes through views]
// When an op writes `result` into a view v of a base b, b's new value is its old value with v's
// region replaced. b's new history is a CopySlices node with two inputs: b's old history, which
// gets the gradient with the region zeroed, and result's, which gets the region. v becomes the
// region of b's new value. A view of b made before the write still names b's old history: a
// recorded view remembers which history of its base it was cut from, and when the base's has
// since been rewritten the view takes the region of the current one on its next use (gradEdge).
//
// The gradient's region is cut by as_strided, so the base must be laid out densely (any
// permutation of a contiguous tensor); a write into a view of a sliced or expanded base that
// needs a gradient is refused.
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/error.h"

#include <algorithm>
#include <numeric>

namespace kiln::autograd {
namespace {
using B = EagerBuilder;

/// Where a view lies inside its base's memory, and the layout of the base.
struct Region {
  Shape baseSizes, baseStrides;
  Shape sizes, strides;
  int64_t offset = 0; // from the base's first element
};

/// The dims of a dense layout, outermost first; empty when `strides` is not dense.
std::optional<Shape> denseOrder(const Shape &sizes, const Shape &strides) {
  Shape perm(sizes.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  int64_t expected = 1;
  for (auto it = perm.rbegin(); it != perm.rend(); ++it) {
    if (sizes[*it] != 1 && strides[*it] != expected)
      return std::nullopt;
    expected *= sizes[*it];
  }
  return perm;
}

Region regionOf(const char *op, const Tensor &base, const Tensor &view) {
  Region r{base.sizes(), base.strides(), view.sizes(), view.strides(),
           view.storageOffset() - base.storageOffset()};
  KILN_CHECK_KIND(NotImplemented, denseOrder(r.baseSizes, r.baseStrides).has_value(),
                  "{}: an in-place write into a view needs a gradient, and its base (sizes {}, "
                  "strides {}) is not dense; write into a contiguous copy (base.clone()) instead",
                  op, shapeToString(r.baseSizes), shapeToString(r.baseStrides));
  return r;
}

/// A tensor of the base's sizes and layout on g's device, holding g.
Tensor denseCopy(const Region &r, const Tensor &g) {
  Shape perm = *denseOrder(r.baseSizes, r.baseStrides);
  Shape permSizes(perm.size()), inverse(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) {
    permSizes[k] = r.baseSizes[perm[k]];
    inverse[perm[k]] = static_cast<int64_t>(k);
  }
  Tensor buf = Tensor::empty(permSizes, g.dtype(), g.device()).permute(inverse);
  buf.copy_(g);
  return buf;
}

Tensor regionIn(const Region &r, const Tensor &buf) {
  return buf.asStrided(r.sizes, r.strides, buf.storageOffset() + r.offset);
}

void refuseDoubleBackward(const Grads &g) {
  KILN_CHECK_KIND(NotImplemented, !(isGradEnabled() && g[0].defined() && g[0].requiresGrad()),
                  "double backward through an in-place write into a view (CopySlices) is not "
                  "supported yet; build the value out of place (torch.cat, torch.where, "
                  "index_put) for create_graph=True");
}

/// Records `out` (a tensor over the view's memory) as the region of base's current history.
void recordRegion(const Tensor &base, Tensor &out, const Region &r) {
  GradModeGuard on(true); // a stale view may be refreshed while the engine runs without grad
  record("AsStridedBackward0", {&base}, out, [&](const NodePtr &) {
    return [r](B &, const Node &, Grads &g) {
      refuseDoubleBackward(g);
      Tensor zeros = Tensor::empty(r.baseSizes, g[0].dtype(), g[0].device());
      zeros.fill_(Scalar(0.0));
      Tensor buf = denseCopy(r, zeros);
      regionIn(r, buf).copy_(g[0]);
      return Grads{buf};
    };
  });
}

Tensor rootOf(const Tensor &t) {
  AutogradMeta *m = metaOrNull(t);
  return m && m->viewBase.defined() ? m->viewBase : t;
}
} // namespace

void writeThroughView(const char *op, const Tensor &base, Tensor &view, const Tensor &result) {
  Tensor root = rootOf(base);
  const bool tracked = isGradEnabled() && (result.requiresGrad() || root.requiresGrad());
  if (!tracked) {
    kiln::ops::inplace(op, view, result);
    return;
  }
  if (root.requiresGrad() && isLeaf(root))
    fail(ErrorKind::Runtime,
         "a view of a leaf Variable that requires grad is being used in an in-place operation "
         "({}).",
         op);
  checkInplace(base, op); // the outputs of a multiple-view op (split) refuse, as in torch
  Region r = regionOf(op, root, view);
  kiln::ops::inplace(op, view, result);
  // The new value of the base: its old history outside the region, result's inside.
  Tensor old = root;
  Tensor fresh = detach(root);
  Shape resultSizes = result.sizes();
  DType resultType = result.dtype();
  record("CopySlices", {&old, &result}, fresh, [&](const NodePtr &) {
    return [r, resultSizes, resultType](B &b, const Node &, Grads &g) {
      refuseDoubleBackward(g);
      Tensor buf = denseCopy(r, g[0]);
      Tensor region = regionIn(r, buf);
      Tensor forResult = b.reduceTo(region.clone(), resultSizes, resultType);
      region.fill_(Scalar(0.0));
      return Grads{buf, forResult};
    };
  });
  setHistory(root, meta(fresh).gradFn, 0);
  if (!view.isSameAs(root)) {
    recordRegion(root, view, r);
    markView(view, root);
  }
}

void refreshViewHistory(const Tensor &view) {
  AutogradMeta &m = meta(view);
  Tensor root = m.viewBase;
  Tensor out = view; // the same handle: its history is replaced
  recordRegion(root, out, regionOf("view", root, view));
  m.baseHistory = gradFn(root);
}

} // namespace kiln::autograd

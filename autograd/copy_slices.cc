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
// needs a gradient is refused. Under create_graph the same rules run as recorded ops over the
// region's element positions (index_select, where, index_put), so they differentiate again.
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

/// Whether the backward is itself recorded (create_graph=True): the rules then use ops.
bool recorded(const Grads &g) { return isGradEnabled() && g[0].defined() && g[0].requiresGrad(); }

/// The region's elements as row-major positions in the base (int64, the view's order), for
/// the recorded rules. A dense base maps each memory offset to one position.
Tensor regionPositions(const Region &r) {
  Shape perm = *denseOrder(r.baseSizes, r.baseStrides);
  const int64_t rank = static_cast<int64_t>(r.baseSizes.size());
  Shape rowMajor(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    rowMajor[d] = rowMajor[d + 1] * r.baseSizes[d + 1];
  Tensor out = Tensor::empty({numelOf(r.sizes)}, DType::Int64);
  int64_t *pos = out.data<int64_t>();
  Shape idx(r.sizes.size(), 0);
  for (int64_t n = 0, total = numelOf(r.sizes); n < total; ++n) {
    int64_t offset = r.offset;
    for (size_t k = 0; k < idx.size(); ++k)
      offset += idx[k] * r.strides[k];
    int64_t flat = 0;
    for (int64_t d : perm) // outermost dim first: the offset's digits in the base's strides
      if (r.baseSizes[d] > 1) {
        flat += (offset / r.baseStrides[d]) * rowMajor[d];
        offset %= r.baseStrides[d];
      }
    pos[n] = flat;
    for (int64_t k = static_cast<int64_t>(idx.size()) - 1; k >= 0 && ++idx[k] == r.sizes[k]; --k)
      idx[k] = 0;
  }
  return out;
}

/// g's region, recorded: the elements at the region's positions, shaped as the view.
Tensor recordedRegion(const Region &r, const Tensor &g) {
  Tensor flat = reshape(g, {-1});
  return reshape(ops::indexSelect(flat, 0, regionPositions(r).to(g.device())), r.sizes);
}

/// g with the region zeroed, recorded.
Tensor recordedOutside(const Region &r, const Tensor &g) {
  Tensor inside = Tensor::empty({numelOf(r.baseSizes)}, DType::Bool);
  inside.fill_(Scalar(false));
  Tensor positions = regionPositions(r);
  const int64_t *pos = positions.data<int64_t>();
  bool *mask = inside.data<bool>();
  for (int64_t n = 0, total = numelOf(r.sizes); n < total; ++n)
    mask[pos[n]] = true;
  Tensor zero = Tensor::wrapScalar(Scalar(0.0));
  return ops::where(inside.reshape(r.baseSizes).to(g.device()), zero, g);
}

/// Zeros of the base's sizes holding g in the region, recorded.
Tensor recordedPlaced(const Region &r, const Tensor &g) {
  Tensor zeros = Tensor::empty({numelOf(r.baseSizes)}, g.dtype(), g.device());
  zeros.fill_(Scalar(0.0));
  Tensor index = regionPositions(r).to(g.device());
  Tensor placed = ops::indexPut(zeros, std::span<const Tensor>(&index, 1), reshape(g, {-1}),
                                /*accumulate=*/true);
  return reshape(placed, r.baseSizes);
}

/// Records `out` (a tensor over the view's memory) as the region of base's current history.
void recordRegion(const Tensor &base, Tensor &out, const Region &r) {
  GradModeGuard on(true); // a stale view may be refreshed while the engine runs without grad
  record("AsStridedBackward0", {&base}, out, [&](const NodePtr &) {
    return [r](B &, const Node &, Grads &g) {
      if (recorded(g))
        return Grads{recordedPlaced(r, g[0])};
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
      if (recorded(g))
        return Grads{recordedOutside(r, g[0]),
                     b.reduceTo(recordedRegion(r, g[0]), resultSizes, resultType)};
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

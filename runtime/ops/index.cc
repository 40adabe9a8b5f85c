// Advanced indexing: self[tensor indices] and its in-place assignment (torch's aten::index and
// index_put_). Both are planned the same way: masks become coordinates, integer indices
// broadcast together and are folded into one tensor of element offsets, and the work is one
// restrided gather or scatter (see [Note: restrided operands]).
#include "runtime/ops/index.h"
#include "runtime/copy.h"
#include "runtime/device_ops.h"
#include "runtime/error.h"
#include "runtime/loops.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/index_impl.h"

#include <algorithm>

namespace kiln::ops {

using namespace detail;

namespace {

bool isMask(const Tensor &t) { return t.dtype() == DType::Bool || t.dtype() == DType::UInt8; }

/// The source of an advanced index, with one index (or none) per dim of `src`.
struct Indexed {
  Tensor src;
  std::vector<Tensor> perDim;
};

/// Replaces each mask by the coordinates of its true elements (one index per masked dim). A 0-d
/// mask adds a dim of size 1 that is kept (true) or emptied (false), as in NumPy.
Indexed expandMasks(const Tensor &self, std::span<const Tensor> indices) {
  Indexed out{self, {}};
  for (const Tensor &t : indices) {
    int64_t d = static_cast<int64_t>(out.perDim.size());
    if (!t.defined()) {
      out.perDim.emplace_back();
      continue;
    }
    if (!isMask(t)) {
      KILN_CHECK_KIND(Index, isIntegral(t.dtype(), false),
                      "tensors used as indices must be long, int, byte or bool tensors (got {})",
                      dtypeName(t.dtype()));
      out.perDim.push_back(t);
      continue;
    }
    if (t.dim() == 0) {
      out.src = out.src.unsqueeze(d);
      Tensor keep = Tensor::empty({t.item().toBool() ? 1 : 0}, DType::Int64);
      keep.fill_(Scalar(int64_t{0}));
      out.perDim.push_back(keep);
      continue;
    }
    KILN_CHECK_KIND(Index, d + t.dim() <= out.src.dim(),
                    "too many indices for tensor of dimension {} (a mask of shape {} at dim {})",
                    out.src.dim(), t.shapeStr(), d);
    for (int64_t j = 0; j < t.dim(); ++j)
      KILN_CHECK_KIND(Index, t.size(j) == out.src.size(d + j),
                      "The shape of the mask {} at index {} does not match the shape of the "
                      "indexed tensor {} at index {}",
                      t.shapeStr(), j, out.src.shapeStr(), d + j);
    for (Tensor &c : nonzeroTuple(t))
      out.perDim.push_back(std::move(c));
  }
  KILN_CHECK_KIND(Index, static_cast<int64_t>(out.perDim.size()) <= out.src.dim(),
                  "too many indices for tensor of dimension {} (got {})", out.src.dim(),
                  out.perDim.size());
  out.perDim.resize(out.src.dim());
  return out;
}

/// Everything a gather or scatter of self[indices] needs.
struct IndexPlan {
  Tensor src;        // self, possibly with the indexed dims permuted to the front
  Shape resultShape; // dims before + the broadcast index shape + dims after
  Tensor restrided;  // src viewed at resultShape with stride 0 over the index dims
  Tensor offsets;    // int64 element offsets, expanded to resultShape
  int64_t mult = 1;  // offsets are multiplied by this many elements
};

Shape broadcastIndexShapes(const std::vector<Tensor> &perDim) {
  Shape shape;
  bool first = true;
  for (const Tensor &t : perDim) {
    if (!t.defined())
      continue;
    if (first) {
      shape = t.sizes();
      first = false;
      continue;
    }
    try {
      shape = broadcastShapes(shape, t.sizes(), "index");
    } catch (const Error &) {
      std::string all;
      for (const Tensor &u : perDim)
        if (u.defined())
          all += (all.empty() ? "" : ", ") + u.shapeStr();
      fail(ErrorKind::Index,
           "shape mismatch: indexing tensors could not be broadcast together with shapes {}", all);
    }
  }
  return shape;
}

/// Moves the indexed dims to the front when they are not adjacent (NumPy's rule).
void frontIndexedDims(Indexed &ix) {
  std::vector<int64_t> used;
  for (int64_t d = 0; d < ix.src.dim(); ++d)
    if (ix.perDim[d].defined())
      used.push_back(d);
  if (used.empty() || used.back() - used.front() + 1 == static_cast<int64_t>(used.size()))
    return;
  Shape order(used.begin(), used.end());
  for (int64_t d = 0; d < ix.src.dim(); ++d)
    if (!ix.perDim[d].defined())
      order.push_back(d);
  std::vector<Tensor> perDim;
  for (int64_t d : order)
    perDim.push_back(ix.perDim[d]);
  ix.src = ix.src.permute(order);
  ix.perDim = std::move(perDim);
}

/// Sum over the indexed dims of index * stride, checked against each dim's size.
Tensor combinedOffsets(const Indexed &ix, IntList shape, int64_t &mult) {
  std::vector<int64_t> used;
  for (int64_t d = 0; d < ix.src.dim(); ++d)
    if (ix.perDim[d].defined())
      used.push_back(d);
  auto normalized = [&](int64_t d) {
    return normalizeIndex(ix.perDim[d], ix.src.size(d), d, true, "index");
  };
  if (used.size() == 1) {
    mult = ix.src.stride(used[0]);
    return normalized(used[0]);
  }
  mult = 1;
  Tensor acc = Tensor::empty(shape, DType::Int64);
  // Indices that broadcast to nothing select nothing, so (as in torch) none is range-checked.
  if (acc.numel() == 0)
    return acc;
  acc.fill_(Scalar(int64_t{0}));
  for (int64_t d : used) {
    Tensor ins[2] = {acc, normalized(d).expand(shape)};
    const int64_t stride = ix.src.stride(d);
    cpuKernel<int64_t, int64_t, int64_t>(acc, ins,
                                         [stride](int64_t a, int64_t i) { return a + i * stride; });
  }
  return acc;
}

IndexPlan planIndex(const Tensor &self, std::span<const Tensor> indices) {
  Indexed ix = expandMasks(self, indices);
  Shape shape = broadcastIndexShapes(ix.perDim);
  frontIndexedDims(ix);
  int64_t first = 0, count = 0;
  for (int64_t d = 0; d < ix.src.dim(); ++d) {
    if (!ix.perDim[d].defined())
      continue;
    if (count++ == 0)
      first = d;
  }
  IndexPlan plan;
  plan.src = ix.src;
  if (count == 0) {
    plan.resultShape = ix.src.sizes();
    plan.restrided = ix.src;
    return plan;
  }
  const Shape &sz = ix.src.sizes(), &st = ix.src.strides();
  Shape strides(st.begin(), st.begin() + first), offsetView(first, 1);
  plan.resultShape.assign(sz.begin(), sz.begin() + first);
  plan.resultShape.insert(plan.resultShape.end(), shape.begin(), shape.end());
  plan.resultShape.insert(plan.resultShape.end(), sz.begin() + first + count, sz.end());
  strides.resize(first + shape.size(), 0);
  strides.insert(strides.end(), st.begin() + first + count, st.end());
  offsetView.insert(offsetView.end(), shape.begin(), shape.end());
  offsetView.resize(plan.resultShape.size(), 1);
  Tensor offsets = combinedOffsets(ix, shape, plan.mult);
  if (numelOf(plan.resultShape) == 0)
    return plan;
  plan.restrided = ix.src.asStrided(plan.resultShape, strides);
  plan.offsets = offsets.expand(shape).view(offsetView).expand(plan.resultShape);
  return plan;
}

} // namespace

namespace {

/// On a device: the dim of the one int index tensor (the entries before it undefined, i.e.
/// whole dims), which the graph ops index / index_put take; nullopt for any other form.
std::optional<int64_t> oneIndexDim(std::span<const Tensor> indices) {
  if (indices.empty() || !indices.back().defined())
    return std::nullopt;
  for (size_t k = 0; k + 1 < indices.size(); ++k)
    if (indices[k].defined())
      return std::nullopt;
  DType t = indices.back().dtype();
  if (t != DType::Int64 && t != DType::Int32)
    return std::nullopt;
  return static_cast<int64_t>(indices.size()) - 1;
}

} // namespace

Tensor index(const Tensor &self, std::span<const Tensor> indices) {
  if (onDevice({&self})) {
    if (std::optional<int64_t> dim = oneIndexDim(indices))
      return deviceOp("index", {self, indices.back()}, fmt::format("dim = {}", *dim));
  }
  IndexPlan plan = planIndex(self, indices);
  if (!plan.offsets.defined())
    return numelOf(plan.resultShape) == 0 ? Tensor::empty(plan.resultShape, self.dtype())
                                          : plan.src.alias();
  Tensor out = Tensor::empty(plan.resultShape, self.dtype(), self.device());
  gatherKernel(out, plan.restrided, plan.offsets, plan.mult);
  return out;
}

Tensor &indexPut_(Tensor &self, std::span<const Tensor> indices, const Tensor &values,
                  bool accumulate) {
  KILN_CHECK(values.dtype() == self.dtype(),
             "index_put_: Index put requires the source and destination dtypes match, got {} for "
             "the destination and {} for the source",
             dtypeName(self.dtype()), dtypeName(values.dtype()));
  if (onDevice({&self})) {
    if (std::optional<int64_t> dim = oneIndexDim(indices)) {
      Tensor updated = deviceOp("index_put", {self, indices.back(), values},
                                fmt::format("dim = {}, accumulate = {}", *dim, accumulate));
      self.copy_(updated);
      return self;
    }
  }
  if (accumulate && isReducedFloat(self.dtype())) {
    Tensor wide = self.to(DType::Float32, true);
    indexPut_(wide, indices, values.to(DType::Float32), true);
    copyInto(self, wide);
    self.bumpVersion();
    return self;
  }
  IndexPlan plan = planIndex(self, indices);
  bool fits = values.dim() <= static_cast<int64_t>(plan.resultShape.size());
  for (int64_t i = 1; fits && i <= values.dim(); ++i) {
    int64_t v = values.size(-i), r = plan.resultShape[plan.resultShape.size() - i];
    fits = v == r || v == 1;
  }
  KILN_CHECK(fits,
             "index_put_: shape mismatch: value tensor of shape {} cannot be broadcast to indexing "
             "result of shape {}",
             values.shapeStr(), shapeToString(plan.resultShape));
  if (numelOf(plan.resultShape) > 0) {
    // Values that alias self would be overwritten while being read.
    Tensor v = values.storage() == self.storage() ? values.clone() : values;
    v = v.expand(plan.resultShape);
    if (!plan.offsets.defined())
      copyInto(plan.restrided, accumulate ? add(plan.restrided, v).to(self.dtype()) : v);
    else
      scatterKernel(plan.restrided, v, plan.offsets, plan.mult,
                    accumulate ? ScatterMode::Add : ScatterMode::Assign);
  }
  self.bumpVersion();
  return self;
}

Tensor indexPut(const Tensor &self, std::span<const Tensor> indices, const Tensor &values,
                bool accumulate) {
  Tensor out = self.clone();
  return indexPut_(out, indices, values, accumulate);
}

} // namespace kiln::ops

// Reduction plans: which dims are reduced, the result shape, and how the engine walks the input
// (see [Note: reduction plan] in reduce_impl.h).
#include "runtime/ops/reduce_impl.h"

#include <numeric>

namespace kiln::ops::detail {

std::vector<bool> reduceMask(const char *op, int64_t ndim, const std::optional<Shape> &dims) {
  std::vector<bool> mask(ndim, !dims || dims->empty());
  if (!dims)
    return mask;
  std::vector<bool> seen(std::max<int64_t>(ndim, 1), false);
  for (int64_t d : *dims) {
    int64_t w = wrapDim(d, ndim, op);
    KILN_CHECK(!seen[w], "{}: dim {} appears multiple times in the list of dims", op, w);
    seen[w] = true;
    if (w < ndim)
      mask[w] = true;
  }
  return mask;
}

std::vector<bool> reduceMask(const char *op, int64_t ndim, int64_t dim) {
  return reduceMask(op, ndim, Shape{dim});
}

Shape reducedShape(IntList sizes, const std::vector<bool> &mask, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!mask[d])
      out.push_back(sizes[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

void checkNonEmptyReduction(const char *op, const Tensor &in, const std::vector<bool> &mask,
                            bool dimGiven) {
  if (in.numel() != 0)
    return;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (!mask[d] || in.size(d) != 0)
      continue;
    KILN_CHECK(dimGiven,
               "{}(): Expected reduction dim to be specified for input.numel() == 0. Specify the "
               "reduction dim with the 'dim' argument.",
               op);
    fail(ErrorKind::Index, "{}(): Expected reduction dim {} to have non-zero size.", op, d);
  }
}

namespace {
struct PlanDim {
  int64_t size, inStride, outStride;
  bool reduced;
};

/// Folds every dim of `dims` that directly encloses the run (size, stride) into it; used for
/// dims of one kind (all reduced, or all kept with matching output strides).
void absorbInto(std::vector<PlanDim> &dims, int64_t &size, int64_t stride, int64_t outStride,
                bool reduced) {
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t k = 0; k < dims.size(); ++k) {
      const PlanDim &d = dims[k];
      if (d.reduced != reduced || d.inStride != stride * size ||
          (!reduced && d.outStride != outStride * size))
        continue;
      size *= d.size;
      dims.erase(dims.begin() + k);
      grew = true;
      break;
    }
  }
}

ReduceDims collect(const std::vector<PlanDim> &dims, bool reduced) {
  std::vector<PlanDim> sel;
  for (const PlanDim &d : dims)
    if (d.reduced == reduced)
      sel.push_back(d);
  // Outermost (largest stride) first: the odometer then walks memory forward.
  std::stable_sort(sel.begin(), sel.end(),
                   [](const PlanDim &a, const PlanDim &b) { return a.inStride > b.inStride; });
  ReduceDims out;
  for (const PlanDim &d : sel) {
    out.sizes.push_back(d.size);
    out.inStrides.push_back(d.inStride);
    out.outStrides.push_back(reduced ? 0 : d.outStride);
  }
  return out;
}
} // namespace

ReducePlan makeReducePlan(const Tensor &in, const std::vector<bool> &mask) {
  ReducePlan plan;
  plan.outSizes = reducedShape(in.sizes(), mask, false);
  plan.numOutputs = numelOf(plan.outSizes);
  Shape outStrides = contiguousStrides(plan.outSizes);
  std::vector<PlanDim> dims;
  for (int64_t d = 0, o = 0; d < in.dim(); ++d) {
    int64_t os = mask[d] ? 0 : outStrides[o++];
    if (mask[d])
      plan.reduceSize *= in.size(d);
    if (in.size(d) != 1)
      dims.push_back({in.size(d), in.stride(d), os, static_cast<bool>(mask[d])});
  }
  if (dims.empty() || plan.numOutputs == 0 || plan.reduceSize == 0)
    return plan; // one element per output (or nothing to fold): row mode, inner run of 1
  // The innermost dim: smallest stride, the last such dim on ties.
  size_t inner = 0;
  for (size_t k = 1; k < dims.size(); ++k)
    if (dims[k].inStride <= dims[inner].inStride)
      inner = k;
  PlanDim run = dims[inner];
  dims.erase(dims.begin() + inner);
  plan.rowMode = run.reduced;
  plan.inner = run.size;
  plan.innerStride = run.inStride;
  plan.innerOutStride = run.outStride;
  absorbInto(dims, plan.inner, run.inStride, run.outStride, run.reduced);
  plan.kept = collect(dims, false);
  plan.reduced = collect(dims, true);
  return plan;
}

} // namespace kiln::ops::detail

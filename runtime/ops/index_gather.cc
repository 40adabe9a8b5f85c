// Gather-like ops: gather, index_select and take. Each validates its index, then runs the
// shared gatherKernel over a restrided view of self (see [Note: restrided operands]).
#include "runtime/device_ops.h"
#include "runtime/error.h"
#include "runtime/ops/index.h"
#include "runtime/ops/index_impl.h"

#include <algorithm>

namespace kiln::ops {

using namespace detail;

namespace {

/// A 0-d tensor as 1-D, so the dim-wise ops treat it like torch does (as a vector of one).
Tensor atLeast1d(const Tensor &t) { return t.dim() == 0 ? t.view({1}) : t; }

/// self's strides with the given dim's stride replaced by 0.
Shape zeroStrideAt(const Tensor &self, int64_t dim) {
  Shape st = self.strides();
  st[dim] = 0;
  return st;
}

} // namespace

Tensor gather(const Tensor &self, int64_t dim, const Tensor &index) {
  if (onDevice({&self, &index}))
    return deviceOp("gather", {self, index}, fmt::format("dim = {}", dim));
  checkIndexDType(index, "gather()", true);
  Tensor s = atLeast1d(self), ix = atLeast1d(index);
  KILN_CHECK(ix.dim() == s.dim(),
             "gather(): Index tensor must have the same number of dimensions as input tensor "
             "(index shape {}, input shape {})",
             index.shapeStr(), self.shapeStr());
  dim = wrapDim(dim, self.dim(), "gather()");
  for (int64_t d = 0; d < s.dim(); ++d)
    KILN_CHECK(d == dim || ix.size(d) <= s.size(d),
               "gather(): Size does not match at dimension {}: expected index {} to be no larger "
               "than self {} apart from dimension {}",
               d, index.shapeStr(), self.shapeStr(), dim);
  Tensor idx = normalizeIndex(ix, s.size(dim), dim, false, "gather()", ErrorKind::Runtime);
  Tensor out = Tensor::empty(index.sizes(), self.dtype(), self.device());
  if (out.numel() == 0)
    return out;
  Tensor src = s.asStrided(ix.sizes(), zeroStrideAt(s, dim));
  gatherKernel(out.view(ix.sizes()), src, idx, s.stride(dim));
  return out;
}

Tensor indexSelect(const Tensor &self, int64_t dim, const Tensor &index) {
  if (onDevice({&self, &index}))
    return deviceOp("index_select", {self, index}, fmt::format("dim = {}", dim));
  checkIndexDType(index, "index_select()", true);
  KILN_CHECK_KIND(Index, index.dim() <= 1,
                  "index_select(): Index is supposed to be a vector, got a tensor of shape {}",
                  index.shapeStr());
  dim = wrapDim(dim, self.dim(), "index_select()");
  Tensor s = atLeast1d(self);
  const int64_t n = index.numel();
  Tensor idx = normalizeIndex(index.reshape({n}), s.size(dim), dim, false, "index_select()");
  Shape outSizes = s.sizes();
  outSizes[dim] = n;
  Tensor out = Tensor::empty(outSizes, self.dtype(), self.device());
  if (out.numel() > 0) {
    Shape idxView(s.dim(), 1);
    idxView[dim] = n;
    Tensor src = s.asStrided(outSizes, zeroStrideAt(s, dim));
    gatherKernel(out, src, idx.view(idxView).expand(outSizes), s.stride(dim));
  }
  // torch keeps a 0-d input 0-d (its index then has one element).
  return self.dim() == 0 ? out.view({}) : out;
}

Tensor take(const Tensor &self, const Tensor &index) {
  checkIndexDType(index, "take()", false);
  Tensor flat = self.contiguous();
  Tensor idx = normalizeIndex(index, flat.numel(), 0, true, "take()");
  Tensor out = Tensor::empty(index.sizes(), self.dtype(), self.device());
  if (out.numel() == 0)
    return out;
  Tensor src = flat.asStrided(index.sizes(), Shape(index.dim(), 0));
  gatherKernel(out, src, idx, 1);
  return out;
}

} // namespace kiln::ops

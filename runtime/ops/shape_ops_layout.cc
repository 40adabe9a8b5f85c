// Shape ops that copy into a new layout: repeat/tile/repeat_interleave, flip/roll, tril/triu and
// the diagonal family. Most are one strided copyInto from a cleverly strided view of the input,
// so they inherit its dtype coverage, vectorized contiguous runs and threading.
#include "runtime/copy.h"
#include "runtime/error.h"
#include "runtime/ops/index.h"
#include "runtime/ops/shape_ops.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <climits>
#include <cstring>

namespace kiln::ops {

namespace {

void checkRepeats(IntList repeats, IntList outSizes, const char *op) {
  for (int64_t r : repeats)
    KILN_CHECK(r >= 0, "{}: Trying to create tensor with negative dimension {}: {}", op, r,
               shapeToString(outSizes));
}

Tensor zeros(IntList sizes, DType dtype) {
  Tensor t = Tensor::empty(sizes, dtype);
  t.fill_(Scalar(int64_t{0}));
  return t;
}

/// out (contiguous) = self rolled by `shift` along dim: two slice copies.
Tensor rollOne(const Tensor &self, int64_t shift, int64_t dim) {
  const int64_t n = self.size(dim);
  Tensor out = Tensor::empty(self.sizes(), self.dtype(), self.device());
  const int64_t s = n == 0 ? 0 : ((shift % n) + n) % n;
  copyInto(out.narrow(dim, s, n - s), self.narrow(dim, 0, n - s));
  copyInto(out.narrow(dim, 0, s), self.narrow(dim, n - s, s));
  return out;
}

/// Zeroes, in every matrix of contiguous `out`, columns [lo(i), hi(i)) of each row i.
template <typename Range> void zeroRowRanges(Tensor &out, Range range) {
  if (out.numel() == 0)
    return;
  const int64_t rows = out.size(-2), cols = out.size(-1), isz = out.itemsize();
  const int64_t allRows = out.numel() / cols;
  char *base = out.rawData();
  int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(cols, 1));
  parallelFor(0, allRows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      auto [lo, hi] = range(r % rows);
      lo = std::clamp<int64_t>(lo, 0, cols);
      hi = std::clamp<int64_t>(hi, 0, cols);
      if (hi > lo)
        std::memset(base + (r * cols + lo) * isz, 0, (hi - lo) * isz);
    }
  });
}

void checkTriangle(const Tensor &self, const char *op) {
  KILN_CHECK(self.dim() >= 2, "{}: input tensor must have at least 2 dimensions (got shape {})", op,
             self.shapeStr());
}

} // namespace

Tensor repeat(const Tensor &self, IntList repeats) {
  KILN_CHECK(static_cast<int64_t>(repeats.size()) >= self.dim(),
             "repeat: Number of dimensions of repeat dims ({}) can not be smaller than number of "
             "dimensions of tensor ({})",
             repeats.size(), self.dim());
  const int64_t nd = static_cast<int64_t>(repeats.size()), lead = nd - self.dim();
  Shape padded(lead, 1), outSizes(nd);
  padded.insert(padded.end(), self.sizes().begin(), self.sizes().end());
  for (int64_t i = 0; i < nd; ++i)
    outSizes[i] = padded[i] * repeats[i];
  checkRepeats(repeats, outSizes, "repeat");
  Tensor out = Tensor::empty(outSizes, self.dtype(), self.device());
  if (out.numel() == 0)
    return out;
  // View out as [r0, s0, r1, s1, ...] and read self with stride 0 over every r_i.
  Tensor src = self.reshape(padded);
  Shape pairSizes, outStrides, srcStrides;
  for (int64_t i = 0; i < nd; ++i) {
    pairSizes.insert(pairSizes.end(), {repeats[i], padded[i]});
    outStrides.insert(outStrides.end(), {padded[i] * out.stride(i), out.stride(i)});
    srcStrides.insert(srcStrides.end(), {0, src.stride(i)});
  }
  copyInto(out.asStrided(pairSizes, outStrides), src.asStrided(pairSizes, srcStrides));
  return out;
}

Tensor tile(const Tensor &self, IntList reps) {
  Shape full(std::max<int64_t>(self.dim() - static_cast<int64_t>(reps.size()), 0), 1);
  full.insert(full.end(), reps.begin(), reps.end());
  return repeat(self, full);
}

Tensor repeatInterleave(const Tensor &self, int64_t repeats, std::optional<int64_t> dim) {
  KILN_CHECK(repeats >= 0, "repeat_interleave: Repeats must be non-negative (got {})", repeats);
  Tensor x = dim ? self : self.reshape({-1});
  int64_t d = dim ? wrapDim(*dim, x.dim(), "repeat_interleave") : 0;
  if (x.dim() == 0)
    x = x.reshape({1});
  Shape expanded = x.sizes(), outSizes = x.sizes();
  expanded.insert(expanded.begin() + d + 1, repeats);
  outSizes[d] *= repeats;
  return x.unsqueeze(d + 1).expand(expanded).clone().view(outSizes);
}

Tensor repeatInterleaveIndices(const Tensor &repeats) {
  KILN_CHECK(repeats.dim() <= 1,
             "repeat_interleave: repeats must be 0-dim or 1-dim tensor (got "
             "shape {})",
             repeats.shapeStr());
  KILN_CHECK(repeats.dtype() == DType::Int64 || repeats.dtype() == DType::Int32,
             "repeat_interleave: repeats has to be Long or Int tensor (got {})",
             dtypeName(repeats.dtype()));
  Tensor r = repeats.to(DType::Int64).contiguous();
  const int64_t *rp = r.data<int64_t>();
  int64_t total = 0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    KILN_CHECK(rp[i] >= 0, "repeat_interleave: repeats can not be negative (got {} at {})", rp[i],
               i);
    total += rp[i];
  }
  Tensor out = Tensor::empty({total}, DType::Int64);
  int64_t *op = out.data<int64_t>();
  for (int64_t i = 0, k = 0; i < r.numel(); ++i)
    for (int64_t j = 0; j < rp[i]; ++j)
      op[k++] = i;
  return out.to(repeats.dtype());
}

Tensor repeatInterleave(const Tensor &self, const Tensor &repeats, std::optional<int64_t> dim) {
  Tensor x = dim ? self : self.reshape({-1});
  int64_t d = dim ? wrapDim(*dim, x.dim(), "repeat_interleave") : 0;
  if (repeats.dim() == 0 || (repeats.dim() == 1 && repeats.size(0) == 1)) {
    KILN_CHECK(isIntegral(repeats.dtype(), false),
               "repeat_interleave: repeats has to be Long or Int tensor (got {})",
               dtypeName(repeats.dtype()));
    return repeatInterleave(x, repeats.item().toInt(), d);
  }
  Tensor xs = x.dim() == 0 ? x.reshape({1}) : x;
  KILN_CHECK(repeats.dim() == 1 && repeats.size(0) == xs.size(d),
             "repeat_interleave: repeats must have the same size as input along dim, but got "
             "repeats.size(0) = {} and input.size({}) = {}",
             repeats.dim() == 1 ? repeats.size(0) : 0, d, xs.size(d));
  return indexSelect(xs, d, repeatInterleaveIndices(repeats).to(DType::Int64));
}

Tensor flip(const Tensor &self, IntList dims) {
  Shape strides = self.strides();
  int64_t offset = self.storageOffset();
  std::vector<bool> seen(std::max<int64_t>(self.dim(), 1), false);
  for (int64_t d : dims) {
    d = wrapDim(d, self.dim(), "flip");
    KILN_CHECK(!seen[d], "flip: dim {} appears multiple times in the list of dims", d);
    seen[d] = true;
    if (self.dim() == 0 || self.size(d) == 0)
      continue;
    offset += (self.size(d) - 1) * strides[d];
    strides[d] = -strides[d];
  }
  Tensor out = Tensor::empty(self.sizes(), self.dtype(), self.device());
  // A negative-stride view never escapes: it only feeds this copy, whose strided loop walks it.
  Tensor reversed =
      Tensor::fromStorage(self.storage(), self.dtype(), self.sizes(), strides, offset);
  copyInto(out, reversed);
  return out;
}

Tensor roll(const Tensor &self, IntList shifts, IntList dims) {
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1, "roll: shifts and dimensions must align. shifts: {}, dims:0",
               shifts.size());
    return rollOne(self.reshape({-1}), shifts[0], 0).view(self.sizes());
  }
  KILN_CHECK(shifts.size() == dims.size(),
             "roll: shifts and dimensions must align. shifts: {}, dims:{}", shifts.size(),
             dims.size());
  // wrapDim accepts dim 0/-1 on a 0-d tensor, but there is no dimension to narrow along.
  KILN_CHECK_KIND(Index, self.dim() > 0,
                  "roll: Dimension specified as {} but tensor has no dimensions", dims[0]);
  Tensor out = self;
  for (size_t i = 0; i < dims.size(); ++i)
    out = rollOne(out, shifts[i], wrapDim(dims[i], self.dim(), "roll"));
  return out;
}

Tensor tril(const Tensor &self, int64_t k) {
  checkTriangle(self, "tril");
  Tensor out = self.clone();
  zeroRowRanges(out, [k](int64_t i) { return std::pair<int64_t, int64_t>(i + k + 1, INT64_MAX); });
  return out;
}

Tensor triu(const Tensor &self, int64_t k) {
  checkTriangle(self, "triu");
  Tensor out = self.clone();
  zeroRowRanges(out, [k](int64_t i) { return std::pair<int64_t, int64_t>(0, i + k); });
  return out;
}

Tensor diagonal(const Tensor &self, int64_t offset, int64_t dim1, int64_t dim2) {
  KILN_CHECK_KIND(Index, self.dim() >= 2,
                  "diagonal: dimensions require a tensor with at least 2 dims (got shape {})",
                  self.shapeStr());
  int64_t d1 = wrapDim(dim1, self.dim(), "diagonal"), d2 = wrapDim(dim2, self.dim(), "diagonal");
  KILN_CHECK(d1 != d2, "diagonal dimensions cannot be identical {}, {}", dim1, dim2);
  const int64_t n1 = self.size(d1), n2 = self.size(d2);
  int64_t len = offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2);
  len = std::max<int64_t>(len, 0);
  int64_t start = self.storageOffset();
  if (len > 0)
    start += offset >= 0 ? offset * self.stride(d2) : -offset * self.stride(d1);
  Shape sizes, strides;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (d == d1 || d == d2)
      continue;
    sizes.push_back(self.size(d));
    strides.push_back(self.stride(d));
  }
  sizes.push_back(len);
  strides.push_back(self.stride(d1) + self.stride(d2));
  return self.asStrided(sizes, strides, start);
}

Tensor diag(const Tensor &self, int64_t k) {
  KILN_CHECK(self.dim() == 1 || self.dim() == 2,
             "diag(): Supports 1D or 2D tensors. Got {}D (shape {})", self.dim(), self.shapeStr());
  if (self.dim() == 2)
    return diagonal(self, k, 0, 1).clone();
  const int64_t n = self.size(0) + std::abs(k);
  Tensor out = zeros({n, n}, self.dtype());
  diagonal(out, k, 0, 1).copy_(self);
  return out;
}

Tensor diagEmbed(const Tensor &self, int64_t offset, int64_t dim1, int64_t dim2) {
  const int64_t nd = self.dim() + 1;
  int64_t d1 = wrapDim(dim1, nd, "diag_embed"), d2 = wrapDim(dim2, nd, "diag_embed");
  KILN_CHECK(d1 != d2, "diag_embed: diagonal dimensions cannot be identical {}, {}", dim1, dim2);
  Tensor x = self.dim() == 0 ? self.reshape({1}) : self;
  const int64_t n = x.size(-1) + std::abs(offset);
  Shape sizes(x.sizes().begin(), x.sizes().end() - 1);
  sizes.insert(sizes.begin() + std::min(d1, d2), n);
  sizes.insert(sizes.begin() + std::max(d1, d2), n);
  Tensor out = zeros(sizes, self.dtype());
  diagonal(out, offset, d1, d2).copy_(x);
  return out;
}

} // namespace kiln::ops

// Padding (F.pad's four modes) and the lookup ops one_hot and embedding.
#include "runtime/copy.h"
#include "runtime/device_ops.h"
#include "runtime/error.h"
#include "runtime/ops/index.h"
#include "runtime/ops/index_impl.h"
#include "runtime/ops/shape_ops.h"

#include <algorithm>

namespace kiln::ops {

namespace {

/// Constant padding: fill, then copy the (possibly cropped, for negative pads) input in.
Tensor padConstant(const Tensor &self, IntList pad, double value) {
  const int64_t k = static_cast<int64_t>(pad.size()) / 2;
  Shape sizes = self.sizes();
  for (int64_t i = 0; i < k; ++i) {
    int64_t d = self.dim() - 1 - i, l = pad[2 * i], r = pad[2 * i + 1];
    sizes[d] = self.size(d) + l + r;
    KILN_CHECK(sizes[d] >= 0,
               "pad: The input size {}, plus negative padding {} and {} resulted in a negative "
               "output size, which is invalid. Check dimension {} of your input.",
               self.size(d), l, r, d);
  }
  Tensor out = Tensor::empty(sizes, self.dtype(), self.device());
  if (isFloating(self.dtype()))
    out.fill_(Scalar(value));
  else
    out.fill_(self.dtype() == DType::Bool ? Scalar(value != 0.0)
                                          : Scalar(static_cast<int64_t>(value)));
  Tensor dst = out, src = self;
  for (int64_t i = 0; i < k; ++i) {
    int64_t d = self.dim() - 1 - i, l = pad[2 * i], r = pad[2 * i + 1];
    int64_t srcStart = std::max<int64_t>(0, -l);
    int64_t len = self.size(d) - srcStart - std::max<int64_t>(0, -r);
    if (len <= 0)
      return out;
    src = src.narrow(d, srcStart, len);
    dst = dst.narrow(d, std::max<int64_t>(0, l), len);
  }
  copyInto(dst, src);
  return out;
}

/// torch's rule for the non-constant modes: pads of the last 1, 2 or 3 dims of a tensor with one
/// or two more (batch, channel) dims.
void checkNonConstantRank(const Tensor &self, int64_t k) {
  bool ok = k >= 1 && k <= 3 && (self.dim() == k + 1 || self.dim() == k + 2);
  KILN_CHECK_KIND(NotImplemented, ok,
                  "pad: Padding size {} is not supported for {}D input tensor. Supported "
                  "combinations for non-constant padding: 2D or 3D input: padding size = 2 (pads "
                  "last dimension); 3D or 4D input: padding size = 4 (pads last 2 dimensions); 4D "
                  "or 5D input: padding size = 6 (pads last 3 dimensions)",
                  2 * k, self.dim());
}

/// The source index of each output position along one padded dim of size n.
Tensor padSourceIndex(const std::string &mode, int64_t n, int64_t l, int64_t r) {
  const int64_t m = n + l + r;
  KILN_CHECK(m >= 0, "pad: padding ({}, {}) gives a negative output size for a dim of size {}", l,
             r, n);
  Tensor idx = Tensor::empty({m}, DType::Int64);
  int64_t *p = idx.data<int64_t>();
  for (int64_t j = 0; j < m; ++j) {
    int64_t s = j - l;
    if (mode == "reflect") {
      s = s < 0 ? -s : s;
      s = s >= n ? 2 * (n - 1) - s : s;
    } else if (mode == "replicate") {
      s = std::clamp<int64_t>(s, 0, n - 1);
    } else {
      // torch wraps around the input left after negative pads crop it.
      const int64_t lo = std::max<int64_t>(0, -l), len = n - lo - std::max<int64_t>(0, -r);
      KILN_CHECK(len > 0,
                 "pad: negative circular padding ({}, {}) leaves nothing of a dim of "
                 "size {} to wrap around",
                 l, r, n);
      s = lo + (((j - std::max<int64_t>(l, 0)) % len) + len) % len;
    }
    p[j] = s;
  }
  return idx;
}

void checkModePads(const Tensor &self, const std::string &mode, int64_t d, int64_t l, int64_t r) {
  const int64_t n = self.size(d);
  if (mode == "reflect")
    KILN_CHECK(l < n && r < n,
               "pad: Argument #4: Padding size should be less than the corresponding input "
               "dimension, but got: padding ({}, {}) at dimension {} of input {}",
               l, r, d, self.shapeStr());
  else if (mode == "circular")
    KILN_CHECK(l <= n && r <= n,
               "pad: Padding value causes wrapping around more than once (padding ({}, {}) at "
               "dimension {} of input {}).",
               l, r, d, self.shapeStr());
  else
    KILN_CHECK(n > 0, "pad: replicate padding needs a non-empty dimension {} (input {})", d,
               self.shapeStr());
}

} // namespace

Tensor pad(const Tensor &self, IntList pad, const std::string &mode, std::optional<double> value) {
  KILN_CHECK(pad.size() % 2 == 0, "pad: Padding length must be divisible by 2 (got {})",
             shapeToString(pad));
  const int64_t k = static_cast<int64_t>(pad.size()) / 2;
  KILN_CHECK(k <= self.dim(),
             "pad: Padding length should be less than or equal to two times the input dimension "
             "but got padding length {} and input of dimension {}",
             pad.size(), self.dim());
  if (mode == "constant")
    return padConstant(self, pad, value.value_or(0.0));
  KILN_CHECK_KIND(NotImplemented, mode == "reflect" || mode == "replicate" || mode == "circular",
                  "pad: Unrecognised padding mode {}", mode);
  KILN_CHECK(!value || *value == 0.0, "pad: Padding mode \"{}\" doesn't take in value argument",
             mode);
  checkNonConstantRank(self, k);
  Tensor out = self;
  for (int64_t i = 0; i < k; ++i) {
    int64_t d = self.dim() - 1 - i, l = pad[2 * i], r = pad[2 * i + 1];
    checkModePads(self, mode, d, l, r);
    out = indexSelect(out, d, padSourceIndex(mode, self.size(d), l, r));
  }
  return out.isSameAs(self) ? self.clone() : out;
}

Tensor oneHot(const Tensor &self, int64_t numClasses) {
  KILN_CHECK(self.dtype() == DType::Int64,
             "one_hot is only applicable to index tensor of type LongTensor (got {}).",
             dtypeName(self.dtype()));
  Tensor c = self.contiguous();
  const int64_t *p = c.data<int64_t>();
  const int64_t n = c.numel();
  if (numClasses == -1) {
    KILN_CHECK(n > 0, "one_hot: Can not infer total number of classes from empty tensor.");
    numClasses = *std::max_element(p, p + n) + 1;
  }
  KILN_CHECK(numClasses >= 0, "one_hot: num_classes should be -1 or non-negative (got {})",
             numClasses);
  for (int64_t i = 0; i < n; ++i) {
    KILN_CHECK(p[i] >= 0, "one_hot: Class values must be non-negative (got {}).", p[i]);
    KILN_CHECK(p[i] < numClasses,
               "one_hot: Class values must be smaller than num_classes (got {} for num_classes "
               "{}).",
               p[i], numClasses);
  }
  Shape sizes = self.sizes();
  sizes.push_back(numClasses);
  Tensor out = Tensor::empty(sizes, DType::Int64, self.device());
  out.fill_(Scalar(int64_t{0}));
  int64_t *o = out.data<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    o[i * numClasses + p[i]] = 1;
  return out;
}

Tensor embedding(const Tensor &indices, const Tensor &weight, std::optional<int64_t> paddingIdx) {
  if (onDevice({&indices, &weight}))
    return deviceOp("embedding", {indices, weight},
                    paddingIdx ? fmt::format("padding_idx = {}", *paddingIdx) : "");
  KILN_CHECK(weight.dim() == 2, "embedding: 'weight' must be 2-D (got shape {})",
             weight.shapeStr());
  KILN_CHECK(indices.dtype() == DType::Int64 || indices.dtype() == DType::Int32,
             "embedding: Expected tensor for argument #1 'indices' to have one of the following "
             "scalar types: Long, Int; but got {} instead",
             dtypeName(indices.dtype()));
  const int64_t rows = weight.size(0);
  if (paddingIdx)
    KILN_CHECK_KIND(Value, *paddingIdx >= -rows && *paddingIdx < rows,
                    "embedding: Padding_idx must be within num_embeddings (got {} for {} rows)",
                    *paddingIdx, rows);
  Tensor flat = indices.reshape({-1});
  // Validate here so the error names embedding, the bad index and the table size.
  Tensor idx = detail::normalizeIndex(flat, rows, 0, false, "embedding");
  Shape sizes = indices.sizes();
  sizes.push_back(weight.size(1));
  return indexSelect(weight, 0, idx).view(sizes);
}

} // namespace kiln::ops

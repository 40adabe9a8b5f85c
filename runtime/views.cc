// View operations: each returns a tensor sharing storage with its input (see [Note: tensor
// semantics] in tensor.h).
#include "runtime/error.h"
#include "runtime/tensor.h"

#include <algorithm>

namespace kiln {

namespace {

/// Resolves one -1 in a requested shape against numel (torch's infer_size).
Shape inferSize(IntList req, int64_t numel, const char *op, const Tensor &self) {
  Shape out(req.begin(), req.end());
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer < 0, "{}: only one dimension can be inferred", op);
      infer = static_cast<int>(i);
    } else {
      KILN_CHECK(out[i] >= 0, "{}: invalid shape dimension {}", op, out[i]);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, "{}: shape '{}' is invalid for input of size {}",
               op, shapeToString(req), numel);
    out[infer] = numel / known;
  } else {
    KILN_CHECK(known == numel, "{}: shape '{}' is invalid for input of size {} (shape {})", op,
               shapeToString(req), numel, self.shapeStr());
  }
  return out;
}

/// Strides for viewing a (sizes, strides) tensor as newSizes without copying, if possible
/// (torch's computeStride: splits and merges of dims that are contiguous with each other).
std::optional<Shape> viewStrides(IntList sizes, IntList strides, IntList newSizes) {
  Shape newStrides(newSizes.size());
  if (sizes.empty()) {
    std::fill(newStrides.begin(), newStrides.end(), 1);
    return newStrides;
  }
  if (numelOf(sizes) == 0) {
    return contiguousStrides(newSizes);
  }
  int64_t viewD = static_cast<int64_t>(newSizes.size()) - 1;
  int64_t chunkBaseStride = strides.back();
  int64_t tensorNumel = 1, viewNumel = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    tensorNumel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensorNumel * chunkBaseStride)) {
      while (viewD >= 0 && (viewNumel < tensorNumel || newSizes[viewD] == 1)) {
        newStrides[viewD] = viewNumel * chunkBaseStride;
        viewNumel *= newSizes[viewD];
        --viewD;
      }
      if (viewNumel != tensorNumel)
        return std::nullopt;
      if (d > 0) {
        chunkBaseStride = strides[d - 1];
        tensorNumel = 1;
        viewNumel = 1;
      }
    }
  }
  if (viewD != -1)
    return std::nullopt;
  return newStrides;
}

Tensor withGeometry(const Tensor &self, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = self.storage();
  impl->dtype = self.dtype();
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->storageOffset = offset;
  // Autograd history is the autograd layer's to attach (autograd/views.h); a bare view has none.
  impl->requiresGrad = false;
  return Tensor(std::move(impl));
}

} // namespace

Tensor Tensor::view(IntList req) const {
  Shape sizes = inferSize(req, numel(), "view", *this);
  auto strides = viewStrides(this->sizes(), this->strides(), sizes);
  KILN_CHECK(strides.has_value(),
             "view: size {} is not compatible with input tensor's size {} and stride {} (at least "
             "one dimension spans across two contiguous subspaces); use .reshape(...) instead",
             shapeToString(sizes), shapeStr(), shapeToString(this->strides()));
  return withGeometry(*this, sizes, *strides, storageOffset());
}

Tensor Tensor::reshape(IntList req) const {
  Shape sizes = inferSize(req, numel(), "reshape", *this);
  if (auto strides = viewStrides(this->sizes(), this->strides(), sizes))
    return withGeometry(*this, sizes, *strides, storageOffset());
  return clone().view(sizes);
}

Tensor Tensor::asStrided(IntList sizes, IntList strides, std::optional<int64_t> offset) const {
  KILN_CHECK(sizes.size() == strides.size(), "as_strided: {} sizes but {} strides", sizes.size(),
             strides.size());
  int64_t off = offset.value_or(storageOffset());
  int64_t maxIndex = off;
  for (size_t i = 0; i < sizes.size(); ++i) {
    KILN_CHECK(sizes[i] >= 0 && strides[i] >= 0, "as_strided: negative size or stride");
    if (sizes[i] == 0)
      maxIndex = -1;
    else if (maxIndex >= 0)
      maxIndex += (sizes[i] - 1) * strides[i];
  }
  KILN_CHECK(maxIndex < 0 ||
                 static_cast<size_t>((maxIndex + 1) * itemsize()) <= storage()->nbytes(),
             "as_strided: size {} stride {} offset {} is out of bounds for a storage of {} bytes",
             shapeToString(sizes), shapeToString(strides), off, storage()->nbytes());
  return withGeometry(*this, Shape(sizes.begin(), sizes.end()),
                      Shape(strides.begin(), strides.end()), off);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0)
    return alias();
  d0 = wrapDim(d0, dim(), "transpose");
  d1 = wrapDim(d1, dim(), "transpose");
  Shape sz = sizes(), st = strides();
  std::swap(sz[d0], sz[d1]);
  std::swap(st[d0], st[d1]);
  return withGeometry(*this, sz, st, storageOffset());
}

Tensor Tensor::permute(IntList dims) const {
  KILN_CHECK(static_cast<int64_t>(dims.size()) == dim(),
             "permute: number of dims don't match in permute (got {} dims for a {}-d tensor)",
             dims.size(), dim());
  Shape sz(dim()), st(dim());
  std::vector<bool> seen(dim(), false);
  for (int64_t i = 0; i < dim(); ++i) {
    int64_t d = wrapDim(dims[i], dim(), "permute");
    KILN_CHECK(!seen[d], "permute: repeated dim {} in {}", d, shapeToString(dims));
    seen[d] = true;
    sz[i] = sizes()[d];
    st[i] = strides()[d];
  }
  return withGeometry(*this, sz, st, storageOffset());
}

Tensor Tensor::expand(IntList req) const {
  KILN_CHECK(static_cast<int64_t>(req.size()) >= dim(),
             "expand: the number of sizes provided ({}) must be greater or equal to the number of "
             "dimensions in the tensor ({})",
             req.size(), dim());
  size_t lead = req.size() - dim();
  Shape sz(req.size()), st(req.size());
  for (size_t i = 0; i < req.size(); ++i) {
    if (i < lead) {
      KILN_CHECK(req[i] >= 0, "expand: the expanded size {} is not allowed in a leading dim",
                 req[i]);
      sz[i] = req[i];
      st[i] = 0;
      continue;
    }
    int64_t have = sizes()[i - lead];
    int64_t want = req[i] == -1 ? have : req[i];
    if (have == want) {
      sz[i] = have;
      st[i] = strides()[i - lead];
    } else {
      KILN_CHECK(have == 1,
                 "expand: the expanded size of the tensor ({}) must match the existing size ({}) "
                 "at non-singleton dimension {}; target sizes {}, tensor sizes {}",
                 want, have, i, shapeToString(req), shapeStr());
      sz[i] = want;
      st[i] = 0;
    }
  }
  if (sz == sizes() && st == strides())
    return *this;
  return withGeometry(*this, sz, st, storageOffset());
}

Tensor Tensor::slice(int64_t d, std::optional<int64_t> start, std::optional<int64_t> end,
                     int64_t step) const {
  KILN_CHECK_KIND(Value, step > 0, "slice: step must be greater than zero (got {})", step);
  KILN_CHECK_KIND(Index, dim() > 0, "slice: cannot slice a 0-d tensor");
  d = wrapDim(d, dim(), "slice");
  int64_t n = sizes()[d];
  int64_t s = start.value_or(0), e = end.value_or(n);
  if (s < 0)
    s += n;
  if (e < 0)
    e += n;
  s = std::clamp<int64_t>(s, 0, n);
  e = std::clamp<int64_t>(e, s, n);
  Shape sz = sizes(), st = strides();
  sz[d] = (e - s + step - 1) / step;
  st[d] *= step;
  return withGeometry(*this, sz, st, storageOffset() + s * strides()[d]);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  // wrapDim accepts dim 0/-1 on a 0-d tensor, which has no size to narrow.
  KILN_CHECK(dim() > 0, "narrow() cannot be applied to a 0-dim tensor.");
  d = wrapDim(d, dim(), "narrow");
  int64_t n = sizes()[d];
  if (start < 0)
    start += n;
  KILN_CHECK_KIND(Index, start >= 0 && length >= 0 && start + length <= n,
                  "narrow: start ({}) + length ({}) exceeds dimension size ({})", start, length, n);
  return slice(d, start, start + length);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  KILN_CHECK_KIND(Index, dim() > 0, "select: cannot be applied to a 0-dim tensor");
  d = wrapDim(d, dim(), "select");
  int64_t n = sizes()[d];
  KILN_CHECK_KIND(Index, index >= -n && index < n,
                  "index {} is out of bounds for dimension {} with size {}", index, d, n);
  if (index < 0)
    index += n;
  Shape sz = sizes(), st = strides();
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  return withGeometry(*this, sz, st, storageOffset() + index * strides()[d]);
}

Tensor Tensor::squeeze() const {
  Shape sz, st;
  for (int64_t i = 0; i < dim(); ++i) {
    if (sizes()[i] != 1) {
      sz.push_back(sizes()[i]);
      st.push_back(strides()[i]);
    }
  }
  return withGeometry(*this, sz, st, storageOffset());
}

Tensor Tensor::squeeze(IntList dims) const {
  std::vector<bool> drop(std::max<int64_t>(dim(), 1), false);
  for (int64_t d : dims)
    drop[wrapDim(d, dim(), "squeeze")] = true;
  Shape sz, st;
  for (int64_t i = 0; i < dim(); ++i) {
    if (!(drop[i] && sizes()[i] == 1)) {
      sz.push_back(sizes()[i]);
      st.push_back(strides()[i]);
    }
  }
  return withGeometry(*this, sz, st, storageOffset());
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrapDim(d, dim() + 1, "unsqueeze");
  Shape sz = sizes(), st = strides();
  int64_t newStride = d < dim() ? sz[d] * st[d] : 1;
  sz.insert(sz.begin() + d, 1);
  st.insert(st.begin() + d, newStride);
  return withGeometry(*this, sz, st, storageOffset());
}

Tensor Tensor::flatten(int64_t startDim, int64_t endDim) const {
  if (dim() == 0)
    return reshape(std::vector<int64_t>{1});
  startDim = wrapDim(startDim, dim(), "flatten");
  endDim = wrapDim(endDim, dim(), "flatten");
  KILN_CHECK(startDim <= endDim, "flatten: start_dim ({}) cannot come after end_dim ({})",
             startDim, endDim);
  Shape sz(sizes().begin(), sizes().begin() + startDim);
  int64_t merged = 1;
  for (int64_t i = startDim; i <= endDim; ++i)
    merged *= sizes()[i];
  sz.push_back(merged);
  sz.insert(sz.end(), sizes().begin() + endDim + 1, sizes().end());
  return reshape(sz);
}

Tensor Tensor::unflatten(int64_t d, IntList parts) const {
  KILN_CHECK_KIND(Index, dim() > 0,
                  "unflatten: Dimension specified as {} but tensor has no dimensions", d);
  d = wrapDim(d, dim(), "unflatten");
  Shape inner = inferSize(parts, sizes()[d], "unflatten", *this);
  Shape sz(sizes().begin(), sizes().begin() + d);
  sz.insert(sz.end(), inner.begin(), inner.end());
  sz.insert(sz.end(), sizes().begin() + d + 1, sizes().end());
  return view(sz);
}

std::vector<Tensor> Tensor::unbind(int64_t d) const {
  KILN_CHECK_KIND(Index, dim() > 0,
                  "unbind: Dimension specified as {} but tensor has no dimensions", d);
  d = wrapDim(d, dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < sizes()[d]; ++i)
    out.push_back(select(d, i));
  return out;
}

Tensor Tensor::t() const {
  KILN_CHECK(dim() <= 2, "t() expects a tensor with <= 2 dimensions, but self is {}D", dim());
  return dim() < 2 ? alias() : transpose(0, 1);
}

Tensor Tensor::mT() const {
  KILN_CHECK(dim() >= 2, "tensor.mT is only supported on matrices or batches of matrices. Got {}-D "
             "tensor.", dim());
  return transpose(-2, -1);
}

Tensor Tensor::alias() const { return withGeometry(*this, sizes(), strides(), storageOffset()); }

Tensor Tensor::aliasWithDType(DType dt) const {
  KILN_CHECK(kiln::itemsize(dt) == itemsize(), "view(dtype): {} and {} differ in size",
             dtypeName(dt), dtypeName(dtype()));
  Tensor t = alias();
  t.impl().dtype = dt;
  return t;
}

} // namespace kiln

#include "runtime/tensor.h"

#include "runtime/copy.h"
#include "runtime/error.h"
#include "runtime/loops.h"

#include <algorithm>
#include <climits>
#include <numeric>

namespace kiln {

// ---- shape helpers ----------------------------------------------------------------------------

int64_t wrapDim(int64_t dim, int64_t ndim, const char *op) {
  int64_t n = std::max<int64_t>(ndim, 1); // a 0-d tensor accepts dim 0 and -1
  if (dim < -n || dim >= n)
    fail(ErrorKind::Index,
         "{}: dimension out of range (expected to be in range of [{}, {}], but got {})", op, -n,
         n - 1, dim);
  return dim < 0 ? dim + n : dim;
}

Shape contiguousStrides(IntList sizes) {
  Shape s(sizes.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
  return s;
}

int64_t numelOf(IntList sizes) {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return n;
}

std::string shapeToString(IntList sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i)
    s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

Shape broadcastShapes(IntList a, IntList b, const char *op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(ErrorKind::Shape,
           "{}: shapes {} and {} cannot be broadcast: the size of dimension {} differs ({} vs {}) "
           "and neither is 1",
           op, shapeToString(a), shapeToString(b),
           static_cast<int64_t>(i) - static_cast<int64_t>(n), da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// ---- NdLoop -----------------------------------------------------------------------------------

NdLoop::NdLoop(IntList shape, std::span<const Tensor> operands) {
  nops_ = static_cast<int>(operands.size());
  KILN_CHECK(nops_ <= kMaxOperands, "NdLoop: too many operands ({})", nops_);
  const int nd = static_cast<int>(shape.size());
  numel_ = numelOf(shape);
  for (int k = 0; k < nops_; ++k) {
    const Tensor &t = operands[k];
    KILN_CHECK(t.dim() == nd, "NdLoop: operand {} has rank {}, loop has rank {}", k, t.dim(), nd);
    base_[k] = t.rawData();
  }
  // Order dims innermost-first by the output's stride (stable, so ties keep row-major order).
  std::vector<int> order(nd);
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());
  const Shape &outStrides = operands[0].strides();
  auto key = [&](int d) { return outStrides[d] == 0 ? INT64_MAX : outStrides[d]; };
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return key(x) < key(y); });
  for (int d : order) {
    if (shape[d] == 1)
      continue;
    bool merge = !shape_.empty();
    for (int k = 0; k < nops_ && merge; ++k) {
      int64_t inner = strides_[k].back(), outer = operands[k].strides()[d] * operands[k].itemsize();
      merge = outer == inner * shape_.back();
    }
    if (merge) {
      shape_.back() *= shape[d];
      continue;
    }
    shape_.push_back(shape[d]);
    for (int k = 0; k < nops_; ++k)
      strides_[k].push_back(operands[k].strides()[d] * operands[k].itemsize());
  }
  if (shape_.empty() && numel_ == 1) {
    shape_.push_back(1);
    for (int k = 0; k < nops_; ++k)
      strides_[k].push_back(0);
  }
}

// ---- construction -----------------------------------------------------------------------------

Tensor Tensor::empty(IntList sizes, DType dtype, Device device) {
  // Checked products: a huge shape must fail here, not wrap around to a small allocation.
  int64_t nbytes = kiln::itemsize(dtype);
  for (int64_t s : sizes) {
    KILN_CHECK_KIND(Value, s >= 0, "empty: negative dimension {} in shape {}", s,
                    shapeToString(sizes));
    KILN_CHECK(!__builtin_mul_overflow(nbytes, s, &nbytes),
               "empty: a tensor of shape {} and dtype {} needs more than 2^63 bytes",
               shapeToString(sizes), dtypeName(dtype));
  }
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::allocate(static_cast<size_t>(nbytes), device);
  impl->dtype = dtype;
  impl->sizes.assign(sizes.begin(), sizes.end());
  impl->strides = contiguousStrides(sizes);
  return Tensor(std::move(impl));
}

Tensor Tensor::fromStorage(std::shared_ptr<Storage> storage, DType dtype, IntList sizes,
                           IntList strides, int64_t storageOffset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->dtype = dtype;
  impl->sizes.assign(sizes.begin(), sizes.end());
  impl->strides.assign(strides.begin(), strides.end());
  impl->storageOffset = storageOffset;
  return Tensor(std::move(impl));
}

Tensor Tensor::scalarTensor(const Scalar &s, DType dtype) {
  Tensor t = empty({}, dtype);
  t.fill_(s);
  return t;
}

Tensor Tensor::wrapScalar(const Scalar &s) {
  Tensor t = empty({}, s.dtype());
  if (s.isFloating())
    *t.data<double>() = s.toDouble();
  else if (s.dtype() == DType::Bool)
    *t.data<bool>() = s.toBool();
  else
    *t.data<int64_t>() = s.toInt();
  t.impl_->wrappedNumber = true;
  return t;
}

// ---- queries ----------------------------------------------------------------------------------

// wrapDim lets dim 0/-1 through for a 0-d tensor, which has no size or stride to read.
int64_t Tensor::size(int64_t d) const {
  KILN_CHECK_KIND(Index, dim() > 0, "Dimension specified as {} but tensor has no dimensions", d);
  return sizes()[wrapDim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  KILN_CHECK_KIND(Index, dim() > 0, "Dimension specified as {} but tensor has no dimensions", d);
  return strides()[wrapDim(d, dim(), "stride")];
}
int64_t Tensor::numel() const { return numelOf(sizes()); }

bool Tensor::isContiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (sizes()[i] == 1)
      continue;
    if (sizes()[i] == 0)
      return true;
    if (strides()[i] != expected)
      return false;
    expected *= sizes()[i];
  }
  return true;
}

Scalar Tensor::item() const {
  KILN_CHECK_KIND(Value, numel() == 1,
                  "item(): a Tensor with {} elements cannot be converted to a Scalar", numel());
  if (!isCpu())
    return to(Device{}).item();
  return dispatchAll(dtype(), [&]<typename T>() -> Scalar {
    T v = *data<T>();
    if constexpr (std::is_same_v<T, bool>)
      return Scalar(v);
    else if constexpr (std::is_integral_v<T>)
      return Scalar(static_cast<int64_t>(v));
    else
      return Scalar(static_cast<double>(static_cast<float>(v) == v ? static_cast<float>(v)
                                                                   : static_cast<double>(v)));
  });
}

std::string Tensor::shapeStr() const { return shapeToString(sizes()); }

// ---- copies -----------------------------------------------------------------------------------

Tensor Tensor::contiguous() const { return isContiguous() ? *this : clone(); }

Tensor Tensor::clone() const {
  Tensor out = empty(sizes(), dtype(), device());
  copyInto(out, *this);
  return out;
}

Tensor Tensor::to(DType dt, bool copy) const {
  if (dt == dtype() && !copy)
    return *this;
  Tensor out = empty(sizes(), dt, device());
  copyInto(out, *this);
  return out;
}

Tensor Tensor::to(Device dev, bool copy) const {
  if (dev == device() && !copy)
    return *this;
  Tensor out = empty(sizes(), dtype(), dev);
  copyInto(out, *this);
  return out;
}

Tensor &Tensor::copy_(const Tensor &src) {
  Shape b = broadcastShapes(sizes(), src.sizes(), "copy_");
  if (b != sizes())
    fail(ErrorKind::Shape, "copy_: source of shape {} cannot be broadcast to destination shape {}",
         src.shapeStr(), shapeStr());
  if (src.storage() == storage() && !isSameAs(src)) {
    copyInto(*this, src.clone().expand(sizes())); // overlapping memory: through a temporary
  } else {
    copyInto(*this, src.expand(sizes()));
  }
  bumpVersion();
  return *this;
}

Tensor &Tensor::fill_(const Scalar &value) {
  fillInto(*this, value);
  bumpVersion();
  return *this;
}

} // namespace kiln

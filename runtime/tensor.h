#pragma once
/// Tensor: a strided view onto a Storage, the value every eager op consumes and produces.
///
/// [Note: tensor semantics]
/// - sizes/strides are in elements; storageOffset is in elements from the storage start.
/// - Views (view, transpose, slice, expand, ...) share the storage and the version counter.
///   Strides may be 0 (expand) and any non-negative value; negative strides are not produced.
/// - A tensor made from a Python number is a "wrapped number": it promotes like a scalar
///   (see PromotionPriority) rather than like a 0-d tensor.
/// - Tensor is a cheap handle (one shared_ptr); copying it never copies data.

#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/scalar.h"
#include "runtime/storage.h"

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;
/// A borrowed list of ints: accepts a Shape, a span or a braced list ({2, 3}) at call sites.
class IntList : public std::span<const int64_t> {
public:
  using std::span<const int64_t>::span;
  IntList(std::span<const int64_t> s) : std::span<const int64_t>(s) {} // NOLINT
  IntList(const Shape &v) : std::span<const int64_t>(v) {}             // NOLINT
  IntList(std::initializer_list<int64_t> il)                           // NOLINT
      : std::span<const int64_t>(il.begin(), il.size()) {}
};

/// A tensor's autograd state (autograd/meta.h): its grad_fn, .grad, hooks. Only tensors that take
/// part in autograd carry one; the runtime never looks inside.
struct AutogradMeta;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  DType dtype = DType::Float32;
  Shape sizes;
  Shape strides;
  int64_t storageOffset = 0;
  bool requiresGrad = false;
  bool wrappedNumber = false;
  std::shared_ptr<AutogradMeta> autograd;
};

class Tensor {
public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// A new contiguous tensor with uninitialized contents.
  static Tensor empty(IntList sizes, DType dtype, Device device = {});
  /// A view of `storage` with the given geometry (no bounds check beyond the storage size).
  static Tensor fromStorage(std::shared_ptr<Storage> storage, DType dtype, IntList sizes,
                            IntList strides, int64_t storageOffset);
  /// A 0-d tensor holding a Python number; promotes as a weak scalar.
  static Tensor wrapScalar(const Scalar &s);
  /// A 0-d tensor of `dtype` holding s.
  static Tensor scalarTensor(const Scalar &s, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  TensorImpl &impl() const { return *impl_; }
  const std::shared_ptr<TensorImpl> &implPtr() const { return impl_; }
  bool isSameAs(const Tensor &o) const { return impl_ == o.impl_; }

  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  const Shape &sizes() const { return impl_->sizes; }
  const Shape &strides() const { return impl_->strides; }
  int64_t dim() const { return static_cast<int64_t>(impl_->sizes.size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  int64_t storageOffset() const { return impl_->storageOffset; }
  int64_t itemsize() const { return kiln::itemsize(dtype()); }
  const std::shared_ptr<Storage> &storage() const { return impl_->storage; }
  bool isContiguous() const;
  bool isWrappedNumber() const { return impl_->wrappedNumber; }
  bool requiresGrad() const { return impl_->requiresGrad; }
  void setRequiresGrad(bool v) { impl_->requiresGrad = v; }
  int64_t version() const { return impl_->storage->version(); }
  void bumpVersion() const { impl_->storage->bumpVersion(); }

  /// Pointer to the first element (storage base + offset).
  char *rawData() const {
    return static_cast<char *>(impl_->storage->data()) + impl_->storageOffset * itemsize();
  }
  template <typename T> T *data() const { return reinterpret_cast<T *>(rawData()); }
  /// The first element's address on the tensor's device (rawData() for a CPU tensor; a device
  /// address, never dereferenced on the host, for a CUDA one).
  char *address() const {
    return static_cast<char *>(impl_->storage->address()) + impl_->storageOffset * itemsize();
  }
  bool isCpu() const { return device().type == DeviceType::CPU; }

  /// The single element of a one-element tensor, as a Scalar of its category.
  Scalar item() const;
  std::string shapeStr() const;

  // Views: share storage, never copy.
  Tensor view(IntList sizes) const;
  Tensor reshape(IntList sizes) const;
  Tensor asStrided(IntList sizes, IntList strides, std::optional<int64_t> offset = {}) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(IntList dims) const;
  Tensor expand(IntList sizes) const;
  Tensor slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
               int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor squeeze() const;
  Tensor squeeze(IntList dims) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t startDim = 0, int64_t endDim = -1) const;
  Tensor unflatten(int64_t dim, IntList sizes) const;
  std::vector<Tensor> unbind(int64_t dim) const;
  Tensor t() const;
  Tensor mT() const;
  Tensor aliasWithDType(DType dtype) const;
  /// A shallow alias: new TensorImpl, same storage and geometry (for Parameter, detach).
  Tensor alias() const;

  /// This tensor if already contiguous, else a contiguous copy.
  Tensor contiguous() const;
  /// A contiguous copy (torch.clone).
  Tensor clone() const;
  /// This tensor cast to dtype (returns *this when already of that dtype and copy is false).
  Tensor to(DType dtype, bool copy = false) const;
  /// This tensor on `device` (returns *this when already there and copy is false).
  Tensor to(Device device, bool copy = false) const;
  /// Copies src (broadcast, cast) into this tensor in place.
  Tensor &copy_(const Tensor &src);
  Tensor &fill_(const Scalar &value);

private:
  std::shared_ptr<TensorImpl> impl_;
};

/// Wraps a possibly negative dim into [0, ndim); throws IndexError naming `op` when out of range.
int64_t wrapDim(int64_t dim, int64_t ndim, const char *op = "dim");
/// Contiguous (row-major) strides for sizes.
Shape contiguousStrides(IntList sizes);
int64_t numelOf(IntList sizes);
std::string shapeToString(IntList sizes);
/// NumPy/PyTorch broadcasting of two shapes; throws naming `op` and both shapes when they clash.
Shape broadcastShapes(IntList a, IntList b, const char *op = "broadcast");

} // namespace kiln

#pragma once
/// Storage: a reference-counted block of device memory shared by a tensor and all its views.
///
/// Memory is either owned (allocated 64-byte aligned by kiln, or by the device's DeviceMemory
/// for a non-CPU device) or borrowed from another owner (a NumPy array, a DLPack capsule): the
/// deleter keeps that owner alive.

#include "runtime/device.h"

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>

namespace kiln {

/// Bytes of host memory kiln allocated for storages that are alive now, and the most there
/// were since the last resetHostPeak() (memory borrowed from NumPy or DLPack is not counted).
struct HostMemoryStats {
  int64_t allocated = 0, peak = 0;
};
HostMemoryStats hostMemoryStats();
void resetHostPeak();

class Storage {
public:
  /// Allocates nbytes of uninitialized memory on `device`.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device = {});
  /// Wraps memory owned elsewhere; `release` runs when the last view of it dies.
  static std::shared_ptr<Storage> borrow(void *data, size_t nbytes, Device device,
                                         std::function<void()> release);

  Storage(void *data, size_t nbytes, Device device, std::function<void()> release)
      : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)),
        madeBytes_(nbytes) {}
  ~Storage();
  Storage(const Storage &) = delete;
  Storage &operator=(const Storage &) = delete;

  /// Host memory; throws kiln::Error for device memory, which only device code may touch, and
  /// for memory released by resize(0).
  void *data() const {
    if (device_.type != DeviceType::CPU || released_) [[unlikely]]
      failHostAccess();
    return data_;
  }
  /// The address on the storage's device (a device address for CUDA: never dereference it here).
  void *address() const {
    if (released_) [[unlikely]]
      failHostAccess();
    return data_;
  }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  /// New memory of `nbytes` on the same device in place of the old (torch's
  /// `untyped_storage().resize_`): every view keeps this storage and sees the new memory; the
  /// first min(old, new) bytes are kept. resize(0) releases the memory; reading a view then is
  /// an error until a resize gives it memory again. FullyShardedDataParallel frees gathered
  /// parameters this way between a unit's forward and its backward, where the autograd graph
  /// still holds views of them. Only 0 or at least the size the storage was made with is
  /// accepted (a smaller size would leave views past its end), and memory handed out elsewhere
  /// (`numpy()`, DLPack, a collective in flight) must not be in use.
  void resize(size_t nbytes);
  bool released() const { return released_; }

  /// Bumped by every in-place write through any view (PyTorch's `_version`).
  int64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bumpVersion() { version_.fetch_add(1, std::memory_order_relaxed); }
  /// Only for a write that restores the contents a version already stood for (memory that
  /// resize(0) released, gathered again): the autograd graph's saved views stay valid.
  void restoreVersion(int64_t v) { version_.store(v, std::memory_order_relaxed); }

private:
  [[noreturn]] void failHostAccess() const;
  /// `s` (owned host memory) counted as alive in hostMemoryStats (~Storage uncounts it).
  static std::shared_ptr<Storage> counted(std::shared_ptr<Storage> s);

  void *data_;
  size_t nbytes_;
  Device device_;
  std::function<void()> release_;
  std::atomic<int64_t> version_{0};
  int64_t countedBytes_ = 0; ///< host bytes hostMemoryStats counts for this storage
  bool released_ = false;    ///< resize(0) freed the memory
  size_t madeBytes_ = 0;     ///< nbytes at construction: resize never goes below it but to 0
};

} // namespace kiln

#pragma once
/// DeviceMemory: how the runtime reaches memory that is not the host's.
///
/// The runtime knows nothing of CUDA. The backend that owns a device type (cuda/, set up by the
/// frontend on first use) registers one DeviceMemory for it, and Storage::allocate, copyInto and
/// fillInto go through it for tensors on that device. Storage::data() refuses device memory, so a
/// CPU kernel handed a device tensor fails with a message instead of reading a device address.

#include "runtime/device.h"
#include "runtime/scalar.h"

#include <cstddef>

namespace kiln {

class Tensor;

class DeviceMemory {
public:
  virtual ~DeviceMemory() = default;

  /// `bytes` on device `index` (a distinct address even for 0 bytes); throws kiln::Error when
  /// the device does not exist or is out of memory.
  virtual void *allocate(int index, size_t bytes) = 0;
  /// Returns memory from allocate(); work already queued that uses it completes first.
  virtual void release(int index, void *address) noexcept = 0;
  /// Copies `bytes` from host memory to device `index`; returns when `src` may be reused.
  virtual void copyToDevice(int index, void *dst, const void *src, size_t bytes) = 0;
  /// Copies `bytes` from device `index` after its queued work; returns when `dst` holds them.
  virtual void copyToHost(int index, void *dst, const void *src, size_t bytes) = 0;
  /// dst[...] = cast(src[...]) on the device: both on device `index`, same sizes, any strides and
  /// dtypes (a kernel).
  virtual void copyOnDevice(const Tensor &dst, const Tensor &src) = 0;
  /// dst[...] = value cast to dst's dtype, on the device.
  virtual void fill(const Tensor &dst, const Scalar &value) = 0;
};

/// Installs the memory of device type `type` (never CPU); `memory` must live as long as the
/// process. Replaces an earlier registration.
void registerDeviceMemory(DeviceType type, DeviceMemory *memory);
/// The memory of `type`; throws kiln::Error naming the device when nothing registered one.
DeviceMemory &deviceMemory(Device device);

} // namespace kiln

#pragma once
/// Backend: where kiln's CUDA tensors live and their programs run.
///
/// Backend::get() is the process's one backend: the GPUs of the CUDA driver (codegen/cuda/
/// driver.h), or, when `KILN_CUDA_EMULATOR=1`, one device emulated on the host (codegen/cuda/
/// host_emulator.h: host memory, kernels compiled by the host compiler, one thread per CUDA
/// thread). The emulator runs the very CUDA C that a GPU would, so machines without a GPU test
/// the whole path — tensors on `cuda`, copies, eager ops, compiled graphs — not just that the code
/// compiles; it is for tests, not speed.
///
/// Memory: device memory comes from one CachingAllocator per device, the same one the device's
/// programs use for their buffers, so a freed tensor's block serves the next program and back.

#include "codegen/cuda/device.h"
#include "codegen/cuda/driver.h"
#include "codegen/cuda/emit.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace kiln::cuda {

struct MemoryStats {
  size_t allocated = 0; ///< bytes in live allocations
  size_t reserved = 0;  ///< bytes held from the device, live or cached
};

class Backend {
public:
  /// The process's backend, chosen and initialized once; null (and `reason` set) when neither
  /// a CUDA driver with a device nor the emulator is usable.
  static Backend *get(std::string *reason = nullptr);
  /// Why get() fails; empty when it succeeds.
  static std::string unavailableReason();

  virtual ~Backend() = default;

  virtual bool emulated() const = 0;
  virtual int deviceCount() const = 0;
  /// Properties of device `index`; throws kiln::Error for an index out of range.
  virtual codegen::cuda::DeviceInfo device(int index) const = 0;
  /// A CudaDevice of device `index` with `module` compiled for it (NVRTC for its architecture
  /// through the CUDA cache, or the host compiler) and loaded.
  virtual std::shared_ptr<codegen::cuda::CudaDevice>
  open(int index, const codegen::cuda::CudaModule &module) = 0;

  /// `bytes` of memory on device `index`; throws kiln::Error when out of memory.
  virtual uint64_t allocate(int index, size_t bytes) = 0;
  virtual void release(int index, uint64_t address) = 0;
  virtual void copyToDevice(int index, uint64_t dst, const void *src, size_t bytes) = 0;
  virtual void copyToHost(int index, void *dst, uint64_t src, size_t bytes) = 0;
  /// Waits until all work queued on device `index` has finished.
  virtual void synchronize(int index) = 0;
  virtual MemoryStats memory(int index) const = 0;
  /// Returns the cached blocks of device `index` to the device.
  virtual void emptyCache(int index) = 0;

protected:
  void checkIndex(int index) const;
};

} // namespace kiln::cuda

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
/// Copies on the driver above 1 MiB go through pinned staging buffers (codegen/cuda/
/// staged_copy.h); events (Event) time and order work on a device's default stream.

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

/// A CUDA event of one device, the engine of kiln.cuda.Event: a marker recorded at the current
/// end of the device's default stream (the only stream kiln queues work on). On the driver it is
/// a cuEvent (codegen/cuda/event.h); on the emulator, whose work is done by the time the call
/// that queued it returns, a host steady_clock timestamp taken by record().
class Event {
public:
  virtual ~Event() = default;

  int device() const { return device_; }
  bool timing() const { return timing_; }
  /// Whether record() has been called.
  bool recorded() const { return recorded_; }

  /// Marks the current end of the device's default stream.
  void record();
  /// Waits until the work before the last record() has finished; returns at once when never
  /// recorded.
  virtual void synchronize() = 0;
  /// Whether the work before the last record() has finished, without waiting (true when never
  /// recorded).
  virtual bool query() = 0;
  /// Milliseconds from this event to `end`, torch.cuda.Event.elapsed_time's checks and messages:
  /// ValueError unless both were made with timing and both recorded; RuntimeError when they
  /// belong to different devices or either has not completed (it does not wait).
  float elapsedMillis(Event &end);

protected:
  Event(int device, bool timing) : device_(device), timing_(timing) {}
  virtual void recordNow() = 0;
  /// Milliseconds to `end`, of the same backend and device, both recorded and completed.
  virtual float millisTo(Event &end) = 0;

private:
  int device_;
  bool timing_;
  bool recorded_ = false;
};

class Backend {
public:
  /// The process's backend, chosen and initialized once; null (and `reason` set) when neither
  /// a CUDA driver with a device nor the emulator is usable.
  static Backend *get(std::string *reason = nullptr);
  /// Why get() fails; empty when it succeeds.
  static std::string unavailableReason();
  /// A backend on the GPUs of `driver` (tests load a fake libcuda with Driver::load); the
  /// driver must outlive it.
  static std::unique_ptr<Backend> overDriver(const codegen::cuda::Driver &driver);

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
  /// A new event of device `index`, never recorded; `timing` enables elapsedMillis. Throws
  /// kiln::Error when the driver lacks events.
  virtual std::unique_ptr<Event> createEvent(int index, bool timing) = 0;

protected:
  void checkIndex(int index) const;
};

} // namespace kiln::cuda

#pragma once
/// CudaDevice: what running a loop program needs from a CUDA device — memory, copies, launches of
/// one module's kernels, the launch limits — behind one interface, so CudaProgram
/// (cuda_program.h) runs the same on a GPU and, in tests, on the host emulator.
///
/// Implementations:
/// - openDriverDevice (driver_device.cc): a GPU through libcuda (driver.h). The module's code is
///   loaded into the device's primary context with cuModuleLoadData (the cubin when there is
///   one, else the PTX, which the driver JIT-compiles); memory comes from a CachingAllocator
///   shared by everything on that device; launches go to the default stream, so they run in
///   order with each other and with the (synchronous) copies.
/// - HostEmulatorDevice (host_emulator.h, test-only): host memory, launches on HostEmulator.
///
/// Addresses are 64-bit device addresses (CUdeviceptr), never dereferenced on the host except
/// by the emulator. Every method may be called from several threads at once.

#include "codegen/cuda/emit.h"
#include "codegen/cuda/launch_plan.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace kiln::codegen::cuda {

struct CompiledCuda;
class CachingAllocator;
class Driver;

class CudaDevice {
public:
  virtual ~CudaDevice() = default;

  /// `bytes` of device memory (a distinct address even for 0 bytes); throws kiln::Error when
  /// the device is out of memory.
  virtual uint64_t allocate(size_t bytes) = 0;
  /// Returns memory from allocate(); work already queued that uses it completes first.
  virtual void release(uint64_t address) = 0;
  /// Copies `bytes` from host memory to the device; returns when `src` may be reused.
  virtual void copyToDevice(uint64_t dst, const void *src, size_t bytes) = 0;
  /// Copies `bytes` to host memory after all queued work; returns when `dst` holds them.
  virtual void copyToHost(void *dst, uint64_t src, size_t bytes) = 0;
  /// Launches `kernel` (of the module this device was opened with) over `grid` blocks of
  /// `block` threads; `args` holds one 64-bit value per KernelArg (addresses, sizes, chunks).
  virtual void launch(const CudaKernel &kernel, std::span<const uint64_t> args, int64_t grid,
                      int block) = 0;
  /// The grid limits planLaunches uses for this device.
  virtual LaunchLimits limits() const = 0;
  /// Waits until all queued work has finished.
  virtual void synchronize() = 0;
  /// The device's name ("NVIDIA H100 80GB HBM3", "host emulator").
  virtual std::string name() const = 0;
  /// The driver's device ordinal, whose primary context library calls (cuBLAS) must make
  /// current; -1 for a device that is not a driver device (the host emulator).
  virtual int ordinal() const { return -1; }
};

/// CUDA device `index` with `code` (compiled for its architecture) loaded. Throws kiln::Error
/// when CUDA is unavailable ("kiln: CUDA is not available: <reason>"), the index does not exist
/// or the driver rejects the code.
std::shared_ptr<CudaDevice> openDriverDevice(int index, const CompiledCuda &code);
/// The same on an explicitly loaded driver (Driver::load), which must outlive the device and
/// every device opened on it (their memory is cached per driver and device index).
std::shared_ptr<CudaDevice> openDriverDevice(const Driver &driver, int index,
                                             const CompiledCuda &code);
/// The memory of device `index` of `driver`: shared by every program on it and by kiln's CUDA
/// tensors (so one's freed blocks serve the other), never destroyed (its blocks belong to the
/// primary context, which lives as long as the process).
CachingAllocator &deviceAllocator(const Driver &driver, int index);

} // namespace kiln::codegen::cuda

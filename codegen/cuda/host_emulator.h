#pragma once
/// HostEmulator: runs emitted CUDA kernels on the host CPU, so that machines without a GPU (CI)
/// test their numerics against the loop IR's interpreter, not only that they compile.
///
/// The module's CUDA C is compiled as C++20 by the host compiler (`$CXX`, else `c++`, `g++` or
/// `clang++` on PATH) behind a shim that maps the CUDA built-ins kiln's kernels use —
/// threadIdx/blockIdx/blockDim/gridDim, __syncthreads, __shfl_down_sync, __shared__, the bit
/// casts, rsqrtf, float16 conversions — to host code, and loaded with dlopen. A launch runs the
/// grid one block at a time and each block's threads as real threads (std::thread), so barriers
/// and warp shuffles keep their CUDA semantics: a block waits at __syncthreads, the 32 threads
/// of a warp exchange values through a barrier of their own. Math is the host's libm, not CUDA's
/// libdevice (the last ulp may differ), memory is host memory, and nothing is timed: it checks
/// the generated code's logic — indexing, vector paths, reductions, casts — not its speed.

#include "codegen/cuda/caching_allocator.h"
#include "codegen/cuda/device.h"
#include "codegen/cuda/emit.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>

namespace kiln::codegen::cuda {

class SharedLibrary;

class HostEmulator {
public:
  /// The host C++ compiler, or nullopt when there is none.
  static std::optional<std::string> findCompiler();

  /// Compiles `module` with `compiler` (default: findCompiler()). Throws kiln::Error with the
  /// compiler's output when it fails.
  explicit HostEmulator(const CudaModule &module, const std::string &compiler = "");
  ~HostEmulator();
  HostEmulator(const HostEmulator &) = delete;
  HostEmulator &operator=(const HostEmulator &) = delete;

  /// Runs `kernel` over `grid` blocks of `block` threads (a multiple of 32, at most
  /// kMaxBlockThreads). `args` holds one value per KernelArg: host addresses for buffers and
  /// the partials workspace, values for sizes and the chunk count.
  void launch(const CudaKernel &kernel, std::span<const uint64_t> args, int64_t grid,
              int block) const;

private:
  using Entry = void (*)(const unsigned long long *args);
  using Launcher = void (*)(Entry entry, const unsigned long long *args, long long grid, int block);
  std::unique_ptr<SharedLibrary> lib_;
  Launcher launcher_ = nullptr;
};

/// A CudaDevice on the host: memory is host memory (256-byte aligned like cuMemAlloc's, filled
/// with 0xff bytes — NaN for floats — when fresh, so a kernel that reads what nobody wrote shows
/// up) through a CachingAllocator, launches run on a HostEmulator of the module with blocks
/// capped at `maxBlock` threads (the kernels stride by blockDim, so fewer threads per block give
/// the same results, and emulation costs one host thread per CUDA thread).
class HostEmulatorDevice final : public CudaDevice {
public:
  explicit HostEmulatorDevice(const CudaModule &module, LaunchLimits limits = {},
                              int maxBlock = 64);
  ~HostEmulatorDevice() override;

  uint64_t allocate(size_t bytes) override;
  void release(uint64_t address) override;
  void copyToDevice(uint64_t dst, const void *src, size_t bytes) override;
  void copyToHost(void *dst, uint64_t src, size_t bytes) override;
  void launch(const CudaKernel &kernel, std::span<const uint64_t> args, int64_t grid,
              int block) override;
  LaunchLimits limits() const override { return limits_; }
  void synchronize() override {}
  std::string name() const override { return "host emulator"; }

  const CachingAllocator &allocator() const { return allocator_; }
  /// Launches so far, and the roles of the kernels launched.
  int64_t launches() const { return launches_; }
  std::set<KernelRole> rolesLaunched() const;

private:
  HostEmulator emulator_;
  LaunchLimits limits_;
  int maxBlock_;
  CachingAllocator allocator_;
  std::atomic<int64_t> launches_{0};
  mutable std::mutex mu_;
  std::set<KernelRole> roles_;
};

} // namespace kiln::codegen::cuda

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

#include "codegen/cuda/emit.h"

#include <cstdint>
#include <memory>
#include <optional>
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

} // namespace kiln::codegen::cuda

#pragma once
/// How the kernels of one node are launched: which of its kernels run (the scalar or the 128-bit
/// pointwise kernel, a whole or a split reduction), with what grid and block, and how big the
/// split reduction's workspace is. Host arithmetic only (no driver), so it is tested anywhere;
/// the CUDA runtime calls it with the bound sizes and the buffers' device addresses.

#include "codegen/cuda/emit.h"

#include <cstdint>
#include <span>
#include <vector>

namespace kiln::codegen::cuda {

struct LaunchLimits {
  int multiprocessors = 108;        ///< DeviceInfo::multiprocessors
  int blocksPerMultiprocessor = 32; ///< grid-stride kernels cap their grid at SMs * this
  /// Split a reduction with split kernels when each output reduces at least this many points.
  int64_t splitMinPoints = 1 << 15;
  /// Reduced points one block of pass 1 handles (before the chunk count is capped).
  int64_t pointsPerChunk = 1 << 12;
};

/// One kernel launch; `chunks` and `workspaceBytes` are set for the passes of a split reduction
/// (pass 1 writes the workspace that pass 2 reads).
struct KernelLaunch {
  const CudaKernel *kernel = nullptr;
  int64_t grid = 0;
  int block = 0;
  int64_t chunks = 0;
  int64_t workspaceBytes = 0;
};

/// Whether node's PointwiseVector kernel may run: every divisible term divides by the width and
/// every vector-accessed buffer's address (`addresses[buffer id]`) is aligned to width *
/// itemsize.
bool vectorApplies(const ir::loop::LoopProgram &program, const NodeKernels &node,
                   const ir::SymbolValues &symbols, std::span<const uint64_t> addresses);

/// The launches of `node` in order (none when it has no points). `addresses` holds each
/// buffer's device address by buffer id (only the vector check reads it).
std::vector<KernelLaunch> planLaunches(const ir::loop::LoopProgram &program,
                                       const NodeKernels &node, const ir::SymbolValues &symbols,
                                       std::span<const uint64_t> addresses,
                                       const LaunchLimits &limits = {});

/// The argument values of `launch`, in its kernel's order: buffers at `addresses` (by buffer
/// id), size symbols from `symbols`, the split reduction's `workspace` and chunk count, the
/// run's `indexError` record.
std::vector<uint64_t> launchArguments(const KernelLaunch &launch, const ir::SymbolValues &symbols,
                                      std::span<const uint64_t> addresses, uint64_t workspace,
                                      uint64_t indexError);

/// The launch of a Fused kernel ([Note: CUDA launches]): a block sized for the largest row's work
/// (every thread a point when no member has rows), a grid of one block per unit up to the cap.
/// `grid` is 0 when there is nothing to run.
KernelLaunch planFused(const FusedKernel &fused, const ir::SymbolValues &symbols,
                       const LaunchLimits &limits = {});

} // namespace kiln::codegen::cuda

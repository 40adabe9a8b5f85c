#include "codegen/cuda/launch_plan.h"

#include "runtime/error.h"

#include <algorithm>

namespace kiln::codegen::cuda {

using ir::loop::LoopProgram;

namespace {

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// A power of two in [32, kMaxBlockThreads] covering `work` threads.
int blockFor(int64_t work) {
  int b = 32;
  while (b < kMaxBlockThreads && b < work)
    b *= 2;
  return b;
}

} // namespace

bool vectorApplies(const LoopProgram &program, const NodeKernels &node,
                   const ir::SymbolValues &symbols, std::span<const uint64_t> addresses) {
  int w = node.vector.width;
  if (w <= 0 || !node.find(KernelRole::PointwiseVector))
    return false;
  for (const ir::SymInt &term : node.vector.divisible)
    if (term.evaluate(symbols) % w != 0)
      return false;
  for (ir::loop::BufferId id : node.vector.aligned) {
    KILN_CHECK(static_cast<size_t>(id.index) < addresses.size(), "cuda launch: no address for {}",
               bufferName(id));
    uint64_t bytes = static_cast<uint64_t>(w * itemsize(program.buffer(id).meta.dtype));
    if (addresses[id.index] % bytes != 0)
      return false;
  }
  return true;
}

std::vector<KernelLaunch> planLaunches(const LoopProgram &program, const NodeKernels &node,
                                       const ir::SymbolValues &symbols,
                                       std::span<const uint64_t> addresses,
                                       const LaunchLimits &limits) {
  const int64_t maxBlocks =
      std::max<int64_t>(1, int64_t{limits.multiprocessors} * limits.blocksPerMultiprocessor);
  int64_t points = node.points.evaluate(symbols);
  if (points <= 0)
    return {};
  const CudaKernel &first = node.kernels.at(0);
  if (first.role == KernelRole::Pointwise) {
    if (const CudaKernel *tiled = node.find(KernelRole::PointwiseTiled))
      return {{tiled, std::min(node.tiles.evaluate(symbols), maxBlocks), kMaxBlockThreads}};
    if (vectorApplies(program, node, symbols, addresses)) {
      int64_t iterations = points / node.vector.width;
      return {{node.find(KernelRole::PointwiseVector),
               std::min(ceilDiv(iterations, kMaxBlockThreads), maxBlocks), kMaxBlockThreads}};
    }
    return {{&first, std::min(ceilDiv(points, kMaxBlockThreads), maxBlocks), kMaxBlockThreads}};
  }
  int64_t reduced = node.reducedPoints.evaluate(symbols);
  const CudaKernel *partial = node.find(KernelRole::ReducePartial);
  if (partial && reduced >= limits.splitMinPoints) {
    int64_t chunks = std::clamp<int64_t>(ceilDiv(reduced, limits.pointsPerChunk), 1,
                                         std::max<int64_t>(1, maxBlocks / points));
    int64_t workspace = points * chunks * node.partialStateBytes;
    return {{partial, std::min(points * chunks, maxBlocks), kMaxBlockThreads, chunks, workspace},
            {node.find(KernelRole::ReduceFinal), points, blockFor(chunks), chunks, workspace}};
  }
  if (first.role == KernelRole::ReduceThread)
    return {{&first, std::min(ceilDiv(points, kMaxBlockThreads), maxBlocks), kMaxBlockThreads}};
  return {{&first, std::min(points, maxBlocks), blockFor(reduced)}};
}

std::vector<uint64_t> launchArguments(const KernelLaunch &launch, const ir::SymbolValues &symbols,
                                      std::span<const uint64_t> addresses, uint64_t workspace,
                                      uint64_t indexError) {
  std::vector<uint64_t> args;
  for (const KernelArg &a : launch.kernel->args)
    switch (a.kind) {
    case KernelArg::Kind::Buffer:
      args.push_back(addresses[a.buffer.index]);
      break;
    case KernelArg::Kind::Size:
      args.push_back(static_cast<uint64_t>(symbols.at(a.symbol)));
      break;
    case KernelArg::Kind::Partials:
      args.push_back(workspace);
      break;
    case KernelArg::Kind::Chunks:
      args.push_back(static_cast<uint64_t>(launch.chunks));
      break;
    case KernelArg::Kind::IndexError:
      args.push_back(indexError);
      break;
    }
  return args;
}

KernelLaunch planFused(const FusedKernel &fused, const ir::SymbolValues &symbols,
                       const LaunchLimits &limits) {
  const int64_t maxBlocks =
      std::max<int64_t>(1, int64_t{limits.multiprocessors} * limits.blocksPerMultiprocessor);
  bool rows = false;
  int64_t work = 1;
  for (const FusedMember &m : fused.members)
    if (m.rows) {
      rows = true;
      for (const ir::SymInt &w : m.work)
        work = std::max(work, w.evaluate(symbols));
    }
  int block = rows ? blockFor(work) : kMaxBlockThreads;
  int64_t units = 0;
  for (const FusedMember &m : fused.members) {
    int64_t points = m.points.evaluate(symbols);
    units += m.rows ? points : ceilDiv(points, block);
  }
  return {&fused.kernel, std::min(units, maxBlocks), block};
}

} // namespace kiln::codegen::cuda

#pragma once
/// Running generated CPU kernels on kiln's thread pool. No LLVM here: the runtime side of a
/// compiled graph links this alone.
///
/// [Note: CPU kernel ABI]
/// Every generated kernel is `extern "C" void kernel(void **args, int64_t begin, int64_t end)`:
/// - args[i] is either a buffer's base pointer (element 0 of the buffer; strides and offsets
///   are baked into the kernel or passed as sizes) or an int64 size stored in the slot itself
///   (packSize below): symbolic sizes are runtime arguments, in the order the kernel declares;
/// - [begin, end) is a range of the kernel's outermost parallel loop (for a launch of several
///   kernels, of their parallel loops end to end); the kernel does exactly the work of those
///   iterations, so chunks may run on different threads in any order.
/// codegen/README.md shows the MLIR that reads the arguments.

#include <cstdint>

namespace kiln::codegen::cpu {

using KernelFn = void (*)(void **args, int64_t begin, int64_t end);

/// An int64 size as an argument slot (the kernel loads the slot as i64).
inline void *packSize(int64_t value) {
  return reinterpret_cast<void *>(static_cast<intptr_t>(value));
}

/// Grain (outer iterations per chunk) for iterations of `workPerIteration` elements each, so a
/// chunk holds about kElementwiseGrain elements.
int64_t grainFor(int64_t workPerIteration);

/// Runs kernel(args, b, e) over chunks covering [0, n) exactly once, on kiln's thread pool.
/// A range under two grains, a pool of one thread or a call from inside a parallel region runs
/// as one call on the calling thread (no thread wake-up).
void launch(KernelFn kernel, void **args, int64_t n, int64_t grain);

/// How many launches so far were handed to the thread pool (not run inline): tests check that
/// a program's kernels really split.
int64_t splitLaunchCount();

} // namespace kiln::codegen::cpu

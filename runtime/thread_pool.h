#pragma once
/// A fixed pool of worker threads for large CPU kernels.
///
/// parallelFor splits [begin, end) into chunks of at least `grain` iterations; the calling thread
/// runs chunks too, so a pool of N threads uses N-1 workers. Ranges smaller than two grains run
/// inline with no synchronization (small kernels never pay a thread wake-up). Calls made from
/// inside a parallel region run serially: no nested parallelism, no deadlock.

#include <cstdint>
#include <functional>

namespace kiln {

/// Number of threads parallelFor uses (KILN_NUM_THREADS, else the hardware concurrency).
int numThreads();
/// Resizes the pool; n <= 0 restores the default.
void setNumThreads(int n);
bool inParallelRegion();
/// Stops the workers' spinning for the next job (they sleep until it comes): called before a
/// library call that runs its own threads (a GEMM), so idle spinners do not take its cores.
void parkWorkers();

using RangeFn = std::function<void(int64_t begin, int64_t end)>;
void parallelForImpl(int64_t begin, int64_t end, int64_t grain, const RangeFn &fn);

/// Runs fn(chunkBegin, chunkEnd) over [begin, end), in parallel when the range is large.
template <typename Fn> void parallelFor(int64_t begin, int64_t end, int64_t grain, Fn &&fn) {
  if (end - begin < 2 * grain || numThreads() == 1 || inParallelRegion()) {
    if (end > begin)
      fn(begin, end);
    return;
  }
  parallelForImpl(begin, end, grain, RangeFn(std::forward<Fn>(fn)));
}

/// Elementwise work below this many elements runs on the calling thread.
constexpr int64_t kElementwiseGrain = 32768;

} // namespace kiln

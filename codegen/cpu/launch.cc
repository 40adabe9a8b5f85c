#include "codegen/cpu/launch.h"

#include "runtime/thread_pool.h"

#include <algorithm>
#include <atomic>

namespace kiln::codegen::cpu {

namespace {
std::atomic<int64_t> splitLaunches{0};
} // namespace

int64_t splitLaunchCount() { return splitLaunches.load(std::memory_order_relaxed); }

int64_t grainFor(int64_t workPerIteration) {
  return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, workPerIteration));
}

void launch(KernelFn kernel, void **args, int64_t n, int64_t grain) {
  if (n <= 0)
    return;
  grain = std::max<int64_t>(1, grain);
  if (n < 2 * grain) { // the common small case: no std::function, no pool
    kernel(args, 0, n);
    return;
  }
  splitLaunches.fetch_add(1, std::memory_order_relaxed);
  parallelFor(0, n, grain, [&](int64_t begin, int64_t end) { kernel(args, begin, end); });
}

} // namespace kiln::codegen::cpu

#include "runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln {
namespace {

thread_local bool tInParallel = false;

int defaultThreads() {
  if (const char *env = std::getenv("KILN_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0)
      return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

/// One parallelFor call: workers and the caller pull chunk indices from `next`.
struct Job {
  const RangeFn *fn;
  int64_t begin, end, chunk, numChunks;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::exception_ptr error;
  std::mutex errorMutex;

  void work() {
    for (int64_t c; (c = next.fetch_add(1)) < numChunks;) {
      int64_t b = begin + c * chunk, e = std::min(end, b + chunk);
      try {
        (*fn)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(errorMutex);
        if (!error)
          error = std::current_exception();
      }
      done.fetch_add(1);
    }
  }
};

/// Spins for up to `budget` waiting for `ready`; true when it became so. Back-to-back kernels
/// (a backward is hundreds of them) then hand work over without a futex wake-up, which costs
/// tens of microseconds on a loaded machine; the short budget keeps idle workers from taking
/// the cores a BLAS call is using for long.
template <typename Pred> bool spinUntil(Pred ready, std::chrono::microseconds budget) {
  auto start = std::chrono::steady_clock::now();
  for (int i = 1;; ++i) {
    if (ready())
      return true;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() - start > budget)
      return false;
  }
}

constexpr std::chrono::microseconds kSpinBudget{50};

/// Bumped by parkWorkers: spinning workers see it change and go to sleep. A global, not a pool
/// member, so a GEMM parks them without taking the pool's lock.
std::atomic<uint64_t> gPark{0};

class ThreadPool {
public:
  explicit ThreadPool(int n) : size_(n) {
    for (int i = 0; i + 1 < n; ++i)
      workers_.emplace_back([this] { loop(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto &w : workers_)
      w.join();
  }
  int size() const { return size_; }

  void run(Job &job) {
    std::lock_guard<std::mutex> serial(runMutex_); // one job at a time from any caller thread
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &job;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all(); // no system call when every worker is spinning
    tInParallel = true;
    job.work();
    tInParallel = false;
    auto finished = [&] { return active_ == 0 && job.done.load() == job.numChunks; };
    spinUntil([&] { return job.done.load() == job.numChunks; }, kSpinBudget);
    // The final check is under the lock a worker takes to join the job, so none can join after.
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, finished);
    job_ = nullptr;
  }

private:
  void loop() {
    uint64_t seen = 0, parked = 0;
    tInParallel = true;
    for (;;) {
      spinUntil(
          [&] {
            return generation_.load(std::memory_order_acquire) != seen || stop_ ||
                   gPark.load(std::memory_order_acquire) != parked;
          },
          kSpinBudget);
      parked = gPark.load(std::memory_order_acquire);
      Job *job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || (job_ && generation_.load() != seen); });
        if (stop_)
          return;
        seen = generation_.load();
        job = job_;
        ++active_;
      }
      job->work();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --active_;
      }
      finished_.notify_all();
    }
  }

  int size_;
  std::vector<std::thread> workers_;
  std::mutex mutex_, runMutex_;
  std::condition_variable wake_, finished_;
  Job *job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  int active_ = 0;
  std::atomic<bool> stop_{false};
};

std::mutex gPoolMutex;
std::unique_ptr<ThreadPool> gPool;
std::atomic<int> gNumThreads{0};

ThreadPool &pool() {
  std::lock_guard<std::mutex> lock(gPoolMutex);
  if (!gPool)
    gPool = std::make_unique<ThreadPool>(numThreads());
  return *gPool;
}

} // namespace

int numThreads() {
  int n = gNumThreads.load(std::memory_order_relaxed);
  if (n == 0) {
    n = defaultThreads();
    gNumThreads.store(n, std::memory_order_relaxed);
  }
  return n;
}

void setNumThreads(int n) {
  std::lock_guard<std::mutex> lock(gPoolMutex);
  gNumThreads.store(n > 0 ? n : defaultThreads());
  gPool.reset();
}

bool inParallelRegion() { return tInParallel; }

void parkWorkers() { gPark.fetch_add(1, std::memory_order_release); }

void parallelForImpl(int64_t begin, int64_t end, int64_t grain, const RangeFn &fn) {
  ThreadPool &p = pool();
  int64_t n = end - begin;
  int64_t maxChunks = std::max<int64_t>(1, n / grain);
  int64_t numChunks = std::min<int64_t>(maxChunks, p.size() * 4);
  Job job;
  job.fn = &fn;
  job.begin = begin;
  job.end = end;
  job.chunk = (n + numChunks - 1) / numChunks;
  job.numChunks = (n + job.chunk - 1) / job.chunk;
  p.run(job);
  if (job.error)
    std::rethrow_exception(job.error);
}

} // namespace kiln

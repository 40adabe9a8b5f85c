// CachingAllocator (codegen/cuda/caching_allocator.h) over a fake raw allocator: size classes,
// best-fit reuse, per-stream free lists, the byte counters, emptyCache, a retry after a failed
// raw allocation, and concurrent use from threads.

#include "codegen/cuda/caching_allocator.h"
#include "runtime/error.h"

#include <kiln_catch.h>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

using kiln::codegen::cuda::CachingAllocator;

namespace {

/// A raw allocator handing out increasing fake addresses, recording what is live.
struct FakeRaw {
  std::mutex mu;
  uint64_t next = 0x10000;
  std::map<uint64_t, size_t> live;
  size_t allocations = 0, releases = 0;
  size_t limit = SIZE_MAX; ///< bytes live at most: beyond, allocation throws (out of memory)

  CachingAllocator make() {
    return CachingAllocator(
        [this](size_t bytes) {
          std::lock_guard<std::mutex> lock(mu);
          size_t inUse = 0;
          for (auto &[a, n] : live)
            inUse += n;
          if (inUse + bytes > limit)
            throw std::runtime_error("out of memory");
          uint64_t a = next;
          next += bytes + 4096;
          live[a] = bytes;
          ++allocations;
          return a;
        },
        [this](uint64_t address) {
          std::lock_guard<std::mutex> lock(mu);
          REQUIRE(live.erase(address) == 1);
          ++releases;
        });
  }
};

constexpr size_t kMiB = size_t{1} << 20;

} // namespace

TEST_CASE("size classes: 512 B multiples up to 1 MiB, 2 MiB multiples above") {
  CHECK(CachingAllocator::roundSize(0) == 512);
  CHECK(CachingAllocator::roundSize(1) == 512);
  CHECK(CachingAllocator::roundSize(512) == 512);
  CHECK(CachingAllocator::roundSize(513) == 1024);
  CHECK(CachingAllocator::roundSize(kMiB) == kMiB);
  CHECK(CachingAllocator::roundSize(kMiB + 1) == 2 * kMiB);
  CHECK(CachingAllocator::roundSize(2 * kMiB + 1) == 4 * kMiB);
  CHECK(CachingAllocator::roundSize(7 * kMiB) == 8 * kMiB);
}

TEST_CASE("freed blocks are reused best-fit, counters follow") {
  FakeRaw raw;
  {
    CachingAllocator a = raw.make();
    uint64_t x = a.allocate(1000); // 1024
    uint64_t y = a.allocate(3000); // 3072
    CHECK(x != y);
    CHECK(a.allocated() == 1024 + 3072);
    CHECK(a.reserved() == 1024 + 3072);
    a.release(x);
    a.release(y);
    CHECK(a.allocated() == 0);
    CHECK(a.reserved() == 1024 + 3072);
    // 900 B rounds to 1024: the 1024 block fits best, not the 3072 one.
    CHECK(a.allocate(900) == x);
    CHECK(a.allocate(2600) == y);
    CHECK(raw.allocations == 2);
    CHECK(a.rawAllocations() == 2);
    CHECK(a.allocated() == 1024 + 3072);
    // Nothing cached is large enough: a fresh block.
    uint64_t z = a.allocate(5000);
    CHECK(raw.allocations == 3);
    a.release(z);
    // A block more than twice the rounded size is not pinned by a small request.
    uint64_t w = a.allocate(512);
    CHECK(w != z);
    CHECK(raw.allocations == 4);
    // Small and large classes do not mix.
    uint64_t big = a.allocate(3 * kMiB);
    a.release(big);
    CHECK(a.allocate(kMiB) != big);
    CHECK(a.allocate(4 * kMiB) == big);
    CHECK_THROWS_AS(a.release(0x1), kiln::Error);
    CHECK_THROWS_WITH(a.release(w + 8), Catch::Contains("not an allocated block"));
  }
  CHECK(raw.releases == raw.allocations - raw.live.size());
}

TEST_CASE("free lists are per stream") {
  FakeRaw raw;
  CachingAllocator a = raw.make();
  uint64_t x = a.allocate(4096, /*stream=*/1);
  a.release(x);
  uint64_t y = a.allocate(4096, /*stream=*/2);
  CHECK(y != x);
  CHECK(a.allocate(4096, /*stream=*/1) == x);
  a.release(y);
  CHECK(a.allocate(4096, /*stream=*/2) == y);
  CHECK(raw.allocations == 2);
}

TEST_CASE("emptyCache returns cached blocks and keeps live ones") {
  FakeRaw raw;
  CachingAllocator a = raw.make();
  uint64_t x = a.allocate(100), y = a.allocate(5 * kMiB);
  a.release(y);
  CHECK(a.reserved() == 512 + 6 * kMiB);
  a.emptyCache();
  CHECK(raw.releases == 1);
  CHECK(raw.live.count(x) == 1);
  CHECK(a.reserved() == 512);
  CHECK(a.allocated() == 512);
  a.release(x);
  a.emptyCache();
  CHECK(raw.live.empty());
  CHECK(a.reserved() == 0);
}

TEST_CASE("a failed raw allocation empties the cache and retries once") {
  FakeRaw raw;
  raw.limit = 7 * kMiB;
  CachingAllocator a = raw.make();
  uint64_t x = a.allocate(5 * kMiB); // 6 MiB
  a.release(x);
  // 2 MiB more would exceed the limit while the 6 MiB block is cached (too big to reuse).
  uint64_t y = a.allocate(2 * kMiB);
  CHECK(raw.live.count(x) == 0);
  CHECK(a.reserved() == 2 * kMiB);
  // Nothing cached to give back: the error reaches the caller, counters unchanged.
  CHECK_THROWS_WITH(a.allocate(5 * kMiB), Catch::Contains("out of memory"));
  CHECK(a.allocated() == 2 * kMiB);
  CHECK(a.reserved() == 2 * kMiB);
  a.release(y);
}

TEST_CASE("concurrent allocate and release from threads") {
  FakeRaw raw;
  CachingAllocator a = raw.make();
  std::atomic<bool> overlap{false};
  std::mutex mu;
  std::set<uint64_t> held; // addresses live across all threads: never handed out twice
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        size_t bytes = static_cast<size_t>((i * 37 + t * 101) % 9000);
        uint64_t p = a.allocate(bytes, t % 2);
        {
          std::lock_guard<std::mutex> lock(mu);
          if (!held.insert(p).second)
            overlap = true;
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          held.erase(p);
        }
        a.release(p);
      }
    });
  for (std::thread &t : threads)
    t.join();
  CHECK_FALSE(overlap);
  CHECK(a.allocated() == 0);
  CHECK(a.reserved() > 0);
  CHECK(raw.allocations < 8 * 500); // reuse happened
  a.emptyCache();
  CHECK(raw.live.empty());
  CHECK(a.reserved() == 0);
}

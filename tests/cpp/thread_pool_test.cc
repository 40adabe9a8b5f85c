#include "runtime/error.h"
#include "runtime/thread_pool.h"

#include <kiln_catch.h>

#include <atomic>
#include <vector>

using namespace kiln;

TEST_CASE("parallelFor covers every index exactly once", "[thread_pool]") {
  setNumThreads(4);
  std::vector<std::atomic<int>> hits(100003);
  parallelFor(0, static_cast<int64_t>(hits.size()), 1000, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      hits[i].fetch_add(1);
  });
  for (auto &h : hits)
    REQUIRE(h.load() == 1);
  setNumThreads(0);
}

TEST_CASE("small ranges run inline and nested calls run serially", "[thread_pool]") {
  setNumThreads(4);
  bool inlineRan = false;
  parallelFor(0, 10, 1000, [&](int64_t, int64_t) { inlineRan = !inParallelRegion(); });
  CHECK(inlineRan);
  std::atomic<int64_t> total{0};
  parallelFor(0, 8000, 1000, [&](int64_t b, int64_t e) {
    parallelFor(0, 4000, 100, [&](int64_t b2, int64_t e2) { total += (e - b) * (e2 - b2); });
  });
  CHECK(total.load() == 8000 * 4000);
  setNumThreads(0);
}

TEST_CASE("exceptions in a worker reach the caller", "[thread_pool]") {
  setNumThreads(2);
  CHECK_THROWS_AS(parallelFor(0, 100000, 100,
                              [](int64_t b, int64_t) {
                                if (b > 50000)
                                  fail(ErrorKind::Value, "boom");
                              }),
                  Error);
  setNumThreads(0);
}

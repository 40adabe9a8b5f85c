#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/ops/random.h"
#include "runtime/thread_pool.h"

#include <kiln_catch.h>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace kiln;

namespace {
std::vector<float> values(const Tensor &t) {
  const float *p = t.data<float>();
  return std::vector<float>(p, p + t.numel());
}
} // namespace

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors", "[random]") {
  using Block = std::array<uint32_t, 4>;
  CHECK(philox4x32({0, 0, 0, 0}, {0, 0}) == Block{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        Block{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        Block{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("generator offsets advance by the reserved count and reseeding restarts", "[random]") {
  Generator g(7);
  CHECK(g.initialSeed() == 7);
  PhiloxStream a = g.reserve(10);
  PhiloxStream b = g.reserve(5);
  CHECK(a.offset == 0);
  CHECK(b.offset == 10);
  CHECK(g.offset() == 15);
  // Element 10 of the first stream is element 0 of the second: streams never overlap.
  CHECK(a.block(10) == b.block(0));
  auto state = g.getState();
  g.manualSeed(7);
  CHECK(g.offset() == 0);
  g.setState(state);
  CHECK(g.offset() == 15);
  CHECK(g.initialSeed() == 7);
}

TEST_CASE("uniform conversions stay in [0, 1)", "[random]") {
  CHECK(uniformFloat(0xffffffffu) < 1.0f);
  CHECK(uniformFloat(0xffffffffu, 8) < 1.0f);
  CHECK(uniformFloat(0u) == 0.0f);
  CHECK(uniformDouble(0xffffffffu, 0xffffffffu) < 1.0);
}

TEST_CASE("samples are reproducible and independent of the thread count", "[random]") {
  Generator g;
  auto draw = [&](int threads) {
    setNumThreads(threads);
    g.manualSeed(1234);
    return values(ops::randn({300000}, DType::Float32, &g));
  };
  std::vector<float> one = draw(1), four = draw(4);
  setNumThreads(0);
  CHECK(one == four);
  double mean = 0, sq = 0;
  for (float v : one) {
    mean += v;
    sq += static_cast<double>(v) * v;
  }
  mean /= one.size();
  double var = sq / one.size() - mean * mean;
  CHECK(std::abs(mean) < 0.01);
  CHECK(std::abs(var - 1.0) < 0.02);
}

TEST_CASE("randperm is a permutation and randint stays in range", "[random]") {
  Generator g(3);
  Tensor p = ops::randperm(1000, DType::Int64, &g);
  std::vector<int64_t> v(p.data<int64_t>(), p.data<int64_t>() + 1000);
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < 1000; ++i)
    REQUIRE(v[i] == i);
  Tensor r = ops::randint(-3, 4, {10000}, DType::Int32, &g);
  const int32_t *rp = r.data<int32_t>();
  CHECK(*std::min_element(rp, rp + 10000) == -3);
  CHECK(*std::max_element(rp, rp + 10000) == 3);
}

TEST_CASE("random ops reject bad arguments with kiln::Error", "[random]") {
  CHECK_THROWS_AS(ops::rand({2}, DType::Int64), Error);
  CHECK_THROWS_AS(ops::randint(5, 5, {2}, DType::Int64), Error);
  CHECK_THROWS_AS(ops::randint(0, 300, {2}, DType::UInt8), Error);
  Tensor t = Tensor::empty({3}, DType::Float32);
  CHECK_THROWS_AS(ops::bernoulli_(t, 1.5), Error);
  CHECK_THROWS_AS(ops::normal_(t, 0.0, -1.0), Error);
}

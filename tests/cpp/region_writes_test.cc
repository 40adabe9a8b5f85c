// Region writes of mutated inputs: a write into part of an input array (`h[7, 1] = v`) leaves
// the program as the written value and its region, which the runner stores in place, instead of
// a whole new array copied back (driver/prepared_graph.cc takeWriteBacks, driver/runner.cc).

#include "driver/runner.h"

#include <kiln_catch.h>

using namespace kiln;

namespace {

// h[7, 1] = v; return v * v
constexpr const char *kRowWrite = R"(graph @f(%h: f64[10, 3, 4], %v: f64[4]) {
  %0 = select(%h) {dim = 0, index = 7} : f64[3, 4]
  %1 = select(%0) {dim = 0, index = 1} : f64[4]
  %2 = copy_(%1, %v) : f64[4]
  %3 = mul(%v, %v) : f64[4]
  return %3
}
)";

std::vector<std::string> regions(const driver::PreparedGraph &g) {
  std::vector<std::string> out;
  for (const driver::WriteBack &w : g.writeBacks)
    out.push_back(passes::lower::regionText(w.region));
  return out;
}

bool has(const std::string &text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

/// Returns fixed results: the runner's part is what it does with them.
class FixedResults final : public codegen::Executable {
public:
  explicit FixedResults(std::vector<Tensor> results) : results_(std::move(results)) {}
  std::vector<Tensor> run(std::span<const Tensor>, const ir::SymbolValues &,
                          std::span<const Tensor>) const override {
    return results_;
  }
  bool canComputeInPlace(size_t, size_t) const override { return false; }
  Device device() const override { return Device{}; }
  const std::string &code() const override { return code_; }
  size_t generatedKernels() const override { return 0; }

private:
  std::vector<Tensor> results_;
  std::string code_;
};

Tensor filled(Shape sizes, double value) {
  Tensor t = Tensor::empty(sizes, DType::Float64);
  t.fill_(value);
  return t;
}

} // namespace

TEST_CASE("a write into a row of an input leaves the program as that row and its region") {
  driver::PreparedGraph g = driver::prepareGraph(kRowWrite);
  REQUIRE(g.writeBacks.size() == 1);
  CHECK(g.writeBacks[0].input == 0);
  CHECK(g.writeBacks[0].result == 1); // after the caller's output
  CHECK(regions(g) == std::vector<std::string>{".select(0, 7).select(0, 1)"});
  CHECK_FALSE(has(g.graphText, "scatter")); // no whole new array
  CHECK(has(g.graphText, "return %0, %v"));
}

TEST_CASE("writes into one input apply in the order the program made them") {
  driver::PreparedGraph g = driver::prepareGraph(R"(graph @f(%h: f64[10, 8], %v: f64[4]) {
  %0 = select(%h) {dim = 0, index = 2} : f64[8]
  %1 = slice(%0) {dim = 0, start = 1, end = 8, step = 2} : f64[4]
  %2 = copy_(%1, %v) : f64[4]
  %3 = mul(%v, %v) : f64[4]
  %4 = slice(%h) {dim = 0, start = -1, end = 10, step = 1} : f64[1, 8]
  %5 = select(%4) {dim = 1, index = 0} : f64[1]
  %6 = sum(%3) {dim = [0], keepdim = true} : f64[1]
  %7 = copy_(%5, %6) : f64[1]
  return %3
}
)");
  CHECK(regions(g) == std::vector<std::string>{".select(0, 2).slice(0, 1, 8, 2)",
                                               ".slice(0, 9, 10, 1).select(1, 0)"});
  CHECK_FALSE(has(g.graphText, "scatter"));
}

TEST_CASE("an array the program reads after writing into it is written back whole") {
  driver::PreparedGraph g = driver::prepareGraph(R"(graph @f(%h: f64[10, 4], %v: f64[4]) {
  %0 = select(%h) {dim = 0, index = 3} : f64[4]
  %1 = copy_(%0, %v) : f64[4]
  %2 = sum(%h) {dim = [0, 1], keepdim = false} : f64[]
  return %2
}
)");
  REQUIRE(g.writeBacks.size() == 1);
  CHECK(g.writeBacks[0].region.empty());
  CHECK(has(g.graphText, "select_scatter"));
}

TEST_CASE("the runner stores a region write in place and leaves the rest of the array") {
  driver::PreparedGraph g = driver::prepareGraph(kRowWrite);
  Tensor h = filled({10, 3, 4}, 0.0), v = filled({4}, 2.5);
  driver::Runner runner(std::move(g), {},
                        std::make_unique<FixedResults>(std::vector<Tensor>{filled({4}, 6.25), v}));
  const double *before = h.data<double>();
  runner.run(std::vector<Tensor>{h, v}, {});
  CHECK(h.data<double>() == before);
  for (int64_t i = 0; i < h.numel(); ++i)
    CHECK(h.data<double>()[i] == (i >= 7 * 12 + 4 && i < 7 * 12 + 8 ? 2.5 : 0.0));
}

TEST_CASE("a written value that overlaps the array it is written into is read first") {
  // h[1:6] = h[0:5] of 24 elements, with the program's value being a view of h itself
  driver::PreparedGraph g = driver::prepareGraph(R"(graph @f(%h: f64[24]) {
  %0 = slice(%h) {dim = 0, start = 0, end = 5, step = 1} : f64[5]
  %1 = slice(%h) {dim = 0, start = 1, end = 6, step = 1} : f64[5]
  %2 = copy_(%1, %0) : f64[5]
  return
}
)");
  REQUIRE(regions(g) == std::vector<std::string>{".slice(0, 1, 6, 1)"});
  Tensor h = Tensor::empty({24}, DType::Float64);
  for (int64_t i = 0; i < 24; ++i)
    h.data<double>()[i] = static_cast<double>(i);
  driver::Runner runner(std::move(g), {},
                        std::make_unique<FixedResults>(std::vector<Tensor>{h.slice(0, 0, 5)}));
  runner.run(std::vector<Tensor>{h}, {});
  std::vector<double> got(h.data<double>(), h.data<double>() + 7);
  CHECK(got == std::vector<double>{0, 0, 1, 2, 3, 4, 6});
}

TEST_CASE("most of an array (a stencil's interior) is computed whole, in its memory") {
  driver::PreparedGraph g = driver::prepareGraph(R"(graph @f(%h: f64[8, 8], %v: f64[6, 6]) {
  %0 = slice(%h) {dim = 0, start = 1, end = 7, step = 1} : f64[6, 8]
  %1 = slice(%0) {dim = 1, start = 1, end = 7, step = 1} : f64[6, 6]
  %2 = copy_(%1, %v) : f64[6, 6]
  return
}
)");
  REQUIRE(g.writeBacks.size() == 1);
  CHECK(g.writeBacks[0].region.empty());
}

TEST_CASE("region writes store rows of a stepped slice and a strided column") {
  Tensor v = Tensor::empty({3, 4}, DType::Float64), c = Tensor::empty({12}, DType::Float64);
  for (int64_t i = 0; i < 12; ++i) {
    v.data<double>()[i] = static_cast<double>(i + 1);
    c.data<double>()[i] = -static_cast<double>(i + 1);
  }
  driver::PreparedGraph rows = driver::prepareGraph(R"(graph @f(%h: f64[12, 4], %v: f64[3, 4]) {
  %0 = slice(%h) {dim = 0, start = 1, end = 6, step = 2} : f64[3, 4]
  %1 = copy_(%0, %v) : f64[3, 4]
  return
}
)");
  driver::PreparedGraph column = driver::prepareGraph(R"(graph @f(%h: f64[12, 4], %c: f64[12]) {
  %0 = select(%h) {dim = 1, index = 2} : f64[12]
  %1 = copy_(%0, %c) : f64[12]
  return
}
)");
  CHECK(regions(rows) == std::vector<std::string>{".slice(0, 1, 6, 2)"});
  CHECK(regions(column) == std::vector<std::string>{".select(1, 2)"});
  Tensor h = filled({12, 4}, 0.0);
  driver::Runner(std::move(rows), {}, std::make_unique<FixedResults>(std::vector<Tensor>{v}))
      .run(std::vector<Tensor>{h, v}, {});
  driver::Runner(std::move(column), {}, std::make_unique<FixedResults>(std::vector<Tensor>{c}))
      .run(std::vector<Tensor>{h, c}, {});
  for (int64_t i = 0; i < 12; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      double want = j == 2                ? -static_cast<double>(i + 1)
                    : i % 2 == 1 && i < 6 ? static_cast<double>((i / 2) * 4 + j + 1)
                                          : 0.0;
      CHECK(h.data<double>()[i * 4 + j] == want);
    }
}

TEST_CASE("a value between two writes read at an element still leaves as regions") {
  // h[1] = v; h[2, 0] = h[3, 1] * 2: the second value reads one element of the array as the
  // first write left it, which the program computes there; the writes land after the run
  driver::PreparedGraph g = driver::prepareGraph(R"(graph @f(%h: f64[6, 4], %v: f64[4]) {
  %0 = select(%h) {dim = 0, index = 1} : f64[4]
  %1 = copy_(%0, %v) : f64[4]
  %2 = select(%h) {dim = 0, index = 3} : f64[4]
  %3 = select(%2) {dim = 0, index = 1} : f64[]
  %c = full() {dtype = f64, size = [], value = 2} : f64[]
  %4 = mul(%3, %c) : f64[]
  %5 = select(%h) {dim = 0, index = 2} : f64[4]
  %6 = select(%5) {dim = 0, index = 0} : f64[]
  %7 = copy_(%6, %4) : f64[]
  return
}
)");
  CHECK(regions(g) == std::vector<std::string>{".select(0, 1)", ".select(0, 2).select(0, 0)"});
  Tensor h = filled({6, 4}, 1.0), v = filled({4}, 5.0);
  driver::Runner runner(
      std::move(g), {},
      std::make_unique<FixedResults>(std::vector<Tensor>{filled({4}, 5.0), filled({}, 2.0)}));
  runner.run(std::vector<Tensor>{h, v}, {});
  for (int64_t i = 0; i < 24; ++i)
    CHECK(h.data<double>()[i] == (i / 4 == 1 ? 5.0 : i == 8 ? 2.0 : 1.0));
}

TEST_CASE("a value between two writes read whole keeps the whole write-back") {
  // h[1] = v; h[2] = h[3] * 2: the row read would make the program hold the first write's array
  driver::PreparedGraph g = driver::prepareGraph(R"(graph @f(%h: f64[6, 4], %v: f64[4]) {
  %0 = select(%h) {dim = 0, index = 1} : f64[4]
  %1 = copy_(%0, %v) : f64[4]
  %2 = select(%h) {dim = 0, index = 3} : f64[4]
  %c = full() {dtype = f64, size = [], value = 2} : f64[]
  %4 = mul(%2, %c) : f64[4]
  %5 = select(%h) {dim = 0, index = 2} : f64[4]
  %7 = copy_(%5, %4) : f64[4]
  return
}
)");
  REQUIRE(g.writeBacks.size() == 1);
  CHECK(g.writeBacks[0].region.empty());
}

TEST_CASE("a region out of range fails before any region is written") {
  driver::PipelineOptions options;
  options.inputSymbols = {{2, "i"}};
  driver::PreparedGraph g = driver::prepareGraph(R"(graph @f(%h: f64[6, 4], %v: f64[4], %i: int) {
  %0 = select(%h) {dim = 0, index = 1} : f64[4]
  %1 = copy_(%0, %v) : f64[4]
  %2 = select(%h) {dim = 0, index = i} : f64[4]
  %3 = copy_(%2, %v) : f64[4]
  return
}
)",
                                                 options);
  REQUIRE(regions(g) == std::vector<std::string>{".select(0, 1)", ".select(0, i)"});
  Tensor h = filled({6, 4}, 1.0), v = filled({4}, 5.0);
  driver::Runner runner(std::move(g), {},
                        std::make_unique<FixedResults>(std::vector<Tensor>{v, v}));
  bool raised = false;
  try {
    runner.run(std::vector<Tensor>{h, v, Tensor::scalarTensor(Scalar(int64_t(9)), DType::Int64)},
               ir::SymbolValues{{"i", 9}});
  } catch (const Error &e) {
    raised = e.kind() == ErrorKind::Index;
  }
  CHECK(raised);
  for (int64_t k = 0; k < 24; ++k)
    CHECK(h.data<double>()[k] == 1.0); // row 1 was not written either
}

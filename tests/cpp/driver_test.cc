// The driver pipeline's handling of exported programs: weight nodes become trailing inputs,
// sym_constrain_range nodes become checked ranges, and every misuse is a diagnostic that points
// at the node.

#include "driver/prepared_graph.h"

#include <kiln_catch.h>

using namespace kiln;

namespace {

constexpr const char *kProgram = R"(graph @f(%x: f32[batch, 4]) {
  sym_constrain_range() {max = 64, min = 2, symbol = "batch"}
  %w = weight() {name = "w"} : f32[4]
  %v = weight() {name = "w"} : f32[4]
  %0 = add(%x, %w) : f32[batch, 4]
  %1 = mul(%0, %v) : f32[batch, 4]
  return %1 {out_spec = "%0"}
}
)";

bool has(const std::string &text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

std::string errorOf(const std::string &text) {
  try {
    driver::prepareGraph(text);
  } catch (const std::exception &e) {
    return e.what();
  }
  return "";
}

/// The SpecializationError message bindSymbols gives for these inputs ("" when it binds).
std::string bindError(const driver::PreparedGraph &g, std::vector<Tensor> tensors,
                      std::vector<std::optional<int64_t>> ints) {
  try {
    g.bindSymbols(tensors, ints);
  } catch (const driver::SpecializationError &e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("weights become inputs after the parameters, one per name") {
  driver::PreparedGraph g = driver::prepareGraph(kProgram);
  REQUIRE(g.inputs.size() == 1);
  CHECK(g.inputs[0].name == "x");
  REQUIRE(g.weights.size() == 1);
  CHECK(g.weights[0].name == "w");
  CHECK(g.weights[0].sizes == Shape{4});
  CHECK(g.schedule.program.inputs().size() == 2);
  CHECK(g.outSpec == "%0");
  REQUIRE(g.ranges.size() == 1);
  CHECK(g.ranges[0].symbol == "batch");
  CHECK(g.ranges[0].min == 2);
  CHECK(g.ranges[0].max == 64);
}

TEST_CASE("bindSymbols checks the ranges") {
  driver::PreparedGraph g = driver::prepareGraph(kProgram);
  std::vector<std::optional<int64_t>> ints(1);
  std::vector<Tensor> ok = {Tensor::empty({5, 4}, DType::Float32)};
  CHECK(g.bindSymbols(ok, ints).at("batch") == 5);
  CHECK(has(bindError(g, {Tensor::empty({65, 4}, DType::Float32)}, ints),
            "size batch = 65 is outside its range [2, 64]"));
  CHECK(has(bindError(g, {Tensor::empty({5, 3}, DType::Float32)}, ints),
            "input x has shape [5, 3], the graph expects size 4"));
}

TEST_CASE("misused exported-program nodes are diagnostics at the node") {
  std::string twoTypes = kProgram;
  twoTypes.replace(twoTypes.find("%v = weight() {name = \"w\"} : f32[4]"), 35,
                   "%v = weight() {name = \"w\"} : f64[4]");
  CHECK(has(errorOf(twoTypes), "<kir>:4:3"));
  CHECK(has(errorOf(twoTypes), "weight \"w\" is used with two types"));
  std::string symbolic = R"(graph @f(%x: f32[s0]) {
  %w = weight() {name = "w"} : f32[s0]
  return %w
}
)";
  CHECK(has(errorOf(symbolic), "must have constant sizes"));
  std::string unknown = R"(graph @f(%x: f32[4]) {
  sym_constrain_range() {max = -1, min = 2, symbol = "n"}
  return %x
}
)";
  CHECK(has(errorOf(unknown), "<kir>:2:3"));
  CHECK(has(errorOf(unknown), "no input has a size 'n'"));
  std::string twice = R"(graph @f(%x: f32[n]) {
  sym_constrain_range() {max = -1, min = 2, symbol = "n"}
  sym_constrain_range() {max = 9, min = 2, symbol = "n"}
  return %x
}
)";
  CHECK(has(errorOf(twice), "'n' is constrained twice"));
  std::string empty = R"(graph @f(%x: f32[n]) {
  sym_constrain_range() {max = 1, min = 2, symbol = "n"}
  return %x
}
)";
  CHECK(has(errorOf(empty), "the range [2, 1] is empty"));
}

TEST_CASE("sizes the shape rules assumed equal become one symbol, checked by the binding") {
  driver::PreparedGraph g = driver::prepareGraph(R"(graph @f(%x: f64[s0, s1], %c: f64[s2, s3]) {
  %0 = slice(%x) {start = 2} : f64[s0 - 2, s1]
  %1 = mul(%c, %0) : f64[s2, s3]
  return %1
}
)");
  REQUIRE(g.inputs.size() == 2);
  CHECK(g.inputs[1].sizes[0].str() == "s0 - 2");
  CHECK(g.inputs[0].sizes[1] == g.inputs[1].sizes[1]);
  std::vector<std::optional<int64_t>> ints(2);
  std::vector<Tensor> ok = {Tensor::empty({7, 5}, DType::Float64),
                            Tensor::empty({5, 5}, DType::Float64)};
  CHECK(g.bindSymbols(ok, ints).at("s0") == 7);
  std::vector<Tensor> wrong = {Tensor::empty({7, 5}, DType::Float64),
                               Tensor::empty({4, 5}, DType::Float64)};
  CHECK(has(bindError(g, wrong, ints),
            "input c has shape [4, 5], the graph expects size s0 - 2 = 5 in dim 0"));
}

TEST_CASE("rebindInt checks again what mentions the index, and only that") {
  driver::PipelineOptions options;
  options.inputSymbols = {{1, "i"}};
  driver::PreparedGraph g = driver::prepareGraph(R"(graph @f(%x: f64[n], %i: int) {
  %0 = mul(%x, %i) : f64[n]
  return %0
}
)",
                                                 options);
  g.assumed.push_back(ir::SymRelation::parse("i + 2 < n"));
  g.assumed.push_back(ir::SymRelation::parse("n >= 3"));
  g.ranges.push_back({"i", 0, 50});
  std::vector<Tensor> tensors{Tensor::empty({10}, DType::Float64),
                              Tensor::scalarTensor(Scalar(int64_t{0}), DType::Int64)};
  std::vector<std::optional<int64_t>> ints{std::nullopt, 0};
  ir::SymbolValues values = g.bindSymbols(tensors, ints);
  std::optional<driver::IntRebind> plan = g.planIntRebind(1);
  REQUIRE(plan);
  CHECK(plan->symbol == "i");
  CHECK(plan->relations.size() == 1); // `n >= 3` does not read the index
  CHECK(plan->ranges.size() == 1);
  g.rebindInt(*plan, values, 7, ints);
  CHECK(values.at("i") == 7);
  CHECK(values.at("n") == 10);
  CHECK_THROWS_AS(g.rebindInt(*plan, values, 8, ints), driver::SpecializationError);  // 10 < 10
  CHECK_THROWS_AS(g.rebindInt(*plan, values, -1, ints), driver::SpecializationError); // range

  // A tensor whose size reads the index symbol must be bound anew on every change.
  driver::PreparedGraph sized = driver::prepareGraph(R"(graph @g(%x: f64[i], %i: int) {
  %0 = mul(%x, %i) : f64[i]
  return %0
}
)",
                                                     options);
  CHECK_FALSE(sized.planIntRebind(1).has_value());
}

// The graph passes: shape rules with symbolic sizes (ir/shape_rules.h) and the shape-infer,
// functionalize, const-fold and simplify passes, plus the pass manager's timing output.
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/shape_rules.h"
#include "ir/verifier.h"
#include "passes/const_fold.h"
#include "passes/functionalize.h"
#include "passes/pass_manager.h"
#include "passes/shape_infer.h"
#include "passes/simplify.h"

#include <kiln_catch.h>
#include <sstream>

using namespace kiln;
using namespace kiln::ir;
using namespace kiln::passes;

namespace {

SymInt sym(const char *name) { return SymInt::symbol(name); }

/// A graph with inputs of the given types and one node of `op` over all of them; the result is
/// typed `given` (what a capture would have written).
struct OneNode {
  Graph g{"t"};
  Node *node;
  OneNode(OpKind op, std::vector<ValueType> inputs, Attributes attrs, ValueType given) {
    std::vector<Value *> operands;
    for (ValueType &t : inputs)
      operands.push_back(g.addInput(std::move(t), "a" + std::to_string(operands.size())));
    node = g.create(op, operands, std::move(attrs), {std::move(given)});
    g.setOutputs({node->result()});
  }
  /// The inferred result type as .kir text, or the rule's error message.
  std::string infer(SymAssumptions *assumed = nullptr) const {
    try {
      std::optional<ValueType> t = inferResultType(*node, assumed);
      return t ? printType(*t) : "as given";
    } catch (const Error &e) {
      return e.what();
    }
  }
};

TensorMeta f32(std::vector<SymInt> sizes) { return TensorMeta::contiguous(DType::Float32, sizes); }
TensorMeta of(DType dt, std::vector<SymInt> sizes) { return TensorMeta::contiguous(dt, sizes); }
TensorMeta strided(std::vector<SymInt> sizes, std::vector<SymInt> strides) {
  return TensorMeta{DType::Float32, std::move(sizes), std::move(strides), {}};
}

std::string relations(const SymAssumptions &a) {
  std::string out;
  for (const SymRelation &r : a.relations())
    out += (out.empty() ? "" : "; ") + r.str();
  return out;
}

/// Parses `text`, runs `pipeline` (verifying after each pass) and prints the result.
std::string run(std::string_view pipeline, std::string_view text) {
  std::unique_ptr<Graph> g = parseGraph(text);
  PassManager pm;
  pm.addPipeline(pipeline);
  pm.run(*g);
  return printGraph(*g);
}

} // namespace

TEST_CASE("broadcasting symbolic sizes keeps the left one and records equalities",
          "[passes][shape]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  SymAssumptions assumed;
  std::vector<SymInt> a{s0, 1}, b{1, s1}, c{s1, s0}, d{s0};
  CHECK(broadcastShapes({a, b}, &assumed) == std::vector<SymInt>{s0, s1});
  CHECK(broadcastShapes({a, d}, &assumed) == std::vector<SymInt>{s0, s0});
  CHECK(assumed.empty()); // 1 with anything, s0 with s0: nothing to assume
  CHECK(broadcastShapes({b, c}, &assumed) == std::vector<SymInt>{s1, s1});
  CHECK(relations(assumed) == "s1 == s0");
  std::vector<SymInt> four{4};
  CHECK(broadcastShapes({d, four}, &assumed) == std::vector<SymInt>{s0});
  CHECK(relations(assumed) == "s1 == s0; s0 == 4");
  std::vector<SymInt> shifted{s0 + 1};
  CHECK_THROWS_WITH(broadcastShapes({d, shifted}),
                    "operand shapes do not broadcast: s0 vs s0 + 1 in dim -1");
}

TEST_CASE("shape rules compute symbolic sizes for every op class", "[passes][shape]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  CHECK(OneNode(OpKind::Add, {f32({s0, 1}), f32({s1})}, {}, f32({2, 3})).infer() == "f32[s0, s1]");
  CHECK(OneNode(OpKind::Sum, {f32({s0, s1, 4})}, {{"dim", {-1, 0}}, {"keepdim", true}},
                f32({1, 3, 1}))
            .infer() == "f32[1, s1, 1]");
  CHECK(OneNode(OpKind::Argmax, {f32({s0, 4})}, {{"dim", 1}}, of(DType::Int64, {2})).infer() ==
        "i64[s0]");
  CHECK(OneNode(OpKind::Softmax, {f32({s0, 4})}, {{"dim", -1}}, f32({2, 4})).infer() ==
        "f32[s0, 4]");
  CHECK(OneNode(OpKind::Cat, {f32({s0, 4}), f32({s1, 4})}, {}, f32({5, 4})).infer() ==
        "f32[s0 + s1, 4]");
  // matmul: 1-d operands drop their dim, batch dims broadcast.
  CHECK(OneNode(OpKind::Matmul, {f32({s0}), f32({s1, s0, 3})}, {}, f32({2, 3})).infer() ==
        "f32[s1, 3]");
  CHECK(OneNode(OpKind::Matmul, {f32({s1, 2, s0}), f32({s0})}, {}, f32({2, 2})).infer() ==
        "f32[s1, 2]");
  CHECK(OneNode(OpKind::Conv2d, {f32({s0, 3, s1, 16}), f32({8, 3, 3, 3})},
                {{"padding", {1}}, {"stride", {2}}}, f32({1, 8, 1, 8}))
            .infer() == "f32[s0, 8, (s1 + 1) floordiv 2, 8]");
  CHECK(
      OneNode(OpKind::Embedding, {of(DType::Int64, {s0}), f32({10, 4})}, {}, f32({2, 4})).infer() ==
      "f32[s0, 4]");
  CHECK(OneNode(OpKind::SymSize, {f32({s0})}, {{"dim", 0}}, ScalarType::Int).infer() == "int");
  CHECK(OneNode(OpKind::Call, {f32({s0})}, {{"target", "f"}}, f32({2})).infer() == "as given");
  CHECK(OneNode(OpKind::Linear, {f32({s0, 7}), f32({4, 8})}, {}, f32({2, 4})).infer() ==
        "linear input has 7 features but the weight expects 8");
}

TEST_CASE("expanding a run-time size to a constant records the equality", "[passes][shape]") {
  SymInt s0 = sym("s0");
  // Meta LLaMA's repeat_kv with the read length baked: the kernel is right only when s0 + 1 is 6,
  // which the run-time check of the assumption makes sure of.
  SymAssumptions assumed;
  CHECK(OneNode(OpKind::Expand, {f32({1, s0 + 1, 2, 1, 8})}, {{"size", {1, 6, 2, 2, 8}}},
                f32({1, 6, 2, 2, 8}))
            .infer(&assumed) == "f32[1, 6, 2, 2, 8] strided [s0*16 + 16, 16, 8, 0, 1]");
  CHECK(relations(assumed) == "s0 + 1 == 6");
  SymAssumptions none; // size-1 dims, -1 and equal sizes assume nothing
  CHECK(OneNode(OpKind::Expand, {f32({s0, 1})}, {{"size", {-1, 4}}}, f32({2, 4})).infer(&none) ==
        "f32[s0, 4] strided [1, 0]");
  CHECK(none.empty());
}

TEST_CASE("view rules compute sizes and the strides eager kiln gives views", "[passes][shape]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  // -1 is the element count over the other sizes; an inexact quotient is an assumption.
  CHECK(OneNode(OpKind::View, {f32({s0, 8})}, {{"shape", {-1, 4}}}, f32({4, 4})).infer() ==
        "f32[s0*2, 4]");
  SymAssumptions assumed;
  CHECK(
      OneNode(OpKind::Reshape, {f32({s0, 5})}, {{"shape", {3, -1}}}, f32({3, 5})).infer(&assumed) ==
      "f32[3, s0 + (s0*2) floordiv 3]");
  CHECK(relations(assumed) == "(s0*2) mod 3 == 0"); // s0*5 mod 3, canonically
  // Merging dims that are contiguous with each other views; a transposed pair needs a copy.
  CHECK(OneNode(OpKind::View, {strided({2, s0, 4}, {s0 * 8, 4, 1})}, {{"shape", {2, -1}}},
                f32({2, 8}))
            .infer() == "f32[2, s0*4] strided [s0*8, 1]");
  CHECK(OneNode(OpKind::View, {strided({4, 6}, {1, 4})}, {{"shape", {2, 2, 6}}}, f32({2, 2, 6}))
            .infer() == "f32[2, 2, 6] strided [2, 1, 4]");
  CHECK(OneNode(OpKind::Reshape, {strided({4, 6}, {1, 4})}, {{"shape", {24}}}, f32({24})).infer() ==
        "f32[24]");
  CHECK(OneNode(OpKind::View, {strided({4, 6}, {1, 4})}, {{"shape", {24}}}, f32({24})).infer() ==
        "cannot view [4, 6] strided [1, 4] as [24] without a copy (use reshape)");
  CHECK(OneNode(OpKind::Expand, {f32({s0, 1})}, {{"size", std::vector<SymInt>{3, -1, s1}}},
                f32({3, 2, 2}))
            .infer() == "f32[3, s0, s1] strided [0, 1, 0]");
  CHECK(OneNode(OpKind::Unsqueeze, {f32({s0, 4})}, {{"dim", 1}}, f32({2, 1, 4})).infer() ==
        "f32[s0, 1, 4]");
  CHECK(OneNode(OpKind::Squeeze, {f32({s0, 1, 4})}, {}, f32({2, 4})).infer() == "f32[s0, 4]");
  // Symbolic slice bounds are assumed in range; constant ones on constant sizes clamp.
  assumed = {};
  CHECK(
      OneNode(OpKind::Slice, {f32({s0, 4})}, {{"end", floorDiv(s0, 2)}, {"start", 1}}, f32({2, 4}))
          .infer(&assumed) == "f32[s0 floordiv 2 - 1, 4]");
  CHECK(relations(assumed) == "1 <= s0 floordiv 2; s0 floordiv 2 <= s0");
  CHECK(OneNode(OpKind::Slice, {f32({s0, 10})}, {{"dim", 1}, {"start", -4}, {"end", 100}},
                f32({2, 4}))
            .infer() == "f32[s0, 4] strided [10, 1]");
  CHECK(OneNode(OpKind::Select, {f32({s0, 4})}, {{"dim", 1}, {"index", -1}}, f32({2})).infer() ==
        "f32[s0] strided [4]");
}

TEST_CASE("shape-infer retypes a graph and names the node on errors", "[passes][shape-infer]") {
  std::unique_ptr<Graph> g = parseGraph("graph @f(%x: i64[s0, 4], %y: f32[s1, 4]) {\n"
                                        "  %c = constant() {value = 0.5} : float\n"
                                        "  %0 = mul(%x, %c) : f32[2, 4]\n"
                                        "  %1 = add(%0, %y) : f32[2, 4]\n"
                                        "  return %1\n"
                                        "}\n");
  ShapeInference r = inferShapes(*g);
  CHECK(r.changed);
  CHECK(relations(r.assumed) == "s0 == s1");
  CHECK(printType(g->outputs()[0]->type()) == "f32[s0, 4]");
  CHECK_FALSE(inferShapes(*g).changed); // a fixpoint

  // dtypes are recomputed too (the verifier would reject these, so build the graph directly),
  // following the default float dtype for FloatResult ops of integers.
  OneNode div(OpKind::Div, {of(DType::Int32, {3}), of(DType::Int32, {3})}, {},
              of(DType::Int32, {3}));
  setDefaultFloatDType(DType::Float64);
  CHECK(div.infer() == "f64[3]");
  setDefaultFloatDType(DType::Float32);
  CHECK(div.infer() == "f32[3]");
  OneNode weak(OpKind::Mul, {of(DType::Int16, {3}), ScalarType::Int}, {}, of(DType::Int64, {3}));
  CHECK(weak.infer() == "i16[3]");

  std::unique_ptr<Graph> bad = parseGraph("graph @f(%x: f32[s0, 4], %y: f32[s0, 4]) {\n"
                                          "  %0 = slice(%x) {start = 2} : f32[3, 4]\n"
                                          "  %1 = add(%y, %0) : f32[3, 4]\n"
                                          "  return %1\n"
                                          "}\n");
  try {
    inferShapes(*bad);
    FAIL("expected a diagnostic");
  } catch (const DiagnosticError &e) {
    CHECK(e.diagnostic().message == "%1 = add: operand shapes do not broadcast: s0 vs s0 - 2 in "
                                    "dim -2");
    CHECK(e.diagnostic().node == bad->returnNode()->operand(0)->definingNode());
  }
}

TEST_CASE("an exact symbolic quotient is a constant", "[passes][symint]") {
  SymInt s0 = sym("s0");
  CHECK(floorDiv(s0 * 8, s0 * 2) == SymInt(4));
  CHECK(floorDiv(s0 * 8, s0 * 2).str() == "4");
  CHECK(floorDiv(s0 * s0 * 6 + s0 * 3, s0 * 3).str() == "s0*2 + 1");
}

TEST_CASE("functionalize is idempotent and leaves functional graphs alone",
          "[passes][functionalize]") {
  const char *text = "graph @f(%x: f32[4, 8], %y: f32[8]) {\n"
                     "  %0 = select(%x) {dim = 0, index = -1} : f32[8]\n"
                     "  %1 = copy_(%0, %y) : f32[8]\n"
                     "  %2 = sum(%x) : f32[]\n"
                     "  return %2\n"
                     "}\n";
  std::string once = run("functionalize,dce", text);
  CHECK(once == "graph @f(%x: f32[4, 8], %y: f32[8]) {\n"
                "  %0 = select_scatter(%x, %y) {dim = 0, index = -1} : f32[4, 8]\n"
                "  %1 = sum(%0) : f32[]\n"
                "  %2 = copy_(%x, %0) : f32[4, 8]\n"
                "  return %1\n"
                "}\n");
  std::unique_ptr<Graph> g = parseGraph(once);
  CHECK_FALSE(functionalize(*g));
  CHECK(printGraph(*g) == once);
  CHECK(isMutation(*g->nodes()[4])); // the write-back copy_
  std::unique_ptr<Graph> pure = parseGraph("graph @f(%x: f32[4]) {\n"
                                           "  %0 = call(%x) {target = \"kiln.Tensor.relu\"} : "
                                           "f32[4]\n"
                                           "  return %0\n"
                                           "}\n");
  CHECK_FALSE(functionalize(*pure));
  CHECK_FALSE(isMutation(*pure->nodes()[1]));
}

TEST_CASE("const-fold rounds to the result dtype like the kernels", "[passes][const-fold]") {
  std::string out = run("const-fold,dce", "graph @f() {\n"
                                          "  %a = constant() {value = 200} : u8[]\n"
                                          "  %b = constant() {value = 100} : u8[]\n"
                                          "  %0 = add(%a, %b) : u8[]\n"
                                          "  %1 = neg(%b) : u8[]\n"
                                          "  %h = constant() {value = 1.0} : bf16[]\n"
                                          "  %t = constant() {value = 0.001} : float\n"
                                          "  %2 = add(%h, %t) : bf16[]\n"
                                          "  %3 = cast(%a) {dtype = i8} : i8[]\n"
                                          "  return %0, %1, %2, %3\n"
                                          "}\n");
  CHECK(out == "graph @f() {\n"
               "  %0 = constant() {value = 44} : u8[]\n"
               "  %1 = constant() {value = 156} : u8[]\n"
               "  %2 = constant() {value = 1.0} : bf16[]\n"
               "  %3 = constant() {value = -56} : i8[]\n"
               "  return %0, %1, %2, %3\n"
               "}\n");
  std::unique_ptr<Graph> g = parseGraph(out);
  CHECK_FALSE(foldConstants(*g));
  CHECK_FALSE(simplify(*g));
}

TEST_CASE("the pass manager times passes", "[passes][pass-manager]") {
  std::ostringstream log;
  PassManagerOptions options;
  options.timePasses = true;
  options.dumpStream = &log;
  PassManager pm(options);
  pm.addPipeline("shape-infer,simplify");
  std::unique_ptr<Graph> g = parseGraph("graph @f(%x: f32[4]) {\n  return %x\n}\n");
  pm.run(*g);
  std::string text = log.str();
  CHECK(text.starts_with("// -----// Pass timing: @f //----- //\n"));
  CHECK(text.find(" ms  shape-infer\n") != std::string::npos);
  CHECK(text.find(" ms  simplify\n") != std::string::npos);
  CHECK(text.ends_with(" ms  total\n"));
}

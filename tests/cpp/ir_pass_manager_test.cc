#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/pass_manager.h"

#include <kiln_catch.h>
#include <sstream>

using namespace kiln;
using namespace kiln::ir;
using namespace kiln::passes;

namespace {
/// Parses `body` as the body of `graph @f(%x: f32[4], %y: f32[4])`, runs `pipeline` and returns
/// the printed body.
std::string runPipeline(std::string_view pipeline, std::string_view body) {
  std::unique_ptr<Graph> g =
      parseGraph("graph @f(%x: f32[4], %y: f32[4]) {\n" + std::string(body) + "}\n");
  PassManager pm;
  pm.addPipeline(pipeline);
  pm.run(*g);
  std::string text = printGraph(*g);
  return text.substr(text.find('\n') + 1, text.size() - text.find('\n') - 3);
}

/// A pass that breaks SSA, to check that the manager's verifier catches it.
class BreakSsa final : public Pass {
public:
  std::string_view name() const override { return "break-ssa"; }
  bool run(Graph &g) override {
    std::vector<Node *> nodes = g.nodes();
    g.moveBefore(nodes[2], nodes[1]); // the user before its operand's producer
    return true;
  }
};
} // namespace

TEST_CASE("dce deletes dead chains but keeps inputs and side effects", "[passes][dce]") {
  CHECK(runPipeline("dce", "  %0 = exp(%x) : f32[4]\n"
                           "  %1 = neg(%0) : f32[4]\n"
                           "  %2 = relu(%y) : f32[4]\n"
                           "  %3 = copy_(%x, %y) : f32[4]\n"
                           "  return %2\n") == "  %0 = relu(%y) : f32[4]\n"
                                               "  %1 = copy_(%x, %y) : f32[4]\n"
                                               "  return %0\n");
  std::unique_ptr<Graph> g = parseGraph("graph @f(%x: f32[4]) {\n  return %x\n}\n");
  CHECK_FALSE(eliminateDeadCode(*g));
}

TEST_CASE("cse merges equal pure nodes, commutative operands in any order", "[passes][cse]") {
  CHECK(runPipeline("cse", "  %0 = mul(%x, %y) : f32[4]\n"
                           "  %1 = mul(%y, %x) : f32[4]\n"
                           "  %2 = sub(%x, %y) : f32[4]\n"
                           "  %3 = sub(%y, %x) : f32[4]\n"
                           "  %4 = exp(%0) : f32[4]\n"
                           "  %5 = exp(%1) : f32[4]\n"
                           "  return %2, %3, %4, %5\n") == "  %0 = mul(%x, %y) : f32[4]\n"
                                                           "  %1 = sub(%x, %y) : f32[4]\n"
                                                           "  %2 = sub(%y, %x) : f32[4]\n"
                                                           "  %3 = exp(%0) : f32[4]\n"
                                                           "  return %1, %2, %3, %3\n");
}

TEST_CASE("cse keeps nodes whose attributes, types or inputs' state differ", "[passes][cse]") {
  std::string body = "  %0 = sum(%x) {dim = [0]} : f32[]\n"
                     "  %1 = sum(%x) {dim = [0], keepdim = true} : f32[1]\n"
                     "  %2 = cast(%x) {dtype = f16} : f16[4]\n"
                     "  %3 = cast(%x) {dtype = f64} : f64[4]\n"
                     "  %4 = constant() {value = 0.0} : f32[]\n"
                     "  %5 = constant() {value = -0.0} : f32[]\n"
                     "  %6 = exp(%x) : f32[4]\n"
                     "  %7 = copy_(%x, %y) : f32[4]\n"
                     "  %8 = exp(%x) : f32[4]\n"
                     "  return %0, %1, %2, %3, %4, %5, %6, %8\n";
  CHECK(runPipeline("cse", body) == body);
  std::unique_ptr<Graph> g = parseGraph("graph @f(%x: f32[4]) {\n" +
                                        body.substr(0, body.find('\n') + 1) + "  return %0\n}\n");
  CHECK_FALSE(eliminateCommonSubexpressions(*g));
}

TEST_CASE("pipelines run in order and fixpoint repeats", "[passes][pipeline]") {
  std::string body = "  %0 = exp(%x) : f32[4]\n"
                     "  %1 = exp(%x) : f32[4]\n"
                     "  %2 = add(%0, %1) : f32[4]\n"
                     "  %3 = neg(%2) : f32[4]\n"
                     "  return %2\n";
  std::string merged = "  %0 = exp(%x) : f32[4]\n"
                       "  %1 = add(%0, %0) : f32[4]\n"
                       "  return %1\n";
  CHECK(runPipeline("cse,dce", body) == merged);
  CHECK(runPipeline(" dce , cse ", body) == merged);
  CHECK(runPipeline("fixpoint(cse,dce)", body) == merged);
  CHECK(runPipeline("", body) == body);
  CHECK_THROWS_WITH(parsePipeline("dce,frob"),
                    "unknown pass 'frob' (known passes: const-fold, cse, dce, functionalize, "
                    "shape-infer, simplify, fixpoint(...))");
  CHECK_THROWS_WITH(parsePipeline("fixpoint(dce"), Catch::Contains("unmatched '('"));
  CHECK_THROWS_WITH(parsePipeline("dce,,cse"), Catch::Contains("has an empty entry"));
  CHECK(registeredPasses().size() == 6);
}

TEST_CASE("the manager verifies and prints after passes", "[passes][pipeline]") {
  std::unique_ptr<Graph> g = parseGraph("graph @f(%x: f32[4]) {\n"
                                        "  %0 = exp(%x) : f32[4]\n"
                                        "  %1 = neg(%0) : f32[4]\n"
                                        "  return %1\n"
                                        "}\n");
  std::ostringstream dump;
  PassManagerOptions options;
  options.printAfter = {"dce"};
  options.dumpStream = &dump;
  PassManager pm(options);
  pm.addPipeline("cse,dce");
  CHECK_FALSE(pm.run(*g));
  CHECK(dump.str() == "// -----// IR Dump After dce //----- //\n" + printGraph(*g));

  PassManager broken;
  broken.addPass(std::make_unique<BreakSsa>());
  CHECK_THROWS_WITH(broken.run(*g), Catch::Contains("after pass 'break-ssa': %0 = neg: operand "
                                                    "0 (%1) is used before it is defined"));
}

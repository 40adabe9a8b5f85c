#include "passes/pass_manager.h"

#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/const_fold.h"
#include "passes/cse.h"
#include "passes/dce.h"
#include "passes/functionalize.h"
#include "passes/shape_infer.h"
#include "passes/simplify.h"
#include "runtime/error.h"

#include <chrono>
#include <fmt/format.h>
#include <ostream>

namespace kiln::passes {

namespace {

// The registry: add a row here for each new pass.
constexpr PassInfo kPasses[] = {
    {"const-fold", "evaluate elementwise ops and casts of constants, in the result dtype",
     createConstFoldPass},
    {"cse", "merge pure nodes that compute the same values", createCsePass},
    {"dce", "delete pure nodes whose results are unused", createDcePass},
    {"functionalize", "turn copy_ and in-place calls into data flow; write mutated inputs back",
     createFunctionalizePass},
    {"shape-infer", "recompute result types (dtype, symbolic sizes, strides) from the operands",
     createShapeInferPass},
    {"simplify",
     "algebraic identities that keep every result bit (x*1, --x, transpose pairs), tiled "
     "slice_scatter sums as cat",
     createSimplifyPass},
};

constexpr int kMaxFixpointRounds = 32;

/// Repeats its passes until a whole round changes nothing.
class FixpointPass final : public Pass {
public:
  FixpointPass(std::string name, std::vector<std::unique_ptr<Pass>> passes)
      : name_(std::move(name)), passes_(std::move(passes)) {}
  std::string_view name() const override { return name_; }
  bool run(ir::Graph &graph) override {
    bool changed = false;
    for (int round = 0; round < kMaxFixpointRounds; ++round) {
      bool roundChanged = false;
      for (auto &pass : passes_)
        roundChanged |= pass->run(graph);
      if (!roundChanged)
        return changed;
      changed = true;
    }
    return changed;
  }

private:
  std::string name_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ')
    s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ')
    s.remove_suffix(1);
  return s;
}

// Splits at the commas that are not inside parentheses.
std::vector<std::string_view> splitTopLevel(std::string_view pipeline) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= pipeline.size(); ++i) {
    char c = i < pipeline.size() ? pipeline[i] : ',';
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    KILN_CHECK_KIND(Value, depth >= 0, "pass pipeline '{}' has an unmatched ')'", pipeline);
    if (c == ',' && depth == 0) {
      parts.push_back(trim(pipeline.substr(start, i - start)));
      start = i + 1;
    }
  }
  KILN_CHECK_KIND(Value, depth == 0, "pass pipeline '{}' has an unmatched '('", pipeline);
  return parts;
}

} // namespace

std::span<const PassInfo> registeredPasses() { return kPasses; }

std::unique_ptr<Pass> createPass(std::string_view name) {
  std::string known;
  for (const PassInfo &info : kPasses) {
    if (info.name == name)
      return info.create();
    known += (known.empty() ? "" : ", ") + std::string(info.name);
  }
  fail(ErrorKind::Value, "unknown pass '{}' (known passes: {}, fixpoint(...))", name, known);
}

std::vector<std::unique_ptr<Pass>> parsePipeline(std::string_view pipeline) {
  std::vector<std::unique_ptr<Pass>> passes;
  if (trim(pipeline).empty())
    return passes;
  for (std::string_view part : splitTopLevel(pipeline)) {
    KILN_CHECK_KIND(Value, !part.empty(), "pass pipeline '{}' has an empty entry", pipeline);
    constexpr std::string_view kFix = "fixpoint(";
    if (part.starts_with(kFix) && part.ends_with(")")) {
      std::string_view inner = part.substr(kFix.size(), part.size() - kFix.size() - 1);
      passes.push_back(std::make_unique<FixpointPass>(std::string(part), parsePipeline(inner)));
    } else {
      passes.push_back(createPass(part));
    }
  }
  return passes;
}

void PassManager::addPipeline(std::string_view pipeline) {
  for (auto &pass : parsePipeline(pipeline))
    addPass(std::move(pass));
}

bool PassManager::run(ir::Graph &graph) {
  bool changed = false;
  std::vector<double> millis;
  for (auto &pass : passes_) {
    auto start = std::chrono::steady_clock::now();
    changed |= pass->run(graph);
    millis.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    if (options_.verifyEach) {
      if (std::optional<ir::Diagnostic> d = ir::verify(graph)) {
        d->message = "after pass '" + std::string(pass->name()) + "': " + d->message;
        throw ir::DiagnosticError(std::move(*d));
      }
    }
    if (options_.printAfterAll || options_.printAfter.count(pass->name())) {
      KILN_CHECK(options_.dumpStream != nullptr, "PassManager: no dumpStream to print IR to");
      *options_.dumpStream << "// -----// IR Dump After " << pass->name() << " //----- //\n"
                           << ir::printGraph(graph);
    }
  }
  timings_.clear();
  for (size_t i = 0; i < passes_.size(); ++i)
    timings_.emplace_back(std::string(passes_[i]->name()), millis[i]);
  if (options_.timePasses) {
    KILN_CHECK(options_.dumpStream != nullptr, "PassManager: no dumpStream to print timings to");
    double total = 0;
    *options_.dumpStream << fmt::format("// -----// Pass timing: @{} //----- //\n", graph.name());
    for (size_t i = 0; i < passes_.size(); ++i) {
      *options_.dumpStream << fmt::format("// {:10.3f} ms  {}\n", millis[i], passes_[i]->name());
      total += millis[i];
    }
    *options_.dumpStream << fmt::format("// {:10.3f} ms  total\n", total);
  }
  return changed;
}

} // namespace kiln::passes

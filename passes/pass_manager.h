#pragma once
/// PassManager: runs a pipeline of passes on a graph, verifying and printing between them.
///
/// The registry is one explicit list in pass_manager.cc (no static initializers: they vanish
/// under Bazel's linking). A pipeline is a comma-separated list of pass names; `fixpoint(a,b)`
/// repeats its passes until none changes the graph (XLA's HloPassFix), at most 32 rounds.
/// After each pass the manager runs the verifier (unless turned off) and prints the IR when
/// asked, under a `// -----// IR Dump After NAME //----- //` header, which is a .kir comment, so
/// a dump can be fed back to kiln-opt. With `timePasses` it ends with a `// ...` comment table
/// of each pass's wall time (verification and printing not included).

#include "passes/pass.h"

#include <iosfwd>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace kiln::passes {

/// One row of the registry.
struct PassInfo {
  std::string_view name;
  std::string_view summary;
  std::unique_ptr<Pass> (*create)();
};

/// Every registered pass, in the order kiln-opt --help lists them.
std::span<const PassInfo> registeredPasses();
/// Builds the pass named `name`; throws kiln::Error naming the known passes otherwise.
std::unique_ptr<Pass> createPass(std::string_view name);
/// Builds the passes of a pipeline like `dce,cse` or `fixpoint(cse,dce)`; throws kiln::Error
/// on an unknown name or malformed text.
std::vector<std::unique_ptr<Pass>> parsePipeline(std::string_view pipeline);

struct PassManagerOptions {
  /// Run the verifier after every pass; a failure throws ir::DiagnosticError naming the pass.
  bool verifyEach = true;
  /// Print the IR after every pass.
  bool printAfterAll = false;
  /// Print the IR after the passes with these names.
  std::set<std::string, std::less<>> printAfter;
  /// Print how long each pass took (wall time, after the last pass), like LLVM's -time-passes.
  bool timePasses = false;
  /// Where IR dumps and timings go; required when anything is to be printed.
  std::ostream *dumpStream = nullptr;
};

class PassManager {
public:
  explicit PassManager(PassManagerOptions options = {}) : options_(std::move(options)) {}
  void addPass(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  /// Appends the passes of `pipeline` (see parsePipeline).
  void addPipeline(std::string_view pipeline);
  /// Runs the passes in order on `graph`; returns true when any changed it.
  bool run(ir::Graph &graph);
  /// (pass name, wall milliseconds) of each pass of the last run, in order (KILN_LOGS=perf).
  const std::vector<std::pair<std::string, double>> &lastTimings() const { return timings_; }

private:
  PassManagerOptions options_;
  std::vector<std::pair<std::string, double>> timings_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

} // namespace kiln::passes

#pragma once
/// The one pipeline a `.kir` graph becomes a program through, shared by kiln.compile's backend
/// (frontend/csrc/bind_compiler.cc), `kilnc` and the AOT runtime (aot/):
///
///   parse (or a graph built in memory) → shape-infer → verify → sizes assumed equal spelled with
///   one symbol (unifyAssumedSizes) → exported-program nodes out of the
///   graph (`weight` nodes become trailing inputs, `sym_constrain_range` nodes become assumptions)
///   → graph passes → lower (passes/lower) → schedule (passes/schedule)
///
/// and the contract at the program's boundary: what each input must be (InputSpec, WeightSpec,
/// the assumptions) and how a call's inputs bind the size symbols (bindSymbols). The same text
/// always gives the same program, so a library compiled ahead of time and the runtime that
/// loads it agree on every kernel (see aot/README.md).
///
/// [Note: specialization checks]
/// A program assumes what its .kir text says about its inputs: dtypes, ranks, sizes as symbolic
/// expressions, the strides of non-contiguous inputs, the equalities shape-infer assumed
/// (`s0 == s1` where two symbolic sizes broadcast; where one side is an input's own symbol, the
/// input's size is spelled with the other side instead) and the ranges of `sym_constrain_range`. A
/// call binds the symbols from the input shapes (a size that is exactly a symbol, or an
/// expression in one unbound symbol that can be solved: `s0*2`), from scalar inputs named as
/// symbols, then checks every size, stride and assumption; one that breaks any of them throws
/// SpecializationError before anything runs.

#include "ir/diagnostic.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "ir/shape_rules.h"
#include "ir/sym_int.h"
#include "passes/lower/region.h"
#include "passes/pass_manager.h"
#include "passes/schedule/schedule.h"
#include "runtime/tensor.h"

#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::driver {

/// A node that lowering declines (an opaque `call`, an op without a lowering): the message names
/// the node, its op and the user's source line.
struct LoweringDeclined : std::runtime_error {
  explicit LoweringDeclined(ir::Diagnostic d) : std::runtime_error(d.str()), diagnostic(d) {}
  ir::Diagnostic diagnostic; ///< positioned at the node (its line, or its builder number)
};

/// Inputs that break what the program assumed (see [Note: specialization checks]).
struct SpecializationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Where prepareGraph stops: after reading the program's boundary (inputs, weights, outputs,
/// ranges; no passes), after lowering (whether every node lowers), or with the schedule.
enum class PipelineEnd : uint8_t { Interface, Lowered, Scheduled };

struct PipelineOptions {
  PipelineEnd until = PipelineEnd::Scheduled;
  std::string filename = "<kir>";
  /// Graph passes; nullopt: defaultPipeline().
  std::optional<std::string> pipeline;
  bool fuse = true;
  /// {input index: SymInt text} for int inputs: a symbol is bound from the int, an expression
  /// or constant is checked against it.
  std::map<int, std::string> inputSymbols;
  /// With until == Lowered: find every node lowering declines (PreparedGraph::declines) instead
  /// of throwing LoweringDeclined at the first.
  bool collectDeclines = false;
  /// IR dumps and timing (kiln-opt --print-ir-after, --time-passes): the graph passes' options,
  /// where `printAfter` may also name the stages `lower` (the loop program as lowered) and
  /// `schedule` (the scheduled program), and timing adds those stages' times.
  passes::PassManagerOptions dumps;
};

enum class ValueKind : uint8_t { Tensor, Int, Float, Bool };

/// A graph parameter as callers see it.
struct InputSpec {
  std::string name;
  ValueKind kind = ValueKind::Tensor;
  DType dtype = DType::Float32; ///< the program buffer's dtype (int64/float64/bool for scalars)
  std::vector<ir::SymInt> sizes, strides;
  bool contiguous = true;
  /// An int input whose value the graph used: a symbol (bound from it) or an expression or
  /// constant (checked against it).
  std::optional<ir::SymInt> value;
};

/// A `weight` node: bound after the inputs, from the weights file.
struct WeightSpec {
  std::string name; ///< the safetensors key
  DType dtype = DType::Float32;
  Shape sizes;
};

struct OutputSpec {
  std::string name; ///< the value's name as the printer writes it, without `%` ("79", "x")
  ValueKind kind = ValueKind::Tensor;
  DType dtype = DType::Float32;
  std::vector<ir::SymInt> sizes;
  int aliasOf = -1; ///< the graph input this output is, or -1
};

/// An input the program mutates (an in-place op on an argument): program result `result` (they
/// follow the callers' outputs) is the input's new value, which the runner copies into it after
/// the call, once. With a `region`, the result is the value of that region only (`h[t, 0] = v`:
/// select t of dim 0, then select 0), written in place; an input can have several, applied in
/// order.
struct WriteBack {
  int input = 0;
  int result = 0;
  std::vector<passes::lower::Region> region;
};

/// One region of an input and the value a program writes there (WriteBack::region).
struct RegionWrite {
  std::vector<passes::lower::Region> region;
  const ir::Value *source = nullptr;
};

/// `sym_constrain_range`: min <= symbol <= max (max = -1: no upper bound).
struct SymRange {
  std::string symbol;
  int64_t min = 0, max = -1;
};

/// What a run must check again when, of all its inputs, only the int input `input` changed (a
/// loop's index, run after run): its size symbol and what mentions it.
struct IntRebind {
  size_t input = 0;
  std::string symbol; ///< the symbol the input names ("" when none: nothing depends on it)
  std::vector<const SymRange *> ranges;
  std::vector<const ir::SymRelation *> relations;
  /// Int inputs whose value expression mentions the symbol, with that expression's symbols.
  std::vector<std::pair<size_t, std::vector<std::string>>> intChecks;
};

struct PreparedGraph {
  std::string name;
  std::vector<InputSpec> inputs;
  std::vector<WeightSpec> weights;
  std::vector<OutputSpec> outputs;
  std::vector<WriteBack> writeBacks;
  std::vector<SymRange> ranges;
  /// shape-infer's assumptions and the ranges, as relations.
  std::vector<ir::SymRelation> assumed;
  /// Equalities shape-infer assumed that became one symbol (`s2 == s0 - 2`: input sizes spelled
  /// with s0 - 2 where they said s2); the input binding checks them as sizes.
  std::vector<ir::SymRelation> unified;
  std::string outSpec;                 ///< the return's out_spec attribute ("" when absent)
  std::string graphText;               ///< after the graph passes
  std::string loopText;                ///< the scheduled loop program
  passes::schedule::Schedule schedule; ///< empty unless the pipeline ran to the end
  /// The scheduled program's size symbols (bindSymbols checks each has a value on every call).
  std::vector<std::string> programSymbols;
  /// Launches of loop kernels and extern kernels ([Note: launches]: kernels that share a launch
  /// run as one function and count once).
  size_t kernels = 0, externKernels = 0;
  /// With PipelineOptions::collectDeclines: each declining node's diagnostic, positioned.
  std::vector<ir::Diagnostic> declines;
  /// Wall milliseconds of each stage, in order: "parse+shape-infer", one entry per graph pass,
  /// "lower", "schedule" (KILN_LOGS=perf).
  std::vector<std::pair<std::string, double>> stageMillis;

  /// Checks a call's inputs (tensors; 0-d tensors for scalar inputs, `ints` holding the value
  /// of int inputs) and binds every size symbol of the program. Throws SpecializationError.
  ir::SymbolValues bindSymbols(std::span<const Tensor> inputs,
                               std::span<const std::optional<int64_t>> ints) const;
  /// The plan for rebinding when only int input `k` changes; nullopt when some tensor input's
  /// sizes or strides mention its symbol (then every change needs bindSymbols).
  std::optional<IntRebind> planIntRebind(size_t k) const;
  /// `values`, a binding bindSymbols made for these tensors, with the plan's input now `value`:
  /// the checks of bindSymbols that read its symbol, done again. Throws SpecializationError.
  void rebindInt(const IntRebind &plan, ir::SymbolValues &values, int64_t value,
                 std::span<const std::optional<int64_t>> ints) const;
};

/// The graph passes run by default: the registered subset of
/// functionalize, simplify, const-fold, dce, cse, dce.
std::string defaultPipeline();

/// `d` pointing at the position of its node (a line of parsed text, or a node's number in the
/// GraphBuilder that built the graph), naming the user's line.
ir::Diagnostic located(ir::Diagnostic d, const ir::NodePositions &positions,
                       const std::string &filename);

/// Runs the whole pipeline on a graph built in memory (ir::GraphBuilder); diagnostics carry the
/// node's position from `positions`. Throws ir::DiagnosticError for an invalid graph,
/// LoweringDeclined when a node does not lower.
PreparedGraph prepareGraph(std::unique_ptr<ir::Graph> graph, const ir::NodePositions &positions,
                           const PipelineOptions &options = {});
/// The same for .kir text (kilnc, the AOT runtime, tests): parse, then the pipeline above.
PreparedGraph prepareGraph(std::string_view text, const PipelineOptions &options = {});

} // namespace kiln::driver

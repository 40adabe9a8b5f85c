#pragma once
/// compile: the whole of kiln's compiler in one function, read top to bottom —
///
///   graph ──prepareGraph──► shape-infer, verify, graph passes, lowering, schedule
///         ──code for the device──► CPU: emitModule + JIT through the kernel cache
///                                  CUDA: emitCuda + NVRTC on the device
///         ──► Executable ──► Runner (weights, the one input check per call)
///
/// kiln.compile's backend (frontend/csrc/bind_compiler.cc) calls it; `kiln-opt --emit` prints
/// the stages up to the code, `KILN_LOGS=perf` their times (PreparedGraph::stageMillis plus
/// CompileReport). kilnc and the AOT runtime stop after prepareGraph and make or load code for
/// a library instead (aot/). This target links the JIT and the CUDA backend; the rest of
/// driver/ links neither.

#include "codegen/cpu/compile_program.h"
#include "driver/prepared_graph.h"
#include "driver/runner.h"
#include "runtime/device.h"

#include <map>
#include <memory>
#include <string>

namespace kiln::driver {

struct CompileOptions {
  PipelineOptions pipeline;
  /// Where the code runs: the CPU, or a CUDA device (kiln's CUDA backend must be available).
  Device device;
  /// CPU code: JIT options (optimization level, dumps, the kernel cache).
  codegen::cpu::ProgramOptions cpu;
  /// The tensor of every `weight` node, by its key (checked against the node's dtype and sizes).
  std::map<std::string, Tensor> weights;
};

/// What making the code did, for logs and kiln.explain.
struct CompileReport {
  double frontSeconds = 0; ///< prepareGraph
  double codeSeconds = 0;  ///< emit + JIT (or cache hit) / CUDA C + NVRTC + load
  /// The kernel cache: "hit (memory)", "hit (disk)", "miss (not-found 1)", "none (no generated
  /// kernels)", "bypassed (dumping stages)"; "cuda" for CUDA code.
  std::string cache;
};

/// Runs the pipeline above on `graph` (diagnostics at `positions`). Throws ir::DiagnosticError
/// for an invalid graph, LoweringDeclined for a node that does not lower, kiln::Error for a
/// missing or mismatched weight, an unavailable CUDA device or a failed compilation.
std::unique_ptr<Runner> compile(std::unique_ptr<ir::Graph> graph,
                                const ir::NodePositions &positions, const CompileOptions &options,
                                CompileReport *report = nullptr);

} // namespace kiln::driver

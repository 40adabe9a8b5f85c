#pragma once
/// Building libNAME.so, NAME.h and the weights file from a prepared program (kilnc's back end).
///
/// The library is three objects linked by the system C compiler driver ($CC, else `cc`) against
/// libkiln_aot.so: the kernels (compiled by codegen/cpu's LLVM pipeline for the target), a C
/// glue file declaring the kiln_program_desc and `NAME_create`, and an assembly file whose
/// `.incbin`s embed the .kir text (and the weights with --weights embed). A version script keeps
/// every symbol but `NAME_*` local, so several models load into one process. Everything is
/// written in a temporary folder inside the output folder and renamed into place file by file
/// at the end, so a failed build leaves no half-written library, header or weights.

#include "codegen/cpu/target.h"
#include "driver/prepared_graph.h"

#include <string>
#include <vector>

namespace kiln::aot {

struct LibraryOptions {
  std::string name;        ///< NAME (a C identifier)
  std::string outDir;      ///< where libNAME.so, NAME.h, ... go (created if missing)
  std::string kirText;     ///< the exported .kir text, as given
  std::string weightsPath; ///< the safetensors file ("" when the program has no weights)
  bool embedWeights = false;
  int optLevel = 3;
  std::string pipelineOptions; ///< recorded for the runtime ("fuse=1")
  std::string runtimeDir;      ///< holds libkiln_aot.so and kiln_aot.h
  std::string target = "cpu";  ///< "cpu" or "cuda" (NVRTC's PTX and cubin embedded)
  std::string cpu = "native";  ///< the x86 level kernels are compiled for (cpuTarget)
  int cudaArch = 80;           ///< sm_XY of the cubin for --target cuda
  bool verbose = false;        ///< print the commands run
};

/// The machine CPU kernels are compiled for: "native" (the host: every feature it has) or an
/// x86-64 level ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4") so a library runs on older
/// machines. Throws kiln::Error naming the known levels otherwise.
codegen::cpu::TargetDesc cpuTarget(const std::string &cpu);

/// Compiles and links the library; throws kiln::Error with the failing step's output.
/// Returns the paths written.
std::vector<std::string> buildLibrary(const driver::PreparedGraph &graph,
                                      const LibraryOptions &options);

/// The text of NAME.h: the model's inputs, outputs and ranges as comments and `NAME_create`.
/// `target` names where it runs ("the host CPU", "CUDA sm_80").
std::string modelHeader(const driver::PreparedGraph &graph, const std::string &name,
                        bool embeddedWeights, const std::string &target);

/// Writes `data` to `path` atomically (temporary file in the same folder, fsync, rename).
void writeFileAtomic(const std::string &path, std::string_view data);

} // namespace kiln::aot

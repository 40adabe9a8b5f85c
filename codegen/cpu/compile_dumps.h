#pragma once
/// What one compile of a kernel module leaves as text (KILN_LOGS=output_code): no LLVM types, so
/// the program executor can carry it.

#include <string>

namespace kiln::codegen::cpu {

/// The stages of one compile as text; empty when not requested or when the cache answered.
struct CompileDumps {
  std::string loweredMlir; ///< after the MLIR pipeline (LLVM dialect)
  std::string llvmIr;      ///< after LLVM optimization
  std::string assembly;    ///< the target's assembly for the same code as the object
  bool fromCache = false;  ///< the object came from the kernel cache: no stage ran
};

} // namespace kiln::codegen::cpu

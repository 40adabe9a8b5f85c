#pragma once
/// The cold compile of one kernel module: MLIR → LLVM IR → optimized LLVM IR → object code.
///
///   lowerToLLVMIR      lowering.h: MLIR pipeline, translation to an llvm::Module
///   optimizeModule     the new pass manager's O0..O3 pipeline, tuned by the target machine
///                      (host CPU and features: the loop and SLP vectorizers see AVX2/AVX-512)
///   emitObject         the target's code generator writes an ELF object into memory
///
/// The object is what the kernel cache stores and what CpuJit links (ORC addObjectFile), so a
/// warm cache skips everything in this file.

#include "codegen/cpu/compile_dumps.h"
#include "codegen/cpu/target.h"

#include <memory>
#include <string>
#include <string_view>

namespace llvm {
class Module;
class TargetMachine;
} // namespace llvm

namespace mlir {
class Operation;
} // namespace mlir

namespace kiln::codegen::cpu {

struct CompileOptions {
  /// LLVM optimization and codegen level, 0..3.
  int optLevel = 3;
  /// Fill CompileDumps (for KILN_LOGS=output_code).
  bool dumpStages = false;
};

/// Compiles MLIR text to an object file image. Throws kiln::Error with MLIR's diagnostics.
std::string compileToObject(std::string_view mlirText, const TargetDesc &target,
                            const CompileOptions &options, CompileDumps *dumps = nullptr);
/// Same for a module built in memory (lowered in place).
std::string compileToObject(mlir::Operation *module, const TargetDesc &target,
                            const CompileOptions &options, CompileDumps *dumps = nullptr);

/// Sets the module's triple and data layout from `tm` and runs the O<optLevel> pipeline.
void optimizeModule(llvm::Module &module, llvm::TargetMachine &tm, int optLevel);

/// Object file image / assembly text of `module` from the target's code generator.
std::string emitObject(llvm::Module &module, llvm::TargetMachine &tm);
std::string emitAssembly(llvm::Module &module, llvm::TargetMachine &tm);

} // namespace kiln::codegen::cpu

#pragma once
/// MLIR → LLVM IR for CPU kernels: the one place that knows the MLIR lowering pipeline.
///
/// Kernels are written in func, arith, math, memref, scf, vector and llvm (the pointer loads of
/// the kernel ABI, see codegen/README.md). lowerToLLVMIR runs, in order:
///
///   approximate-math        polynomial approximations of exp, expm1, log, log1p, log2, tanh,
///                           erf, sin, cos, atan, ... on f32 scalars and vectors, so math
///                           vectorizes instead of becoming scalar libm calls
///   arith-expand            ceildivsi/floordivsi (index math) into plain arith
///   canonicalize, cse
///   convert-scf-to-cf
///   convert-vector-to-llvm  reassociating fp reductions, 64-bit mask indices
///   finalize-memref-to-llvm
///   convert-math-to-llvm, convert-arith-to-llvm, convert-func-to-llvm, convert-cf-to-llvm
///   reconcile-unrealized-casts
///
/// then translates the LLVM dialect to an llvm::Module. No header here includes MLIR, so callers
/// (jit.cc, the tests) compile fast.

#include <memory>
#include <string>
#include <string_view>

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace mlir {
class MLIRContext;
class Operation;
} // namespace mlir

namespace kiln::codegen::cpu {

/// A context with exactly the kernel dialects and the builtin/LLVM translation interfaces loaded;
/// MLIR multithreading off (one compile runs on one thread; kiln compiles graphs concurrently).
std::unique_ptr<mlir::MLIRContext> createMlirContext();

/// Prints `module` in MLIR's default (pretty) form: the text a cache key hashes.
std::string printModule(mlir::Operation *module);

/// Parses, verifies, lowers and translates MLIR text. `loweredMlir`, when given, receives the
/// module after lowering (LLVM dialect). Throws kiln::Error carrying MLIR's diagnostics.
std::unique_ptr<llvm::Module> lowerToLLVMIR(std::string_view mlirText, llvm::LLVMContext &llvmCtx,
                                            std::string *loweredMlir = nullptr);

/// Same for a module built in memory (in a context from createMlirContext); lowered in place.
std::unique_ptr<llvm::Module> lowerToLLVMIR(mlir::Operation *module, llvm::LLVMContext &llvmCtx,
                                            std::string *loweredMlir = nullptr);

} // namespace kiln::codegen::cpu

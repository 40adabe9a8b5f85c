#include "codegen/cpu/compile.h"

#include "codegen/cpu/lowering.h"
#include "runtime/error.h"

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Passes/OptimizationLevel.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/CodeGen.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Transforms/Utils/Cloning.h"

namespace kiln::codegen::cpu {
namespace {

std::string emit(llvm::Module &module, llvm::TargetMachine &tm, llvm::CodeGenFileType type) {
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  KILN_CHECK(!tm.addPassesToEmitFile(pm, os, nullptr, type),
             "cpu codegen: the target cannot emit {}",
             type == llvm::CodeGenFileType::ObjectFile ? "objects" : "assembly");
  pm.run(module);
  return std::string(buffer.data(), buffer.size());
}

std::string printLLVM(const llvm::Module &module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os, nullptr);
  return text;
}

/// Everything after lowering: the part shared by text and in-memory modules.
std::string finish(llvm::Module &module, const TargetDesc &target, const CompileOptions &options,
                   CompileDumps *dumps) {
  std::unique_ptr<llvm::TargetMachine> tm = createTargetMachine(target, options.optLevel);
  optimizeModule(module, *tm, options.optLevel);
  if (dumps) {
    dumps->llvmIr = printLLVM(module);
    // Code generation mutates the module (CodeGenPrepare): print assembly from a copy.
    std::unique_ptr<llvm::Module> copy = llvm::CloneModule(module);
    dumps->assembly = emitAssembly(*copy, *tm);
  }
  return emitObject(module, *tm);
}

} // namespace

void optimizeModule(llvm::Module &module, llvm::TargetMachine &tm, int optLevel) {
  KILN_CHECK(optLevel >= 0 && optLevel <= 3, "cpu codegen: opt level must be 0..3, got {}",
             optLevel);
  module.setTargetTriple(tm.getTargetTriple().str());
  module.setDataLayout(tm.createDataLayout());
  std::string verifyErrors;
  llvm::raw_string_ostream verifyOs(verifyErrors);
  KILN_CHECK(!llvm::verifyModule(module, &verifyOs), "cpu codegen: invalid LLVM IR:\n{}",
             verifyErrors);

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = optLevel >= 2;
  tuning.SLPVectorization = optLevel >= 2;
  llvm::PassBuilder pb(&tm, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);

  static const llvm::OptimizationLevel kLevels[] = {
      llvm::OptimizationLevel::O0, llvm::OptimizationLevel::O1, llvm::OptimizationLevel::O2,
      llvm::OptimizationLevel::O3};
  llvm::ModulePassManager mpm = optLevel == 0
                                    ? pb.buildO0DefaultPipeline(llvm::OptimizationLevel::O0)
                                    : pb.buildPerModuleDefaultPipeline(kLevels[optLevel]);
  mpm.run(module, mam);
}

std::string emitObject(llvm::Module &module, llvm::TargetMachine &tm) {
  return emit(module, tm, llvm::CodeGenFileType::ObjectFile);
}

std::string emitAssembly(llvm::Module &module, llvm::TargetMachine &tm) {
  return emit(module, tm, llvm::CodeGenFileType::AssemblyFile);
}

std::string compileToObject(std::string_view mlirText, const TargetDesc &target,
                            const CompileOptions &options, CompileDumps *dumps) {
  llvm::LLVMContext llvmCtx;
  std::unique_ptr<llvm::Module> module =
      lowerToLLVMIR(mlirText, llvmCtx, dumps && options.dumpStages ? &dumps->loweredMlir : nullptr);
  return finish(*module, target, options, options.dumpStages ? dumps : nullptr);
}

std::string compileToObject(mlir::Operation *mlirModule, const TargetDesc &target,
                            const CompileOptions &options, CompileDumps *dumps) {
  llvm::LLVMContext llvmCtx;
  std::unique_ptr<llvm::Module> module = lowerToLLVMIR(
      mlirModule, llvmCtx, dumps && options.dumpStages ? &dumps->loweredMlir : nullptr);
  return finish(*module, target, options, options.dumpStages ? dumps : nullptr);
}

} // namespace kiln::codegen::cpu

#include "codegen/cpu/lowering.h"

#include "runtime/error.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/raw_ostream.h"

namespace kiln::codegen::cpu {
namespace {

/// Rewrites math ops on f32 (scalars and vectors) into polynomial approximations built from
/// arith/math.fma/bitcasts, which vectorize; without it vector math becomes scalar libm calls.
struct ApproximateMathPass
    : mlir::PassWrapper<ApproximateMathPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ApproximateMathPass)

  llvm::StringRef getArgument() const final { return "approximate-math"; }
  void getDependentDialects(mlir::DialectRegistry &registry) const final {
    registry
        .insert<mlir::arith::ArithDialect, mlir::math::MathDialect, mlir::vector::VectorDialect>();
  }
  void runOnOperation() final {
    mlir::RewritePatternSet patterns(&getContext());
    // enableAvx2 would emit x86vector ops (rsqrt only); the generic forms vectorize on AVX2 and
    // AVX-512 alike.
    mlir::populateMathPolynomialApproximationPatterns(patterns, {/*enableAvx2=*/false});
    if (mlir::failed(mlir::applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

/// Turns the math functions LLVM has no intrinsic for (tan, the inverse and hyperbolic
/// functions, log1p, expm1, atan2, and tanh/erf in f64), which the approximations above left,
/// into libm calls; vector forms are unrolled into one call per lane. Everything else stays for
/// MathToLLVM: floor, sqrt or exp as LLVM intrinsics lower to single instructions or vector code,
/// where a libm call per lane would not.
struct MathToLibmCallsPass
    : mlir::PassWrapper<MathToLibmCallsPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(MathToLibmCallsPass)

  llvm::StringRef getArgument() const final { return "math-to-libm-calls"; }
  void getDependentDialects(mlir::DialectRegistry &registry) const final {
    registry
        .insert<mlir::arith::ArithDialect, mlir::func::FuncDialect, mlir::vector::VectorDialect>();
  }
  void runOnOperation() final {
    mlir::ConversionTarget target(getContext());
    target.markUnknownOpDynamicallyLegal([](mlir::Operation *) { return true; });
    target.addIllegalOp<mlir::math::TanOp, mlir::math::AsinOp, mlir::math::AcosOp,
                        mlir::math::AtanOp, mlir::math::Atan2Op, mlir::math::SinhOp,
                        mlir::math::CoshOp, mlir::math::AsinhOp, mlir::math::AcoshOp,
                        mlir::math::AtanhOp, mlir::math::Log1pOp, mlir::math::ExpM1Op,
                        mlir::math::TanhOp, mlir::math::ErfOp, mlir::math::CbrtOp>();
    mlir::RewritePatternSet patterns(&getContext());
    mlir::populateMathToLibmConversionPatterns(patterns);
    if (mlir::failed(mlir::applyPartialConversion(getOperation(), target, std::move(patterns))))
      signalPassFailure();
  }
};

/// Collects every diagnostic of a context while alive: "loc: error: message" lines, with notes.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(mlir::MLIRContext *ctx)
      : handler_(ctx, [this](mlir::Diagnostic &diag) {
          append(diag);
          return mlir::success();
        }) {}
  const std::string &text() const { return text_; }

private:
  void append(mlir::Diagnostic &diag) {
    llvm::raw_string_ostream os(text_);
    const char *severity = diag.getSeverity() == mlir::DiagnosticSeverity::Error     ? "error"
                           : diag.getSeverity() == mlir::DiagnosticSeverity::Warning ? "warning"
                                                                                     : "note";
    printLocation(os, diag.getLocation());
    os << ": " << severity << ": " << diag.str() << "\n";
    for (mlir::Diagnostic &note : diag.getNotes()) {
      os << "  ";
      printLocation(os, note.getLocation());
      os << ": note: " << note.str() << "\n";
    }
  }

  /// "file:line:col" like a compiler, where the location has one.
  static void printLocation(llvm::raw_ostream &os, mlir::Location loc) {
    if (auto fileLoc = llvm::dyn_cast<mlir::FileLineColLoc>(loc))
      os << fileLoc.getFilename().getValue() << ":" << fileLoc.getLine() << ":"
         << fileLoc.getColumn();
    else
      os << loc;
  }

  std::string text_;
  mlir::ScopedDiagnosticHandler handler_;
};

void addLoweringPipeline(mlir::PassManager &pm) {
  pm.addPass(std::make_unique<ApproximateMathPass>());
  pm.addPass(std::make_unique<MathToLibmCallsPass>());
  pm.addPass(mlir::arith::createArithExpandOpsPass());
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  pm.addPass(mlir::createConvertSCFToCFPass());
  mlir::ConvertVectorToLLVMPassOptions vectorOptions;
  vectorOptions.reassociateFPReductions = true;
  // 32-bit mask indices would wrap for tails computed from sizes above 2^31.
  vectorOptions.force32BitVectorIndices = false;
  pm.addPass(mlir::createConvertVectorToLLVMPass(vectorOptions));
  pm.addPass(mlir::createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(mlir::createConvertMathToLLVMPass());
  pm.addPass(mlir::createArithToLLVMConversionPass());
  pm.addPass(mlir::createConvertFuncToLLVMPass());
  pm.addPass(mlir::createConvertControlFlowToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
}

/// Conversions leave what they cannot convert; name each leftover op instead of letting the
/// translation fail on the first one.
mlir::LogicalResult checkFullyLowered(mlir::ModuleOp module) {
  mlir::LogicalResult result = mlir::success();
  module.walk([&](mlir::Operation *op) {
    if (op == module.getOperation() ||
        llvm::isa_and_nonnull<mlir::LLVM::LLVMDialect>(op->getDialect()))
      return;
    op->emitError() << "'" << op->getName() << "' was not lowered to the LLVM dialect";
    result = mlir::failure();
  });
  return result;
}

[[noreturn]] void failWith(std::string_view what, const DiagnosticCollector &diags) {
  fail(ErrorKind::Runtime, "cpu codegen: {}\n{}", what,
       diags.text().empty() ? std::string("(no diagnostic)") : diags.text());
}

std::unique_ptr<llvm::Module> lower(mlir::ModuleOp module, llvm::LLVMContext &llvmCtx,
                                    std::string *loweredMlir, DiagnosticCollector &diags) {
  mlir::PassManager pm(module.getContext());
  addLoweringPipeline(pm);
  if (mlir::failed(pm.run(module)) || mlir::failed(checkFullyLowered(module)))
    failWith("lowering to the LLVM dialect failed", diags);
  if (loweredMlir)
    *loweredMlir = printModule(module.getOperation());
  std::unique_ptr<llvm::Module> llvmModule = mlir::translateModuleToLLVMIR(module, llvmCtx);
  if (!llvmModule)
    failWith("translation to LLVM IR failed", diags);
  return llvmModule;
}

} // namespace

std::unique_ptr<mlir::MLIRContext> createMlirContext() {
  mlir::DialectRegistry registry;
  registry.insert<mlir::func::FuncDialect, mlir::arith::ArithDialect, mlir::math::MathDialect,
                  mlir::memref::MemRefDialect, mlir::scf::SCFDialect, mlir::vector::VectorDialect,
                  mlir::LLVM::LLVMDialect>();
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  auto ctx = std::make_unique<mlir::MLIRContext>(registry, mlir::MLIRContext::Threading::DISABLED);
  ctx->loadAllAvailableDialects();
  ctx->printOpOnDiagnostic(false);
  return ctx;
}

std::string printModule(mlir::Operation *module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

std::unique_ptr<llvm::Module> lowerToLLVMIR(std::string_view mlirText, llvm::LLVMContext &llvmCtx,
                                            std::string *loweredMlir) {
  std::unique_ptr<mlir::MLIRContext> ctx = createMlirContext();
  DiagnosticCollector diags(ctx.get());
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(
      llvm::StringRef(mlirText.data(), mlirText.size()), ctx.get(), "kernel.mlir");
  if (!module)
    failWith("invalid MLIR", diags);
  return lower(*module, llvmCtx, loweredMlir, diags);
}

std::unique_ptr<llvm::Module> lowerToLLVMIR(mlir::Operation *module, llvm::LLVMContext &llvmCtx,
                                            std::string *loweredMlir) {
  auto moduleOp = llvm::dyn_cast<mlir::ModuleOp>(module);
  KILN_CHECK(moduleOp, "cpu codegen: expected a builtin.module, got '{}'",
             module->getName().getStringRef().str());
  DiagnosticCollector diags(module->getContext());
  if (mlir::failed(mlir::verify(module)))
    failWith("invalid MLIR", diags);
  return lower(moduleOp, llvmCtx, loweredMlir, diags);
}

} // namespace kiln::codegen::cpu

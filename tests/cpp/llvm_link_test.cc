// Proves the @local_llvm wrapper: MLIR parses, verifies and prints a module through libMLIR.so.
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <kiln_catch.h>

TEST_CASE("MLIR parses and verifies a function", "[llvm]") {
  mlir::MLIRContext ctx;
  ctx.loadDialect<mlir::func::FuncDialect, mlir::arith::ArithDialect>();
  const char *src = R"mlir(
    func.func @add(%a: f32, %b: f32) -> f32 {
      %c = arith.addf %a, %b : f32
      return %c : f32
    })mlir";
  auto module = mlir::parseSourceString<mlir::ModuleOp>(src, &ctx);
  REQUIRE(module);
  REQUIRE(mlir::succeeded(module->verify()));
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  CHECK(text.find("arith.addf") != std::string::npos);
}

TEST_CASE("MLIR rejects an ill-typed function", "[llvm]") {
  mlir::MLIRContext ctx;
  ctx.loadDialect<mlir::func::FuncDialect, mlir::arith::ArithDialect>();
  ctx.printOpOnDiagnostic(false);
  mlir::ScopedDiagnosticHandler silence(&ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  const char *src = R"mlir(
    func.func @bad(%a: f32, %b: i32) -> f32 {
      %c = arith.addf %a, %b : f32
      return %c : f32
    })mlir";
  auto module = mlir::parseSourceString<mlir::ModuleOp>(src, &ctx);
  CHECK_FALSE(module);
}

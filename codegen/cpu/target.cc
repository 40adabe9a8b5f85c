#include "codegen/cpu/target.h"

#include "runtime/error.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/CodeGen.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

#include <algorithm>
#include <mutex>
#include <vector>

namespace kiln::codegen::cpu {

std::string TargetDesc::str() const { return triple + " " + cpu + " " + features; }

static TargetDesc detectHost() {
  TargetDesc t;
  t.triple = llvm::sys::getProcessTriple();
  t.cpu = llvm::sys::getHostCPUName().str();
  std::vector<std::string> features;
  for (const auto &f : llvm::sys::getHostCPUFeatures())
    features.push_back((f.second ? "+" : "-") + f.first().str());
  std::sort(features.begin(), features.end(),
            [](const std::string &a, const std::string &b) { return a.substr(1) < b.substr(1); });
  for (const auto &f : features)
    t.features += (t.features.empty() ? "" : ",") + f;
  return t;
}

const TargetDesc &hostTarget() {
  static const TargetDesc host = detectHost();
  return host;
}

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
  });
}

std::unique_ptr<llvm::TargetMachine> createTargetMachine(const TargetDesc &target, int optLevel) {
  initializeNativeTarget();
  std::string error;
  const llvm::Target *llvmTarget = llvm::TargetRegistry::lookupTarget(target.triple, error);
  KILN_CHECK(llvmTarget, "cpu codegen: unknown target '{}': {}", target.triple, error);
  auto level = llvm::CodeGenOpt::getLevel(optLevel);
  KILN_CHECK(level, "cpu codegen: opt level must be 0..3, got {}", optLevel);
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(llvmTarget->createTargetMachine(
      target.triple, target.cpu, target.features, options, llvm::Reloc::PIC_,
      llvm::CodeModel::Small, *level, /*JIT=*/true));
  KILN_CHECK(tm, "cpu codegen: cannot create a target machine for {}", target.str());
  return tm;
}

} // namespace kiln::codegen::cpu

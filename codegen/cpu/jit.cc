#include "codegen/cpu/jit.h"

#include "codegen/cpu/lowering.h"
#include "runtime/error.h"

#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/TargetParser/SubtargetFeature.h"
#include "llvm/TargetParser/Triple.h"

#include <utility>

namespace kiln::codegen::cpu {
namespace {

std::unique_ptr<llvm::orc::LLJIT> createLLJIT(const TargetDesc &target) {
  initializeNativeTarget();
  llvm::orc::JITTargetMachineBuilder jtmb{llvm::Triple(target.triple)};
  jtmb.setCPU(target.cpu);
  jtmb.addFeatures(llvm::SubtargetFeatures(target.features).getFeatures());
  // Objects come from createTargetMachine, which uses the same relocation and code model.
  jtmb.setRelocationModel(llvm::Reloc::PIC_);
  jtmb.setCodeModel(llvm::CodeModel::Small);
  auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(jtmb)).create();
  if (!jit)
    fail(ErrorKind::Runtime, "cpu codegen: cannot create the JIT: {}",
         llvm::toString(jit.takeError()));
  return std::move(*jit);
}

} // namespace

CpuJit::CpuJit(JitOptions options)
    : options_(std::move(options)), target_(options_.target.value_or(hostTarget())),
      jit_(createLLJIT(target_)) {
  // Link errors (unresolved symbols) go to the session, not to lookup's error: keep them for
  // lookup's message instead of ORC's default of printing to stderr.
  jit_->getExecutionSession().setErrorReporter([this](llvm::Error err) {
    std::string text = llvm::toString(std::move(err));
    std::lock_guard<std::mutex> lock(mu_);
    sessionErrors_ += text + "\n";
  });
}

CpuJit::~CpuJit() {
  jit_.reset(); // first: ending the session may still report errors into sessionErrors_
}

template <typename Module> void CpuJit::add(std::string_view text, Module &&module) {
  CompileOptions compileOptions{options_.optLevel, options_.dumpStages};
  CompileDumps dumps;
  auto build = [&] { return compileToObject(module, target_, compileOptions, &dumps); };
  KernelCache::Object object;
  if (options_.cache && !options_.dumpStages) {
    bool built = false;
    object = options_.cache->getOrBuild(
        cacheKey(text, target_, options_.optLevel, options_.version), [&] {
          built = true;
          return build();
        });
    dumps.fromCache = !built;
  } else {
    object = std::make_shared<const std::string>(build());
  }
  addObject(*object);
  std::lock_guard<std::mutex> lock(mu_);
  dumps_ = std::move(dumps);
}

void CpuJit::addModule(std::string_view mlirText) { add(mlirText, mlirText); }

void CpuJit::addModule(mlir::Operation *module) { add(printModule(module), module); }

void CpuJit::addObject(const std::string &object) {
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(object, "kiln-kernel.o");
  if (llvm::Error err = jit_->addObjectFile(std::move(buffer)))
    fail(ErrorKind::Runtime, "cpu codegen: cannot load the kernel object: {}",
         llvm::toString(std::move(err)));
}

void *CpuJit::lookup(std::string_view name) {
  auto address = jit_->lookup(llvm::StringRef(name.data(), name.size()));
  if (!address) {
    std::string error = llvm::toString(address.takeError());
    std::lock_guard<std::mutex> lock(mu_);
    error += "\n" + std::exchange(sessionErrors_, "");
    fail(ErrorKind::Runtime, "cpu codegen: cannot find or link '{}': {}", name, error);
  }
  return address->toPtr<void *>();
}

CompileDumps CpuJit::dumps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dumps_;
}

} // namespace kiln::codegen::cpu

// compileProgram: emit, JIT (through the kernel cache), look up one kernel per generated node.

#include "codegen/cpu/compile_program.h"

#include <chrono>

namespace kiln::codegen::cpu {

CompiledProgram compileProgram(const passes::schedule::Schedule &schedule,
                               const ProgramOptions &options) {
  auto start = std::chrono::steady_clock::now();
  JitOptions jitOptions = options.jit;
  if (!jitOptions.cache)
    jitOptions.cache = &KernelCache::global();
  auto jit = std::make_shared<CpuJit>(jitOptions);
  EmittedModule module =
      emitModule(schedule, options.emit.value_or(emitOptionsForFeatures(jit->target().features)));
  std::vector<KernelFn> kernels;
  CompileDumps dumps;
  if (!module.kernels.empty()) {
    jit->addModule(module.text);
    dumps = jit->dumps();
    for (const KernelInfo &k : module.kernels)
      kernels.push_back(jit->lookupKernel(k.name));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return CompiledProgram::fromKernels(schedule, std::move(module), std::move(kernels),
                                      std::move(jit), seconds, std::move(dumps));
}

} // namespace kiln::codegen::cpu

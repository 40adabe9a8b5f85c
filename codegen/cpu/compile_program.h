#pragma once
/// compileProgram: a LoopProgram to a CompiledProgram through the JIT.
///
/// Emits one MLIR module for the schedule (emit.h), compiles it through CpuJit and the kernel
/// cache (the key hashes the module text, which begins with the program's text, plus the
/// target), and looks up one kernel per pointwise/reduction node.

#include "codegen/cpu/compiled_program.h"
#include "codegen/cpu/jit.h"

#include <optional>

namespace kiln::codegen::cpu {

struct ProgramOptions {
  /// The JIT's options; `jit.cache` null means KernelCache::global().
  JitOptions jit;
  /// Emitter options; default: the widest vectors the JIT's target has.
  std::optional<EmitOptions> emit;
};

/// Emits, compiles and links the scheduled program as scheduled (the program is copied).
/// Throws kiln::Error when the emitter or the JIT fails.
CompiledProgram compileProgram(const passes::schedule::Schedule &schedule,
                               const ProgramOptions &options = {});

} // namespace kiln::codegen::cpu

#pragma once
// Helpers of the CPU code generation tests (cpu_emit_test, cpu_program_test): random inputs,
// a memory-only kernel cache, compile, compare against the reference interpreter.

#include "codegen/cpu/compile_program.h"
#include "codegen/cpu/emit.h"
#include "codegen/cpu/kernel_cache.h"
#include "ir/loop/interpreter.h"
#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/ops/random.h"
#include "tests/cpp/loop_test_util.h"

#include <kiln_catch.h>

#include <string>
#include <vector>

namespace kiln::test::cpu {

using namespace kiln::ir;
using namespace kiln::ir::loop;
using namespace kiln::codegen::cpu;

using test::F32;
using test::has;
using test::Idx;
using test::softmaxProgram;
using test::sym;
using test::tolerance;
using test::values;

inline const int64_t kSizes[] = {1, 7, 16, 1000, 1031};

inline Tensor randn(Shape sizes, DType dtype = F32) {
  static Generator gen(20261130);
  return ops::randn(sizes, F32, &gen).to(dtype);
}

/// Same shape and dtype; every element within `tol` relative to max(1, |expected|); NaNs match.
inline void checkClose(const Tensor &actual, const Tensor &expected, double tol) {
  test::checkClose(actual, expected, tol, /*sameDType=*/true);
}

/// One memory-only kernel cache for the whole test binary.
inline KernelCache &testCache() {
  static KernelCache cache("");
  return cache;
}

/// `p` scheduled as kiln.compile schedules (fused).
inline passes::schedule::Schedule scheduled(const LoopProgram &p) {
  return passes::schedule::schedule(p);
}

inline CompiledProgram compile(const LoopProgram &p) {
  ProgramOptions options;
  options.jit.cache = &testCache();
  return compileProgram(scheduled(p), options);
}

/// `p` grouped into kernels with every node kept (nothing inlined), compiled: buffers keep the
/// ids the test gave them.
inline CompiledProgram compileAsWritten(const LoopProgram &p) {
  ProgramOptions options;
  options.jit.cache = &testCache();
  return compileProgram(passes::schedule::schedule(p, {.inlineProducers = false}), options);
}

/// Compiled against interpreted, output by output.
inline std::vector<Tensor> checkAgainstInterpreter(const CompiledProgram &c,
                                                   std::vector<Tensor> inputs,
                                                   const SymbolValues &symbols = {},
                                                   double tolScale = 1) {
  std::vector<Tensor> got = c.run(inputs, symbols);
  std::vector<Tensor> want = interpret(c.program(), inputs, symbols);
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    INFO("output " << k);
    checkClose(got[k], want[k], tolerance(want[k].dtype()) * tolScale);
  }
  return got;
}

inline const KernelInfo &kernel(const CompiledProgram &c, size_t k) {
  return c.module().kernels.at(k);
}

inline int f32Lanes() { return emitOptionsForFeatures(hostTarget().features).vectorBits / 32; }

template <typename Fn> std::string errorOf(ErrorKind kind, Fn &&fn) {
  try {
    fn();
  } catch (const Error &e) {
    CHECK(e.kind() == kind);
    return e.what();
  }
  FAIL("no kiln::Error thrown");
  return "";
}

} // namespace kiln::test::cpu

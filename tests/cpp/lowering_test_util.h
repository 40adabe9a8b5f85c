#pragma once
// Shared by the lowering tests: random inputs, the eager comparison (lowered, unfused and fused
// programs through the loop interpreter with the eager externs) and a graph template.

#include "ir/loop/interpreter.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "codegen/externs.h"
#include "passes/lower/lowering.h"
#include "passes/schedule/schedule.h"
#include "runtime/generator.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/random.h"
#include "runtime/ops/unary_math.h"

#include <cmath>
#include <fmt/format.h>
#include <kiln_catch.h>
#include <limits>

namespace kiln::lowering_test {

using ir::loop::LoopProgram;

constexpr DType F32 = DType::Float32, F16 = DType::Float16, I64 = DType::Int64;
constexpr double kInf = std::numeric_limits<double>::infinity();

inline Generator &gen() {
  static Generator g(20261130);
  return g;
}
inline Tensor randn(Shape sizes, DType dtype = F32) {
  return ops::randn(sizes, F32, &gen()).to(dtype);
}
inline Tensor randint(int64_t lo, int64_t hi, Shape sizes, DType dtype) {
  return ops::randint(lo, hi, sizes, dtype, &gen());
}
inline Tensor positive(Shape sizes) { return ops::exp(randn(sizes)); }
inline Tensor scalar(double v) { return Tensor::wrapScalar(Scalar(v)); }
inline Tensor fromValues(Shape sizes, std::vector<float> v) {
  Tensor t = Tensor::empty(sizes, F32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

inline std::vector<double> values(const Tensor &t) {
  Tensor d = t.to(DType::Float64).contiguous();
  return {d.data<double>(), d.data<double>() + d.numel()};
}

/// Same dtype and shape, every element within tol * max(1, |expected|) (float16/bfloat16: 1e-2),
/// NaNs and infinities where eager has them.
inline void checkClose(const Tensor &actual, const Tensor &expected, double tol) {
  REQUIRE(actual.dtype() == expected.dtype());
  REQUIRE(actual.sizes() == expected.sizes());
  if (isReducedFloat(expected.dtype()))
    tol = std::max(tol, 1e-2);
  std::vector<double> a = values(actual), e = values(expected);
  for (size_t k = 0; k < a.size(); ++k) {
    INFO("element " << k << ": " << a[k] << " vs " << e[k]);
    if (std::isnan(e[k]))
      CHECK(std::isnan(a[k]));
    else if (std::isinf(e[k]))
      CHECK(a[k] == e[k]);
    else
      CHECK(std::abs(a[k] - e[k]) <= tol * std::max(1.0, std::abs(e[k])));
  }
}

inline std::vector<Tensor> run(const LoopProgram &p, const std::vector<Tensor> &inputs) {
  ir::loop::Interpreter interp(p);
  codegen::registerEagerExterns(interp);
  return interp.run(inputs);
}

inline LoopProgram lower(const std::string &kir) {
  std::unique_ptr<ir::Graph> graph = ir::parseGraph(kir);
  ir::verifyOrThrow(*graph);
  return passes::lower::lowerGraph(*graph);
}

/// Lowers `kir` and checks the lowered, unfused-scheduled and fused-scheduled programs on
/// `inputs` against `expected`.
inline void check(const std::string &kir, const std::vector<Tensor> &inputs,
                  const std::vector<Tensor> &expected, double tol = 1e-5) {
  LoopProgram p = lower(kir);
  passes::schedule::Schedule unfused = passes::schedule::schedule(p, {.fuse = false});
  passes::schedule::Schedule fused = passes::schedule::schedule(p);
  const std::pair<const char *, const LoopProgram *> variants[] = {
      {"lowered", &p}, {"unfused", &unfused.program}, {"fused", &fused.program}};
  for (auto [name, program] : variants) {
    INFO(name << " program:\n" << program->str());
    std::vector<Tensor> out = run(*program, inputs);
    REQUIRE(out.size() == expected.size());
    for (size_t k = 0; k < out.size(); ++k) {
      INFO("output " << k);
      checkClose(out[k], expected[k], tol);
    }
  }
}

/// A graph `@g` with the given parameters, body lines and return list.
inline std::string graph(const std::string &params, const std::string &body,
                         const std::string &ret) {
  return fmt::format("graph @g({}) {{\n{}  return {}\n}}\n", params, body, ret);
}

} // namespace kiln::lowering_test

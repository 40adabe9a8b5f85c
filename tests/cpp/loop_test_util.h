// Test helpers shared by the loop-IR code generator tests (cpu_emit_test, cuda_codegen_test,
// cuda_emulated_test): shorthands, the comparison of generated code against the interpreter,
// and the three-node softmax program.
#pragma once

#include "ir/loop/program.h"
#include "runtime/tensor.h"

#include <kiln_catch.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

namespace kiln::test {

using namespace kiln::ir;
using namespace kiln::ir::loop;

inline constexpr DType F32 = DType::Float32;
using Idx = std::span<const IndexExpr>;
inline SymInt sym(const char *name) { return SymInt::symbol(name); }

inline bool has(const std::string &text, const std::string &what) {
  return text.find(what) != std::string::npos;
}

inline std::vector<double> values(const Tensor &t) {
  Tensor d = t.to(DType::Float64).contiguous();
  return {d.data<double>(), d.data<double>() + d.numel()};
}

/// Tolerances of the generated code against the interpreter's doubles, relative to
/// max(1, |expected|): float rounding of the generated code (f32 polynomial math, float16/bfloat16
/// rounded once instead of after every op; sums are trees).
inline double tolerance(DType t) {
  switch (t) {
  case DType::Float16:
    return 2e-3;
  case DType::BFloat16:
    return 1.6e-2;
  case DType::Float32:
    return 2e-5;
  case DType::Float64:
    return 1e-12;
  default:
    return 0;
  }
}

/// Same shape (and, with `sameDType`, dtype); every element within `tol` relative to
/// max(1, |expected|); NaNs and infinities match.
inline void checkClose(const Tensor &actual, const Tensor &expected, double tol,
                       bool sameDType = false) {
  REQUIRE(actual.sizes() == expected.sizes());
  if (sameDType)
    REQUIRE(actual.dtype() == expected.dtype());
  std::vector<double> a = values(actual), e = values(expected);
  int64_t bad = 0;
  for (size_t k = 0; k < a.size() && bad < 5; ++k) {
    bool ok = std::isnan(e[k])   ? std::isnan(a[k])
              : std::isinf(e[k]) ? a[k] == e[k]
                                 : std::abs(a[k] - e[k]) <= tol * std::max(1.0, std::abs(e[k]));
    if (!ok) {
      ++bad;
      INFO("element " << k << " of " << a.size() << ": " << a[k] << " vs " << e[k]);
      CHECK(ok);
    }
  }
  CHECK(bad == 0);
}

/// softmax over the last dim of f32[s0, s1] as three loop nodes.
inline LoopProgram softmaxProgram() {
  LoopProgram p;
  SymInt s0 = sym("s0"), s1 = sym("s1");
  BufferId x = p.addInput(F32, {s0, s1});
  BufferId mx = p.reduction(ReductionKind::Max, {s0}, {s1},
                            [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1]}); });
  BufferId sum = p.reduction(ReductionKind::Sum, {s0}, {s1}, [&](Ops &ops, Idx i) {
    return ops.exp(ops.load(x, {i[0], i[1]}) - ops.load(mx, {i[0]}));
  });
  p.markOutput(p.pointwise({s0, s1}, [&](Ops &ops, Idx i) {
    return ops.exp(ops.load(x, {i[0], i[1]}) - ops.load(mx, {i[0]})) / ops.load(sum, {i[0]});
  }));
  return p;
}

} // namespace kiln::test

// Test helpers shared by cuda_codegen_test (emission and compilation) and cuda_emulated_test
// (host-emulator runs against the interpreter): loop programs over every prim row of loop.def,
// add-relu, and the graphs of the schedule tests, scheduled.
#pragma once

#include "ir/loop/program.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "passes/lower/lowering.h"
#include "passes/schedule/schedule.h"
#include "tests/cpp/loop_test_util.h"

#include <memory>
#include <string>
#include <vector>

namespace kiln::test {

using namespace kiln::ir;
using namespace kiln::ir::loop;

inline const DType kAllDTypes[] = {DType::Bool,    DType::UInt8,  DType::Int8,    DType::Int16,
                                   DType::Int32,   DType::Int64,  DType::Float16, DType::BFloat16,
                                   DType::Float32, DType::Float64};

// ---- programs ---------------------------------------------------------------------------

/// Whether a prim of `rule` takes operands of dtype `t` (loop.def's type rules).
inline bool admits(TypeRule rule, DType t) {
  switch (rule) {
  case TypeRule::Numeric:
    return t != DType::Bool;
  case TypeRule::Float:
    return isFloating(t);
  case TypeRule::Bits:
    return !isFloating(t);
  case TypeRule::Int64:
    return t == DType::Int64;
  default:
    return true;
  }
}

template <int N, typename F> Val applyPrim(Ops &o, F f, const std::vector<Val> &a) {
  if constexpr (N == 1)
    return (o.*f)(a[0]);
  else if constexpr (N == 2)
    return (o.*f)(a[0], a[1]);
  else
    return (o.*f)(a[0], a[1], a[2]);
}

struct PrimRow {
  ExprKind kind;
  const char *keyword;
  int arity;
  TypeRule rule;
  Val (*apply)(Ops &, const std::vector<Val> &);
};

/// Every prim row of loop.def, with a way to call its Ops method.
inline const std::vector<PrimRow> &primRows() {
  static const std::vector<PrimRow> rows = {
#define KILN_LOOP_PRIM(E, M, K, N, R)                                                              \
  {ExprKind::E, K, N, TypeRule::R,                                                                 \
   [](Ops &o, const std::vector<Val> &a) { return applyPrim<N>(o, &Ops::M, a); }},
#include "ir/loop/loop.def"
  };
  return rows;
}

/// relu(x + bias) over f32[s0, s1] with a bias of [s1].
inline LoopProgram addReluProgram() {
  LoopProgram p;
  SymInt s0 = sym("s0"), s1 = sym("s1");
  BufferId x = p.addInput(F32, {s0, s1});
  BufferId b = p.addInput(F32, {s1});
  p.markOutput(p.pointwise({s0, s1}, [&](Ops &ops, Idx i) {
    return ops.maximum(ops.load(x, {i[0], i[1]}) + ops.load(b, {i[1]}), ops.constant(0.0, F32));
  }));
  return p;
}

/// `p` scheduled without fusion: one kernel per node, each alone in its launch (the memory plan
/// still runs).
inline passes::schedule::Schedule unfused(const LoopProgram &p) {
  return passes::schedule::schedule(p, {.fuse = false});
}

inline passes::schedule::Schedule scheduled(const std::string &kir) {
  std::unique_ptr<Graph> graph = parseGraph(kir);
  verifyOrThrow(*graph);
  return passes::schedule::schedule(passes::lower::lowerGraph(*graph));
}

// The graphs of tests/cpp/schedule_test.cc.
inline const char *const kSoftmax = R"(graph @softmax(%x: f32[s0, 128]) {
  %0 = softmax(%x) {dim = -1} : f32[s0, 128]
  return %0
}
)";

inline const char *const kLayerNorm =
    R"(graph @layer_norm(%x: f32[s0, 64], %w: f32[64], %b: f32[64]) {
  %0 = layer_norm(%x, %w, %b) {normalized_shape = [64]} : f32[s0, 64]
  return %0
}
)";

inline const char *const kRmsNorm = R"(graph @rms_norm(%x: f32[s0, 64], %w: f32[64]) {
  %eps = constant() {value = 1e-06} : float
  %0 = mul(%x, %x) : f32[s0, 64]
  %1 = mean(%0) {dim = [-1], keepdim = true} : f32[s0, 1]
  %2 = add(%1, %eps) : f32[s0, 1]
  %3 = rsqrt(%2) : f32[s0, 1]
  %4 = mul(%x, %3) : f32[s0, 64]
  %5 = mul(%4, %w) : f32[s0, 64]
  return %5
}
)";

inline const char *const kGeluMlp =
    R"(graph @gelu_mlp(%x: f32[s0, 32], %w1: f32[128, 32], %b1: f32[128],
                 %w2: f32[32, 128], %b2: f32[32]) {
  %0 = linear(%x, %w1, %b1) : f32[s0, 128]
  %1 = gelu(%0) {approximate = "tanh"} : f32[s0, 128]
  %2 = linear(%1, %w2, %b2) : f32[s0, 32]
  return %2
}
)";

inline const char *const kAttention =
    R"(graph @attention(%q: f32[2, 4, s0, 16], %k: f32[2, 4, s0, 16],
                  %v: f32[2, 4, s0, 16]) {
  %kt = transpose(%k) {dim0 = -2, dim1 = -1} : f32[2, 4, 16, s0] strided [s0*64, s0*16, 1, 16]
  %0 = matmul(%q, %kt) : f32[2, 4, s0, s0]
  %scale = constant() {value = 0.25} : float
  %1 = mul(%0, %scale) : f32[2, 4, s0, s0]
  %2 = softmax(%1) {dim = -1} : f32[2, 4, s0, s0]
  %3 = matmul(%2, %v) : f32[2, 4, s0, 16]
  return %3
}
)";

inline const char *const kTranspose = R"(graph @transpose(%x: f32[s0, 96]) {
  %0 = transpose(%x) {dim0 = 0, dim1 = 1} : f32[96, s0] strided [1, 96]
  %1 = contiguous(%0) : f32[96, s0]
  return %1
}
)";

} // namespace kiln::test

// Scheduling (passes/schedule): fusion decisions, kernel counts and text of the standard
// patterns, loop order, memory planning; every scheduled program is run through the interpreter
// (also kernel by kernel with its memory plan, so a wrong reuse shows) and compared with eager.

#include "ir/loop/interpreter.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "codegen/externs.h"
#include "passes/lower/lowering.h"
#include "passes/schedule/rebuild.h"
#include "passes/schedule/schedule.h"
#include "runtime/generator.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/random.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/softmax.h"
#include "runtime/ops/unary_math.h"

#include <cmath>
#include <kiln_catch.h>

using namespace kiln;
using ir::loop::BufferId;
using ir::loop::LoopNodeKind;
using ir::loop::LoopProgram;
using passes::schedule::KernelKind;
using passes::schedule::Schedule;
using passes::schedule::StorageKind;

namespace {

constexpr DType F32 = DType::Float32;

Tensor randn(Shape sizes) {
  static Generator gen(20261201);
  return ops::randn(sizes, F32, &gen);
}
Tensor scalar(double v) { return Tensor::wrapScalar(Scalar(v)); }

LoopProgram lower(const std::string &kir) {
  std::unique_ptr<ir::Graph> graph = ir::parseGraph(kir);
  ir::verifyOrThrow(*graph);
  return passes::lower::lowerGraph(*graph);
}

Schedule scheduled(const std::string &kir, bool fuse = true) {
  return passes::schedule::schedule(lower(kir), {.fuse = fuse});
}

void checkClose(const Tensor &actual, const Tensor &expected, double tol) {
  REQUIRE(actual.sizes() == expected.sizes());
  Tensor a = actual.to(DType::Float64).contiguous(), e = expected.to(DType::Float64).contiguous();
  for (int64_t k = 0; k < a.numel(); ++k) {
    double x = a.data<double>()[k], y = e.data<double>()[k];
    INFO("element " << k << ": " << x << " vs " << y);
    CHECK(std::abs(x - y) <= tol * std::max(1.0, std::abs(y)));
  }
}

std::vector<Tensor> interpret(const LoopProgram &p, const std::vector<Tensor> &inputs) {
  ir::loop::Interpreter interp(p);
  codegen::registerEagerExterns(interp);
  return interp.run(inputs);
}

/// Runs `s` node by node (each cut out with extractNode) with its memory plan: every allocated
/// buffer lives in its slot's memory, so two buffers that share a slot while both are live
/// corrupt each other and the result differs from eager.
std::vector<Tensor> runPlanned(const Schedule &s, const std::vector<Tensor> &inputs,
                               const ir::SymbolValues &symbols) {
  const LoopProgram &p = s.program;
  std::vector<Tensor> tensors(p.buffers().size());
  for (size_t k = 0; k < inputs.size(); ++k)
    tensors[p.inputs()[k].index] = inputs[k];
  std::vector<Tensor> slots;
  for (const passes::schedule::MemorySlot &m : s.slots) {
    const ir::TensorMeta &first = p.buffer(m.buffers[0]).meta;
    int64_t bytes = m.bytes.evaluate(symbols);
    slots.push_back(Tensor::empty({bytes / itemsize(first.dtype)}, first.dtype));
  }
  for (size_t n = 0; n < p.nodes().size(); ++n) {
    std::vector<BufferId> reads;
    LoopProgram one = passes::schedule::extractNode(p, n, reads);
    std::vector<Tensor> in;
    for (BufferId id : reads)
      in.push_back(tensors[id.index]);
    ir::loop::Interpreter interp(one);
    codegen::registerEagerExterns(interp);
    for (const auto &[name, value] : symbols)
      interp.bind(name, value);
    std::vector<Tensor> out = interp.run(in);
    for (size_t k = 0; k < out.size(); ++k) {
      BufferId id = p.nodes()[n].outputs[k];
      const passes::schedule::BufferPlan &plan = s.buffers[id.index];
      if (plan.kind != StorageKind::Allocated) {
        tensors[id.index] = out[k];
        continue;
      }
      Tensor view = slots[plan.slot].asStrided(out[k].sizes(), out[k].strides(), 0);
      view.copy_(out[k]);
      tensors[id.index] = view;
    }
  }
  std::vector<Tensor> results;
  for (BufferId id : p.outputs())
    results.push_back(tensors[id.index]);
  return results;
}

/// Checks the fused schedule of `kir` against `expected`, run whole and by its memory plan.
void checkNumerics(const Schedule &s, const std::vector<Tensor> &inputs,
                   const std::vector<Tensor> &expected, const ir::SymbolValues &symbols,
                   double tol = 1e-4) {
  INFO(s.str());
  std::vector<Tensor> whole = interpret(s.program, inputs),
                      planned = runPlanned(s, inputs, symbols);
  REQUIRE(whole.size() == expected.size());
  for (size_t k = 0; k < expected.size(); ++k) {
    checkClose(whole[k], expected[k], tol);
    checkClose(planned[k], expected[k], tol);
  }
}

size_t countStorage(const Schedule &s, StorageKind kind) {
  size_t n = 0;
  for (const passes::schedule::BufferPlan &b : s.buffers)
    n += b.kind == kind;
  return n;
}

const char *kSoftmax = R"(graph @softmax(%x: f32[s0, 128]) {
  %0 = softmax(%x) {dim = -1} : f32[s0, 128]
  return %0
}
)";

const char *kLayerNorm = R"(graph @layer_norm(%x: f32[s0, 64], %w: f32[64], %b: f32[64]) {
  %0 = layer_norm(%x, %w, %b) {normalized_shape = [64]} : f32[s0, 64]
  return %0
}
)";

const char *kRmsNorm = R"(graph @rms_norm(%x: f32[s0, 64], %w: f32[64]) {
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

const char *kGeluMlp = R"(graph @gelu_mlp(%x: f32[s0, 32], %w1: f32[128, 32], %b1: f32[128],
                 %w2: f32[32, 128], %b2: f32[32]) {
  %0 = linear(%x, %w1, %b1) : f32[s0, 128]
  %1 = gelu(%0) {approximate = "tanh"} : f32[s0, 128]
  %2 = linear(%1, %w2, %b2) : f32[s0, 32]
  return %2
}
)";

const char *kAttention = R"(graph @attention(%q: f32[2, 4, s0, 16], %k: f32[2, 4, s0, 16],
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

} // namespace

TEST_CASE("softmax is one kernel: max, exp-sum and the output loop share the row loop",
          "[schedule][golden]") {
  Schedule s = scheduled(kSoftmax);
  CHECK(s.str() == R"(// kernels: 1, local buffers: 2, allocated buffers: 0 in 0 memory slots
input buf0: f32[s0, 128]
kernel k0 loop [s0] parallel i0 {
  buf1: f32[s0] local = reduction max [s0] over [128] order [i0, r0] vector r0 {
    %0 = load buf0[i0*128 + r0]
    yield %0
  }
  buf2: f32[s0] local = reduction sum [s0] over [128] order [i0, r0] vector r0 {
    %0 = load buf0[i0*128 + r0]
    %1 = load buf1[i0]
    %2 = sub %0, %1
    %3 = exp %2
    yield %3
  }
  buf3: f32[s0, 128] output = pointwise [s0, 128] order [i0, i1] vector i1 {
    %0 = load buf0[i0*128 + i1]
    %1 = load buf1[i0]
    %2 = sub %0, %1
    %3 = exp %2
    %4 = load buf2[i0]
    %5 = div 1.0, %4
    %6 = mul %3, %5
    yield %6
  }
}
return buf3
)");
  for (int64_t s0 : {1, 7}) {
    Tensor x = ops::mul(randn({s0, 128}), scalar(10.0));
    checkNumerics(s, {x}, {ops::softmax(x, -1)}, {{"s0", s0}});
  }
}

TEST_CASE("a batch of one: loops of extent 1 do not stop rows from sharing a kernel",
          "[schedule]") {
  // Attention's softmax at batch 1: the row max read as buf1[i0*12*s0 + i1*s0 + i2] is the
  // point (0, i1, i2), so the kernel shares all three row loops and keeps both row values in
  // registers; the rows (12 * s0) are what is split over threads.
  Schedule s = scheduled(R"(graph @g(%x: f32[1, 12, s0, 64]) {
  %0 = softmax(%x) {dim = -1} : f32[1, 12, s0, 64]
  return %0
}
)");
  REQUIRE(s.kernels.size() == 1);
  CHECK(s.kernels[0].outer.size() == 3);
  CHECK(s.kernels[0].parallel == "i0*i1*i2");
  CHECK(countStorage(s, StorageKind::Local) == 2);
  CHECK(countStorage(s, StorageKind::Allocated) == 0);
  for (int64_t s0 : {1, 5}) {
    Tensor x = ops::mul(randn({1, 12, s0, 64}), scalar(10.0));
    checkNumerics(s, {x}, {ops::softmax(x, -1)}, {{"s0", s0}});
  }
}

TEST_CASE("layer_norm and rms_norm are one kernel each", "[schedule]") {
  Schedule ln = scheduled(kLayerNorm);
  REQUIRE(ln.kernels.size() == 1);
  CHECK(ln.kernels[0].nodes.size() == 3); // welford, rstd per row, the output
  CHECK(ln.program.nodes()[0].reduction == ir::loop::ReductionKind::Welford);
  CHECK(countStorage(ln, StorageKind::Allocated) == 0);
  Schedule rms = scheduled(kRmsNorm);
  REQUIRE(rms.kernels.size() == 1);
  // x*x is a prologue of the sum; mean's division and + eps are inlined into rsqrt, which is
  // computed once per row (not inlined into the broadcast multiply: that would repeat rsqrt).
  CHECK(rms.kernels[0].nodes.size() == 3);
  CHECK(rms.str().find("rsqrt") != std::string::npos);
  CHECK(rms.program.nodes()[1].ranges == std::vector<ir::SymInt>{ir::SymInt::symbol("s0"), 1});
  for (int64_t s0 : {1, 5}) {
    Tensor x = ops::add(randn({s0, 64}), scalar(2.0)), w = randn({64}), b = randn({64});
    checkNumerics(ln, {x, w, b}, {ops::layerNorm(x, Shape{64}, w, b, 1e-5)}, {{"s0", s0}});
    checkNumerics(rms, {x, w}, {ops::rmsNorm(x, Shape{64}, w, 1e-6)}, {{"s0", s0}});
  }
}

TEST_CASE("a GELU MLP tail is two GEMMs with fused epilogues", "[schedule]") {
  Schedule s = scheduled(kGeluMlp);
  REQUIRE(s.kernels.size() == 2);
  for (const passes::schedule::Kernel &k : s.kernels) {
    CHECK(k.kind == KernelKind::Extern);
    REQUIRE(k.nodes.size() == 2); // the GEMM, then bias (+ gelu) as one pointwise epilogue
    CHECK(s.program.nodes()[k.nodes[0]].externOp == "linear");
    CHECK(s.program.nodes()[k.nodes[1]].kind == LoopNodeKind::Pointwise);
  }
  std::string epilogue = s.program.nodes()[1].body->str();
  CHECK(epilogue.find("tanh") != std::string::npos);
  CHECK(epilogue.find("load buf2[i1]") != std::string::npos); // the bias, inlined
  for (int64_t s0 : {1, 6}) {
    Tensor x = randn({s0, 32}), w1 = randn({128, 32}), b1 = randn({128}), w2 = randn({32, 128});
    Tensor b2 = randn({32});
    Tensor expected =
        ops::linear(ops::gelu(ops::linear(x, w1, b1), "tanh"), w2, std::optional<Tensor>(b2));
    checkNumerics(s, {x, w1, b1, w2, b2}, {expected}, {{"s0", s0}});
  }
}

TEST_CASE("attention: GEMM, one softmax kernel with the scale inlined, GEMM", "[schedule]") {
  Schedule s = scheduled(kAttention);
  REQUIRE(s.kernels.size() == 3);
  CHECK(s.kernels[0].kind == KernelKind::Extern);
  CHECK(s.kernels[1].kind == KernelKind::Loop);
  CHECK(s.kernels[1].nodes.size() == 3);
  CHECK(s.kernels[2].kind == KernelKind::Extern);
  CHECK(s.program.nodes()[0].attributes.count("transpose_b") == 1); // no copy of k^T
  CHECK(countStorage(s, StorageKind::Local) == 2);                  // the row max and row sum
  CHECK(countStorage(s, StorageKind::Allocated) == 2);              // scores and probabilities
  for (int64_t s0 : {1, 5}) {
    Tensor q = randn({2, 4, s0, 16}), k = randn({2, 4, s0, 16}), v = randn({2, 4, s0, 16});
    Tensor p = ops::softmax(ops::mul(ops::matmul(q, k.transpose(-2, -1)), scalar(0.25)), -1);
    checkNumerics(s, {q, k, v}, {ops::matmul(p, v)}, {{"s0", s0}});
  }
}

TEST_CASE("pointwise chains inline; an expensive value read twice is computed once",
          "[schedule][fusion]") {
  Schedule chain = scheduled(R"(graph @g(%x: f32[8, 16], %y: f32[16]) {
  %one = constant() {value = 1.0} : float
  %0 = mul(%x, %y) : f32[8, 16]
  %1 = add(%0, %one) : f32[8, 16]
  %2 = exp(%1) : f32[8, 16]
  %3 = tanh(%2) : f32[8, 16]
  return %3
}
)");
  CHECK(chain.program.nodes().size() == 1);
  CHECK(chain.program.buffers().size() == 3); // two inputs, one output: nothing in between
  Schedule shared = scheduled(R"(graph @g(%x: f32[8, 16]) {
  %0 = exp(%x) : f32[8, 16]
  %1 = add(%0, %0) : f32[8, 16]
  %2 = mul(%0, %x) : f32[8, 16]
  %3 = sub(%1, %2) : f32[8, 16]
  %4 = neg(%0) : f32[8, 16]
  return %3, %4
}
)");
  // exp has two readers: it is materialized, once, inside the one kernel they share.
  REQUIRE(shared.kernels.size() == 1);
  CHECK(shared.program.nodes().size() == 3);
  size_t exps = 0;
  for (const ir::loop::LoopNode &n : shared.program.nodes())
    exps += n.body->str().find("exp") != std::string::npos;
  CHECK(exps == 1);
  CHECK(shared.buffers[1].kind == StorageKind::Allocated); // a whole tile: not a register
  Tensor x = randn({8, 16}), y = randn({16});
  Tensor e = ops::exp(x);
  checkNumerics(chain, {x, y}, {ops::tanh(ops::exp(ops::add(ops::mul(x, y), scalar(1.0))))}, {});
  checkNumerics(shared, {x}, {ops::sub(ops::add(e, e), ops::mul(e, x)), ops::neg(e)}, {});
}

TEST_CASE("cheap producers are recomputed by each reader; reductions never are",
          "[schedule][fusion]") {
  Schedule s = scheduled(R"(graph @g(%x: f32[s0, 32]) {
  %two = constant() {value = 2.0} : float
  %0 = mul(%x, %two) : f32[s0, 32]
  %1 = sum(%0) {dim = [1], keepdim = true} : f32[s0, 1]
  %2 = amax(%0) {dim = [1], keepdim = true} : f32[s0, 1]
  %3 = add(%1, %2) : f32[s0, 1]
  %4 = sub(%0, %3) : f32[s0, 32]
  %5 = mul(%4, %1) : f32[s0, 32]
  return %5
}
)");
  // x*2 is inlined into the sum, the max and the output; the sum (read twice) stays a node.
  REQUIRE(s.kernels.size() == 1);
  CHECK(s.program.nodes().size() == 3);
  CHECK(s.program.nodes()[0].kind == LoopNodeKind::Reduction);
  CHECK(s.program.nodes()[1].kind == LoopNodeKind::Reduction);
  for (const ir::loop::LoopNode &n : s.program.nodes())
    CHECK(n.body->str().find("mul %0, 2.0") != std::string::npos);
  for (int64_t s0 : {1, 3}) {
    Tensor x = randn({s0, 32}), d = ops::mul(x, scalar(2.0));
    Tensor sum = ops::sum(d, Shape{1}, true), mx = ops::amax(d, Shape{1}, true);
    checkNumerics(s, {x}, {ops::mul(ops::sub(d, ops::add(sum, mx)), sum)}, {{"s0", s0}});
  }
}

TEST_CASE("independent loops over the same range share a kernel (horizontal fusion)",
          "[schedule][fusion]") {
  Schedule s = scheduled(R"(graph @g(%x: f32[s0, 32], %y: f32[s0, 32], %z: f32[7]) {
  %0 = sum(%x) {dim = [1]} : f32[s0]
  %1 = exp(%z) : f32[7]
  %2 = amax(%y) {dim = [1]} : f32[s0]
  %3 = var(%x) {dim = [1]} : f32[s0]
  return %0, %1, %2, %3
}
)");
  // sum, amax and var run in one kernel over [s0]; exp over [7] is on its own.
  REQUIRE(s.kernels.size() == 2);
  CHECK(s.kernels[0].nodes.size() == 4); // sum, amax, welford, var's epilogue
  CHECK(s.kernels[0].outer == std::vector<ir::SymInt>{ir::SymInt::symbol("s0")});
  CHECK(s.kernels[1].nodes.size() == 1);
  Tensor x = randn({4, 32}), y = randn({4, 32}), z = randn({7});
  checkNumerics(s, {x, y, z},
                {ops::sum(x, Shape{1}), ops::exp(z), ops::amax(y, Shape{1}), ops::var(x, Shape{1})},
                {{"s0", 4}});
}

TEST_CASE("each node's lane: a reduced row, else the innermost range; tiles for transposes",
          "[schedule]") {
  using passes::schedule::LaneKind;
  Schedule t = scheduled(R"(graph @g(%a: f32[9, s0] strided [1, 9], %b: f32[9, s0]) {
  %0 = add(%a, %b) : f32[9, s0]
  return %0
}
)");
  // The store is unit-stride in i1: that is the lane; %a is strided along it and unit-stride
  // along i0, so i0 is walked in blocks with it.
  CHECK(t.loops[0].vars == std::vector<std::string>{"i0", "i1"});
  CHECK(t.loops[0].lane == LaneKind::Range);
  CHECK(t.loops[0].laneVar == "i1");
  CHECK(t.loops[0].tileVar == "i0");
  CHECK(t.kernels[0].parallel == "i0");
  Schedule r = scheduled(R"(graph @g(%x: f32[s0, 64]) {
  %0 = sum(%x) {dim = [0]} : f32[64]
  return %0
}
)");
  // A sum over dim 0 is strided along r0: it vectorizes across its outputs (i0) instead.
  CHECK(r.loops[0].vars == std::vector<std::string>{"i0", "r0"});
  CHECK(r.loops[0].lane == LaneKind::Range);
  CHECK(r.loops[0].laneVar == "i0");
  Schedule g = scheduled(R"(graph @g(%x: f32[s0, 8], %i: i64[5]) {
  %0 = index_select(%x, %i) {dim = 0} : f32[5, 8]
  %1 = sum(%0) {dim = [1]} : f32[5]
  return %1
}
)");
  const ir::loop::LoopNode &gather = g.program.nodes().back();
  REQUIRE(gather.kind == LoopNodeKind::Reduction);
  CHECK(g.loops.back().lane == LaneKind::Reduce); // contiguous along r0 despite the gather
  Schedule plain = scheduled(kSoftmax);
  for (size_t n : {0, 1})
    CHECK(plain.loops[n].laneVar == "r0");
  CHECK(plain.loops[2].laneVar == "i1");
  CHECK(plain.loops[2].tileVar.empty());
  Tensor a = randn({5, 9}).t(), b = randn({9, 5}), x = randn({5, 64});
  checkNumerics(t, {a, b}, {ops::add(a, b)}, {{"s0", 5}});
  checkNumerics(r, {x}, {ops::sum(x, Shape{0})}, {{"s0", 5}});
}

TEST_CASE("a node whose lane a shared loop would take stays out of the kernel, or runs scalar "
          "when it reads a value per row",
          "[schedule]") {
  using passes::schedule::LaneKind;
  // Two independent sums over the same rows: the second joins, and the shared loop is the row.
  Schedule rows = scheduled(R"(graph @g(%x: f32[s0, 64], %y: f32[s0, 64]) {
  %0 = sum(%x) {dim = [1]} : f32[s0]
  %1 = sum(%y) {dim = [1]} : f32[s0]
  return %0, %1
}
)");
  CHECK(rows.kernels.size() == 1);
  // Two independent one-loop pointwise nodes: sharing their only loop would make both scalar.
  Schedule flat = scheduled(R"(graph @g(%x: f32[s0], %y: f32[s0]) {
  %0 = exp(%x) : f32[s0]
  %1 = exp(%y) : f32[s0]
  return %0, %1
}
)");
  CHECK(flat.kernels.size() == 2);
  // layer_norm's rstd per row reads the statistics: it joins and runs once per row, scalar,
  // in a register; the output keeps its lane (i1).
  Schedule ln = scheduled(kLayerNorm);
  REQUIRE(ln.kernels.size() == 1);
  CHECK(ln.kernels[0].outer.size() == 1);
  CHECK(ln.loops[1].lane == LaneKind::None);
  CHECK(ln.loops[2].laneVar == "i1");
  Tensor x = randn({3, 64}), y = randn({3, 64}), v = randn({7}), w = randn({7});
  checkNumerics(rows, {x, y}, {ops::sum(x, Shape{1}), ops::sum(y, Shape{1})}, {{"s0", 3}});
  checkNumerics(flat, {v, w}, {ops::exp(v), ops::exp(w)}, {{"s0", 7}});
}

TEST_CASE("a GEMM's result is memory of its own, overwritten in place by its epilogue",
          "[schedule][memory]") {
  Schedule s = scheduled(R"(graph @g(%x: f32[s0, 16], %w: f32[16, 16]) {
  %0 = matmul(%x, %w) : f32[s0, 16]
  %1 = exp(%0) : f32[s0, 16]
  %2 = matmul(%1, %w) : f32[s0, 16]
  %3 = tanh(%2) : f32[s0, 16]
  %4 = matmul(%3, %w) : f32[s0, 16]
  %5 = relu(%4) : f32[s0, 16]
  return %5
}
)");
  REQUIRE(s.kernels.size() == 3);
  // Five intermediates in three slots: each GEMM's result is the memory the library call
  // returned (never reused by another kernel: the next GEMM allocates its own), and each
  // epilogue overwrites it in place (it is that buffer's only reader and reads it point by
  // point), which extends the slot's span to the epilogue's reader.
  CHECK(countStorage(s, StorageKind::Allocated) == 5);
  REQUIRE(s.slots.size() == 3);
  for (const passes::schedule::MemorySlot &m : s.slots)
    CHECK(m.external);
  CHECK(s.str().find("memory mem0 (extern result): s0*64 bytes for buf2, buf3, in use k0..k1") !=
        std::string::npos);
  CHECK(s.str().find("memory mem1 (extern result): s0*64 bytes for buf4, buf5, in use k1..k2") !=
        std::string::npos);
  // Liveness: buffers sharing a slot never overlap, except a hand-over inside one kernel.
  std::vector<int> kernelOf(s.program.nodes().size());
  for (size_t k = 0; k < s.kernels.size(); ++k)
    for (size_t n : s.kernels[k].nodes)
      kernelOf[n] = static_cast<int>(k);
  std::vector<std::pair<int, int>> live(s.program.buffers().size(), {-1, -1});
  for (size_t n = 0; n < s.program.nodes().size(); ++n) {
    for (BufferId id : s.program.nodes()[n].outputs)
      live[id.index] = {kernelOf[n], kernelOf[n]};
    for (BufferId id : s.program.nodes()[n].reads())
      live[id.index].second = std::max(live[id.index].second, kernelOf[n]);
  }
  for (const passes::schedule::MemorySlot &m : s.slots)
    for (size_t a = 0; a + 1 < m.buffers.size(); ++a)
      CHECK(live[m.buffers[a].index].second <= live[m.buffers[a + 1].index].first);
  for (int64_t s0 : {1, 4}) {
    Tensor x = randn({s0, 16}), w = randn({16, 16});
    Tensor expected =
        ops::relu(ops::matmul(ops::tanh(ops::matmul(ops::exp(ops::matmul(x, w)), w)), w));
    checkNumerics(s, {x, w}, {expected}, {{"s0", s0}});
  }
}

TEST_CASE("without fusion every lowered node is its own kernel", "[schedule]") {
  for (const char *kir : {kSoftmax, kLayerNorm, kRmsNorm, kGeluMlp, kAttention}) {
    LoopProgram p = lower(kir);
    Schedule s = passes::schedule::schedule(p, {.fuse = false});
    INFO(s.str());
    CHECK(s.kernels.size() == s.program.nodes().size());
    CHECK(s.program.nodes().size() <= p.nodes().size()); // only dead nodes are dropped
    CHECK(scheduled(kir).kernels.size() < s.kernels.size());
  }
}

TEST_CASE("extractNode cuts one node out as a program of its own", "[schedule]") {
  LoopProgram p = lower(kSoftmax);
  std::vector<BufferId> reads;
  LoopProgram one = passes::schedule::extractNode(p, 1, reads); // the exp-sum reduction
  REQUIRE(reads.size() == 2);
  CHECK(one.str() == R"(input buf0: f32[s0, 128]
input buf1: f32[s0]
buf2: f32[s0] = reduction sum [s0] over [128] {
  %0 = load buf0[i0*128 + r0]
  %1 = load buf1[i0]
  %2 = sub %0, %1
  %3 = exp %2
  yield %3
}
return buf2
)");
}

TEST_CASE("the planned run catches a slot shared by two live buffers", "[schedule][memory]") {
  Schedule s = scheduled(R"(graph @g(%x: f32[8, 8], %w: f32[8, 8]) {
  %0 = matmul(%x, %w) : f32[8, 8]
  %1 = matmul(%0, %w) : f32[8, 8]
  %2 = matmul(%1, %w) : f32[8, 8]
  %3 = add(%2, %0) : f32[8, 8]
  return %3
}
)");
  // %0 is read again in the last kernel, so %1 must not take its slot.
  REQUIRE(s.buffers[2].kind == StorageKind::Allocated);
  REQUIRE(s.buffers[3].kind == StorageKind::Allocated);
  CHECK(s.buffers[2].slot != s.buffers[3].slot);
  Tensor x = randn({8, 8}), w = randn({8, 8});
  Tensor a = ops::matmul(x, w), expected = ops::add(ops::matmul(ops::matmul(a, w), w), a);
  checkNumerics(s, {x, w}, {expected}, {});
  Schedule wrong = s;
  wrong.buffers[3].slot = wrong.buffers[2].slot;
  Tensor bad = runPlanned(wrong, {x, w}, {})[0];
  CHECK(ops::amax(ops::abs(ops::sub(bad, expected))).item().toDouble() > 1e-3);
}

// CUDA code generation without a GPU, numerics (codegen/cuda): the emitted kernels of every prim,
// cast and reduction kind of the loop IR and of the fused patterns of the schedule tests run on
// the host emulator, launched as planLaunches says, and are compared against the interpreter.
// Without a host C++ compiler the runs are skipped with a message.

#include "codegen/cuda/emit.h"
#include "codegen/cuda/host_emulator.h"
#include "codegen/cuda/launch_plan.h"
#include "codegen/externs.h"
#include "ir/loop/interpreter.h"
#include "ir/loop/program.h"
#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/random.h"
#include "tests/cpp/cuda_test_util.h"

#include <kiln_catch.h>

#include <limits>
#include <map>
#include <memory>
#include <set>

using namespace kiln;
using namespace kiln::ir;
using namespace kiln::ir::loop;
using namespace kiln::codegen::cuda;
using namespace kiln::test;

namespace {

/// Small grids (at most 3 blocks of 64 threads) so every grid-stride loop wraps around, and
/// split reductions from 200 points on.
LaunchLimits emulatedLimits() {
  LaunchLimits l;
  l.multiprocessors = 1;
  l.blocksPerMultiprocessor = 3;
  l.splitMinPoints = 200;
  l.pointsPerChunk = 64;
  return l;
}

/// A buffer of `meta` with `symbols`, filled with a value no kernel writes by accident.
Tensor allocate(const TensorMeta &meta, const SymbolValues &symbols) {
  Shape sizes, strides;
  int64_t extent = 1;
  for (size_t k = 0; k < meta.sizes.size(); ++k) {
    sizes.push_back(meta.sizes[k].evaluate(symbols));
    strides.push_back(meta.strides[k].evaluate(symbols));
    extent += (sizes.back() - 1) * strides.back();
  }
  Tensor flat = Tensor::empty({std::max<int64_t>(extent, 1)}, meta.dtype);
  flat.fill_(isFloating(meta.dtype) ? Scalar(std::nan(""))
                                    : Scalar(int64_t{meta.dtype != DType::Bool ? 77 : 1}));
  return flat.asStrided(sizes, strides, 0);
}

/// The emulator of a module, compiled once per source text.
const HostEmulator &emulatorFor(const CudaModule &m) {
  static std::map<std::string, std::unique_ptr<HostEmulator>> cache;
  std::unique_ptr<HostEmulator> &e = cache[m.source];
  if (!e)
    e = std::make_unique<HostEmulator>(m);
  return *e;
}

/// Runs the kernels of `m` (emitted from `p`) on the host emulator as planLaunches says, over
/// buffers bound like the interpreter's (`interp` has run `p`; extern nodes take its results).
/// Returns every buffer; `ran` collects the roles of the kernels launched.
/// `inputs`, when given, replaces the interpreter's inputs (in order; same sizes).
std::vector<Tensor> emulate(const passes::schedule::Schedule &s, const CudaModule &m,
                            const Interpreter &interp, std::set<KernelRole> *ran = nullptr,
                            std::span<const Tensor> inputs = {}) {
  const LoopProgram &p = s.program;
  const SymbolValues &symbols = interp.symbols();
  const HostEmulator &emulator = emulatorFor(m);
  std::vector<Tensor> buffers;
  size_t nextInput = 0;
  for (const Buffer &b : p.buffers()) {
    if (b.kind != BufferKind::Input)
      buffers.push_back(allocate(b.meta, symbols));
    else if (inputs.empty())
      buffers.push_back(interp.tensor(b.id));
    else
      buffers.push_back(inputs[nextInput++]);
  }
  std::vector<uint64_t> addresses;
  for (const Tensor &t : buffers)
    addresses.push_back(reinterpret_cast<uint64_t>(t.rawData()));
  int64_t indexError[3] = {0, 0, 0};
  auto launch = [&](const KernelLaunch &l, uint64_t workspace) {
    std::vector<uint64_t> args =
        launchArguments(l, symbols, addresses, workspace, reinterpret_cast<uint64_t>(indexError));
    emulator.launch(*l.kernel, args, l.grid, std::min(l.block, 64));
    if (ran)
      ran->insert(l.kernel->role);
  };
  for (const CudaStep &step : m.steps) {
    if (step.kind == CudaStep::Kind::Extern) {
      for (BufferId out : p.nodes()[step.index].outputs)
        buffers[out.index].copy_(interp.tensor(out));
    } else if (step.kind == CudaStep::Kind::Fused) {
      KernelLaunch l = planFused(m.fused[step.index], symbols, emulatedLimits());
      if (l.grid > 0)
        launch(l, 0);
    } else {
      std::vector<uint64_t> workspace;
      for (const KernelLaunch &l :
           planLaunches(p, m.nodes[step.index], symbols, addresses, emulatedLimits())) {
        if (l.workspaceBytes && workspace.empty())
          workspace.resize(static_cast<size_t>(l.workspaceBytes) / 8 + 1);
        launch(l, reinterpret_cast<uint64_t>(workspace.data()));
      }
    }
  }
  // As CudaProgram does once the program has run.
  if (indexError[0])
    fail(ErrorKind::Index, "{}", indexOutOfRange(indexError[1], indexError[2]));
  return buffers;
}

/// Runs `s` on the interpreter and, with and without vector kernels, on the host emulator;
/// compares every buffer the program writes to memory. Returns the roles of the kernels that
/// ran.
std::set<KernelRole> checkOnHost(const passes::schedule::Schedule &s,
                                 const std::vector<Tensor> &inputs, const SymbolValues &bind = {},
                                 double tolScale = 1) {
  const LoopProgram &p = s.program;
  Interpreter interp(p);
  codegen::registerEagerExterns(interp);
  for (const auto &[name, value] : bind)
    interp.bind(name, value);
  interp.run(inputs);
  std::set<KernelRole> ran;
  for (bool vectorize : {true, false}) {
    INFO((vectorize ? "with" : "without") << " vector kernels");
    CudaModule m = emitCuda(s, {.vectorize = vectorize});
    std::vector<Tensor> buffers = emulate(s, m, interp, &ran);
    for (const Buffer &b : p.buffers()) {
      if (b.kind == BufferKind::Input ||
          s.buffers[b.id.index].kind == passes::schedule::StorageKind::Local)
        continue;
      INFO(b.name() << " " << dtypeName(b.meta.dtype));
      checkClose(buffers[b.id.index], interp.tensor(b.id), tolerance(b.meta.dtype) * tolScale);
    }
  }
  return ran;
}

/// The host emulator, or null after a message saying why numerics are not checked.
bool emulatorOrSkip() {
  if (HostEmulator::findCompiler())
    return true;
  KILN_SKIP("host emulation skipped: no C++ compiler (set CXX)");
  return false;
}

Tensor randn(Shape sizes, DType dtype = F32) {
  static Generator gen(20261201);
  return ops::randn(sizes, F32, &gen).to(dtype);
}

} // namespace

TEST_CASE("emulated: add-relu, both paths, aligned and misaligned views", "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  LoopProgram p = addReluProgram();
  using Roles = std::set<KernelRole>;
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {5, 16}, {33, 132}}) {
    INFO(rows << "x" << cols);
    Tensor x = randn({rows, cols}), b = randn({cols});
    Roles ran = checkOnHost(unfused(p), {x, b});
    CHECK(ran.count(KernelRole::PointwiseVector) == (cols % 4 == 0));
    // The bias one element into its storage: misaligned, so only the scalar kernel runs.
    Tensor shifted = randn({cols + 1}).narrow(0, 1, cols);
    CHECK(checkOnHost(unfused(p), {x, shifted}) == Roles{KernelRole::Pointwise});
  }
  // The comparison can fail: a kernel that adds the bias twice is caught.
  Interpreter interp(p);
  Tensor x = randn({3, 8}), b = randn({8});
  interp.run({x, b});
  passes::schedule::Schedule s = unfused(p);
  CudaModule m = emitCuda(s);
  size_t at = m.source.rfind("v0 + v1");
  REQUIRE(at != std::string::npos);
  m.source.replace(at, 7, "v0 + v1 + v1");
  Tensor wrong = emulate(s, m, interp)[2];
  CHECK(values(wrong) != values(interp.tensor(BufferId{2})));
}

namespace {

/// Values of dtype `t` for the emulated prims: `kind` 0 any (floats start with NaN, infinities,
/// signed zeros, values past every integer range and float16's, halfway cases), 1 a divisor
/// (nonzero integers of both signs), 2 an integer exponent in [0, 4].
Tensor special(DType t, int64_t n, int kind) {
  static Generator gen(20261202);
  Tensor out = Tensor::empty({n}, DType::Float64);
  Tensor r = ops::randn({n}, DType::Float64, &gen);
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> floats = {
      std::nan(""), inf,     -inf, -0.0, 0.0,  0.5,   -2.5,   1e-3,   60000.0, 65520.0,
      1e30,         -1.5e19, 1e19, 4e9,  -3e9, 255.9, -129.0, 2.5e-8, 1.0e-40, 33554433.0};
  for (int64_t k = 0; k < n; ++k) {
    double g = r.data<double>()[k], v;
    double small = std::round(g * 3);
    if (isFloating(t))
      v = kind == 0 && k < static_cast<int64_t>(floats.size()) ? floats[k] : 3 * g;
    else if (t == DType::Bool)
      v = g > 0;
    else if (kind == 2)
      v = std::min(std::abs(small), 4.0);
    else if (kind == 1)
      v = t == DType::UInt8 ? 1 + std::abs(small) : (g < 0 ? -1 : 1) * (1 + std::abs(small));
    else if (t == DType::UInt8)
      v = std::min(std::abs(std::round(g * 80)), 255.0);
    else
      v = k == 0 ? (t == DType::Int8    ? -128
                    : t == DType::Int16 ? -32768
                                        : -2147483648.0)
                 : std::round(g * 60);
    out.data<double>()[k] = v;
  }
  return out.to(t);
}

} // namespace

TEST_CASE("emulated: every prim of loop.def on special values", "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  LoopProgram p;
  SymInt s0 = sym("s0");
  std::map<DType, std::array<BufferId, 3>> in;
  std::vector<Tensor> inputs;
  const int64_t n = 48; // a multiple of every vector width (2 to 16 lanes)
  for (DType t : kAllDTypes)
    for (int kind = 0; kind < 3; ++kind) {
      in[t][kind] = p.addInput(t, {s0});
      inputs.push_back(special(t, n, kind));
    }
  for (const PrimRow &row : primRows())
    for (DType t : kAllDTypes) {
      if (!admits(row.rule, t))
        continue;
      p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) {
        std::vector<Val> args;
        if (row.rule == TypeRule::Select)
          args.push_back(ops.load(in[DType::Bool][0], {i[0]}));
        args.push_back(ops.load(in[t][0], {i[0]}));
        // Further operands: a divisor, an integer exponent (pow), philox's word select in [0, 4].
        for (int k = 1; k < row.arity - (row.rule == TypeRule::Select); ++k)
          args.push_back(ops.load(in[t][row.kind == ExprKind::Pow ? 2 : k], {i[0]}));
        return row.apply(ops, args);
      }));
    }
  CHECK(checkOnHost(unfused(p), inputs).count(KernelRole::PointwiseVector) == 1);
}

TEST_CASE("emulated: every cast between dtypes on special values", "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  LoopProgram p;
  SymInt s0 = sym("s0");
  std::vector<Tensor> inputs;
  std::map<DType, BufferId> in;
  for (DType t : kAllDTypes) {
    in[t] = p.addInput(t, {s0});
    inputs.push_back(special(t, 48, 0));
  }
  for (DType from : kAllDTypes)
    for (DType to : kAllDTypes)
      if (from != to)
        p.markOutput(p.pointwise(
            {s0}, [&](Ops &ops, Idx i) { return ops.cast(ops.load(in[from], {i[0]}), to); }));
  CHECK(checkOnHost(unfused(p), inputs).count(KernelRole::PointwiseVector) == 1);
}

TEST_CASE("emulated: every reduction kind and dtype as rows, columns and split reductions",
          "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  LoopProgram p;
  SymInt s0 = sym("s0"), s1 = sym("s1");
  std::vector<Tensor> inputs;
  std::map<DType, std::array<BufferId, 2>> in; // values with ties (and NaNs), values near 1
  static Generator gen(20261203);
  for (DType t : kAllDTypes) {
    Tensor g = ops::randn({5, 77}, DType::Float64, &gen);
    Tensor ties = Tensor::empty({5, 77}, DType::Float64), near1 = ties.clone();
    for (int64_t k = 0; k < 5 * 77; ++k) {
      double v = g.data<double>()[k];
      ties.data<double>()[k] = t == DType::UInt8 ? std::abs(std::round(v * 2)) : std::round(v * 2);
      near1.data<double>()[k] = isFloating(t) ? 1 + v / 50 : (v > 0.5 ? 2 : v < -1 ? -1 : 1);
    }
    if (isFloating(t)) {
      ties.data<double>()[77 + 5] = std::nan(""); // row 1: NaN wins max/min/argmax/argmin
      ties.data<double>()[2 * 77 + 40] = std::nan("");
      ties.data<double>()[2 * 77 + 10] = std::nan(""); // row 2: the first NaN
    }
    for (int k = 0; k < 2; ++k) {
      in[t][k] = p.addInput(t, {s0, s1});
      inputs.push_back((k ? near1 : ties).to(t == DType::Bool ? DType::Int64 : t).to(t));
    }
  }
  for (ReductionKind kind :
       {ReductionKind::Sum, ReductionKind::Prod, ReductionKind::Max, ReductionKind::Min,
        ReductionKind::ArgMax, ReductionKind::ArgMin, ReductionKind::Welford})
    for (DType t : kAllDTypes) {
      bool numeric = kind == ReductionKind::Sum || kind == ReductionKind::Prod;
      if ((numeric && t == DType::Bool) || (kind == ReductionKind::Welford && !isFloating(t)))
        continue;
      BufferId x = in[t][kind == ReductionKind::Prod];
      auto rows = [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1]}); };
      auto cols = [&](Ops &ops, Idx i) { return ops.load(x, {i[1], i[0]}); };
      if (kind == ReductionKind::Welford) {
        for (const WelfordBuffers &w : {p.welford({s0}, {s1}, rows), p.welford({s1}, {s0}, cols),
                                        p.welford({}, {s0, s1}, rows)})
          for (BufferId id : {w.mean, w.m2, w.count})
            p.markOutput(id);
      } else {
        p.markOutput(p.reduction(kind, {s0}, {s1}, rows));
        p.markOutput(p.reduction(kind, {s1}, {s0}, cols));
        p.markOutput(p.reduction(kind, {}, {s0, s1}, rows));
      }
    }
  std::set<KernelRole> ran = checkOnHost(unfused(p), inputs);
  CHECK(ran == std::set<KernelRole>{KernelRole::ReduceBlock, KernelRole::ReduceThread,
                                    KernelRole::ReducePartial, KernelRole::ReduceFinal});
}

TEST_CASE("emulated: the fused schedule patterns match the interpreter", "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  for (int64_t s0 : {1, 6}) {
    INFO("s0 = " << s0);
    Tensor x = ops::mul(randn({s0, 128}), Tensor::wrapScalar(Scalar(10.0)));
    checkOnHost(scheduled(kSoftmax), {x});
    Tensor y = randn({s0, 64}), w = randn({64}), b = randn({64});
    checkOnHost(scheduled(kLayerNorm), {y, w, b});
    checkOnHost(scheduled(kRmsNorm), {y, w});
    Tensor h = randn({s0, 32}), w1 = randn({128, 32}), b1 = randn({128}), w2 = randn({32, 128});
    checkOnHost(scheduled(kGeluMlp), {h, w1, b1, w2, randn({32})});
    Tensor q = randn({2, 4, s0, 16}), k = randn({2, 4, s0, 16}), v = randn({2, 4, s0, 16});
    checkOnHost(scheduled(kAttention), {q, k, v});
  }
  // softmax with symbolic rows of 1000, node by node (a tail for the vector kernel: 1000 = 250 *
  // 4) and as one fused kernel (rows longer than a block).
  checkOnHost(unfused(softmaxProgram()), {randn({3, 1000})});
  checkOnHost(passes::schedule::schedule(softmaxProgram()), {randn({3, 1000})});
}

TEST_CASE("emulated: the CUDA code follows the schedule's kernels and launches",
          "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  // An optimizer-like step: independent small updates (points per thread) and a row sum (a row
  // per block) that the schedule puts in one launch.
  const char *kir = R"(graph @step(%p0: f32[64], %g0: f32[64], %p1: f32[32, 16], %g1: f32[32, 16],
    %p2: f32[10], %g2: f32[10]) {
  %lr = constant() {value = 0.1} : float
  %0 = mul(%g0, %lr) : f32[64]
  %1 = sub(%p0, %0) : f32[64]
  %2 = mul(%g1, %lr) : f32[32, 16]
  %3 = sub(%p1, %2) : f32[32, 16]
  %4 = mul(%g2, %lr) : f32[10]
  %5 = sub(%p2, %4) : f32[10]
  %6 = sum(%g1) {dim = [1]} : f32[32]
  return %1, %3, %5, %6
})";
  std::vector<Tensor> inputs = {randn({64}),     randn({64}), randn({32, 16}),
                                randn({32, 16}), randn({10}), randn({10})};
  std::unique_ptr<Graph> graph = parseGraph(kir);
  LoopProgram lowered = passes::lower::lowerGraph(*graph);
  passes::schedule::Schedule together = passes::schedule::schedule(lowered);
  INFO(together.str());
  REQUIRE(together.kernels.size() == 4);
  for (size_t k = 1; k < 4; ++k)
    REQUIRE(together.kernels[k].withPrevious);
  CudaModule m = emitCuda(together);
  REQUIRE(m.steps.size() == 1);
  REQUIRE(m.fused.size() == 1);
  const std::vector<FusedMember> &members = m.fused[0].members;
  REQUIRE(members.size() == 4);
  size_t rows = 0;
  for (size_t k = 0; k < 4; ++k) {
    CHECK(members[k].nodes == together.kernels[k].nodes);
    rows += members[k].rows;
  }
  CHECK(rows == 1); // the sum
  // One shared array for every reduction of the launch: many reductions stay within a block's
  // static shared memory.
  const std::string &code = m.fused[0].kernel.code;
  CHECK(code.find("__shared__") == code.rfind("__shared__"));
  CHECK(checkOnHost(together, inputs) == std::set<KernelRole>{KernelRole::Fused});
  // Without horizontal fusion each kernel is its own launch, and so its own CUDA kernel.
  passes::schedule::Schedule apart = passes::schedule::schedule(lowered, {.horizontal = false});
  REQUIRE(apart.kernels.size() == 4);
  CudaModule separate = emitCuda(apart);
  CHECK(separate.steps.size() == 4);
  CHECK(separate.fused.empty());
  CHECK(checkOnHost(apart, inputs).count(KernelRole::Fused) == 0);
}

TEST_CASE("emulated: the schedule's tiles: transposes staged through shared memory",
          "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  // A transpose added to a contiguous operand, batched, in float16 and float32: the schedule
  // tiles the node (`tile i1`), the CUDA code runs 32x32 tiles with edges.
  const char *kir = R"(graph @t(%x: f32[3, s0, 40], %y: f32[3, 40, s0], %h: f16[s0, 40]) {
  %0 = transpose(%x) {dim0 = 1, dim1 = 2} : f32[3, 40, s0] strided [s0*40, 1, 40]
  %1 = add(%0, %y) : f32[3, 40, s0]
  %2 = transpose(%h) {dim0 = 0, dim1 = 1} : f16[40, s0] strided [1, 40]
  %3 = contiguous(%2) : f16[40, s0]
  return %1, %3
})";
  passes::schedule::Schedule s = scheduled(kir);
  INFO(s.str());
  CudaModule m = emitCuda(s);
  size_t tiled = 0;
  for (const NodeKernels &n : m.nodes)
    tiled += n.find(KernelRole::PointwiseTiled) != nullptr;
  CHECK(tiled == 2);
  for (int64_t s0 : {1, 33, 70}) {
    INFO("s0 = " << s0);
    CHECK(checkOnHost(s, {randn({3, s0, 40}), randn({3, 40, s0}), randn({s0, 40}, DType::Float16)})
              .count(KernelRole::PointwiseTiled));
  }
}

TEST_CASE("emulated: rows that a block shares: a kernel over shared loops with inner loops",
          "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  // A layer_norm backward-like row kernel: reductions over the row read by a pointwise node of
  // the row; rows longer than a block, and a row statistic kept as [s0, 1].
  const char *kir = R"(graph @rows(%x: f32[s0, 300], %g: f32[s0, 300]) {
  %0 = mul(%x, %g) : f32[s0, 300]
  %1 = sum(%0) {dim = [1], keepdim = true} : f32[s0, 1]
  %2 = amax(%g) {dim = [1], keepdim = true} : f32[s0, 1]
  %3 = sub(%x, %1) : f32[s0, 300]
  %4 = mul(%3, %2) : f32[s0, 300]
  return %4, %1
})";
  passes::schedule::Schedule s = scheduled(kir);
  INFO(s.str());
  CudaModule m = emitCuda(s);
  REQUIRE(m.fused.size() == 1);
  CHECK(m.fused[0].members[0].rows);
  for (int64_t s0 : {1, 7})
    CHECK(checkOnHost(s, {randn({s0, 300}), randn({s0, 300})}) ==
          std::set<KernelRole>{KernelRole::Fused});
}

TEST_CASE("emulated: gathers fused with their consumers, and an out-of-range index",
          "[cuda][emulated]") {
  if (!emulatorOrSkip())
    return;
  const char *kir = R"(graph @gathers(%idx: i64[s0, 3], %table: f32[10, 64], %x: f32[s0, 6],
    %gi: i32[s0, 2]) {
  %0 = exp(%table) : f32[10, 64]
  %1 = embedding(%idx, %0) : f32[s0, 3, 64]
  %2 = sum(%1) {dim = [2]} : f32[s0, 3]
  %3 = gather(%x, %gi) {dim = 1} : f32[s0, 2]
  return %1, %2, %3
})";
  passes::schedule::Schedule s = scheduled(kir);
  const LoopProgram &p = s.program;
  static Generator gen(7);
  for (int64_t s0 : {1, 5}) {
    INFO("s0 = " << s0);
    Tensor idx = ops::randint(0, 10, {s0, 3}, DType::Int64, &gen);
    Tensor gi = ops::randint(0, 6, {s0, 2}, DType::Int32, &gen);
    checkOnHost(s, {idx, randn({10, 64}), randn({s0, 6}), gi});
  }
  // A position out of range stops the run with the interpreter's IndexError.
  std::vector<Tensor> inputs = {ops::randint(0, 10, {2, 3}, DType::Int64, &gen), randn({10, 64}),
                                randn({2, 6}), ops::randint(0, 6, {2, 2}, DType::Int32, &gen)};
  Interpreter interp(p);
  interp.run(inputs);
  inputs[0] = ops::full({2, 3}, Scalar(int64_t{-1}), DType::Int64);
  for (bool vectorize : {true, false}) {
    INFO((vectorize ? "with" : "without") << " vector kernels");
    CudaModule m = emitCuda(s, {.vectorize = vectorize});
    CHECK_THROWS_WITH(emulate(s, m, interp, nullptr, inputs),
                      "index -1 is out of bounds for a dimension with size 10");
  }
}

// CompiledProgram as a whole: extern calls between kernels, the thread pool,
// input errors, the kernel cache, and (not run by default) module dumps and timings.
#include "codegen/cpu/compile_program.h"
#include "codegen/cpu/emit.h"
#include "codegen/cpu/kernel_cache.h"
#include "ir/loop/interpreter.h"
#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/compare.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/random.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/softmax.h"
#include "runtime/thread_pool.h"
#include "tests/cpp/cpu_emit_test_util.h"

#include <kiln_catch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

using namespace kiln;
using namespace kiln::ir;
using namespace kiln::ir::loop;
using namespace kiln::codegen::cpu;
using namespace kiln::test::cpu;

TEST_CASE("an extern mm followed by a relu kernel", "[cpu_emit]") {
  SymInt s0 = sym("s0");
  LoopProgram p;
  BufferId ba = p.addInput(F32, {s0, 64});
  BufferId bw = p.addInput(F32, {64, 40});
  BufferId mm = p.external("mm", {ba, bw}, {TensorMeta::contiguous(F32, {s0, 40})})[0];
  p.markOutput(p.pointwise({s0, 40}, [&](Ops &ops, Idx i) {
    return ops.maximum(ops.load(mm, {i[0], i[1]}), ops.constant(0.0, F32));
  }));
  CompiledProgram c = compile(p);
  REQUIRE(c.module().kernels.size() == 1);
  CHECK(c.module().kernels[0].node == 1);
  for (int64_t rows : {1, 7, 300}) {
    Tensor a = randn({rows, 64}), w = randn({64, 40});
    checkClose(c.run({a, w})[0], ops::relu(ops::mm(a, w)), 0);
  }
  // The other default externs: linear, conv2d and attention, each with a kernel after it.
  LoopProgram r;
  BufferId rx = r.addInput(F32, {2, 3, 8, 8}), rw = r.addInput(F32, {4, 3, 3, 3});
  BufferId lx = r.addInput(F32, {5, 8}), lw = r.addInput(F32, {6, 8});
  BufferId bq = r.addInput(F32, {1, 2, 5, 8}), bk = r.addInput(F32, {1, 2, 7, 8});
  BufferId conv =
      r.external("conv2d", {rx, rw}, {TensorMeta::contiguous(F32, {2, 4, 4, 4})},
                 {{"stride", std::vector<int64_t>{2}}, {"padding", std::vector<int64_t>{1}}})[0];
  BufferId lin = r.external("linear", {lx, lw}, {TensorMeta::contiguous(F32, {5, 6})})[0];
  BufferId att = r.external("scaled_dot_product_attention", {bq, bk, bk},
                            {TensorMeta::contiguous(F32, {1, 2, 5, 8})}, {{"is_causal", true}})[0];
  auto twice = [&](BufferId id, std::vector<SymInt> sizes) {
    r.markOutput(r.pointwise(
        sizes, [&](Ops &ops, Idx i) { return ops.load(id, i) * ops.constant(2.0, F32); }));
  };
  twice(conv, {2, 4, 4, 4});
  twice(lin, {5, 6});
  twice(att, {1, 2, 5, 8});
  CompiledProgram cr = compile(r);
  Tensor x = randn({2, 3, 8, 8}), w = randn({4, 3, 3, 3}), a8 = randn({5, 8}), w8 = randn({6, 8});
  Tensor tq = randn({1, 2, 5, 8}), tk = randn({1, 2, 7, 8});
  std::vector<Tensor> out = cr.run({x, w, a8, w8, tq, tk});
  Tensor two = Tensor::wrapScalar(Scalar(2.0));
  ops::ConvOptions co;
  co.stride = {2};
  co.padding = {1};
  checkClose(out[0], ops::mul(ops::convolution(2, x, w, std::nullopt, co), two), 0);
  checkClose(out[1], ops::mul(ops::linear(a8, w8, std::nullopt), two), 0);
  checkClose(
      out[2],
      ops::mul(ops::scaledDotProductAttention(tq, tk, tk, Tensor(), 0.0, true, std::nullopt, false),
               two),
      0);

  LoopProgram q; // an op without an implementation
  BufferId xi = q.addInput(F32, {2});
  q.markOutput(q.external("fft", {xi}, {TensorMeta::contiguous(F32, {2})})[0]);
  CompiledProgram cq = compile(q);
  CHECK(errorOf(ErrorKind::NotImplemented, [&] {
          cq.run({randn({2})});
        }).find("no implementation of extern \"fft\"") != std::string::npos);
}

TEST_CASE("a large pointwise node runs split over the thread pool", "[cpu_emit]") {
  SymInt s0 = sym("s0");
  LoopProgram p;
  BufferId bx = p.addInput(F32, {s0, 1031});
  p.markOutput(p.pointwise({s0, 1031}, [&](Ops &ops, Idx i) {
    return ops.tanh(ops.load(bx, {i[0], i[1]})) * ops.cast(ops.indexValue(i[0]), F32);
  }));
  CompiledProgram c = compile(p);
  setNumThreads(4);
  int64_t before = splitLaunchCount();
  checkAgainstInterpreter(c, {randn({257, 1031})});
  CHECK(splitLaunchCount() == before + 1); // 257 rows of 1031 points: split over i0
  before = splitLaunchCount();
  checkAgainstInterpreter(c, {randn({1, 1031})}); // one row: run inline
  CHECK(splitLaunchCount() == before);
  setNumThreads(0);
}

TEST_CASE("small independent kernels share one launch, split over threads", "[cpu_emit]") {
  // An update of a matrix, a long vector, row sums and a transposed copy: four kernels, one
  // function, their rows end to end ([Note: launches]); chunks of the split cut the kernels at
  // arbitrary rows.
  LoopProgram p;
  BufferId x = p.addInput(F32, {200, 300});
  BufferId y = p.addInput(F32, {50000});
  BufferId w = p.addInput(F32, {100, 499});
  BufferId t = p.addInput(F32, {37, 41});
  p.markOutput(p.pointwise({200, 300}, [&](Ops &ops, Idx i) {
    return ops.exp(ops.load(x, {i[0], i[1]})) * ops.cast(ops.indexValue(i[1]), F32);
  }));
  p.markOutput(
      p.pointwise({50000}, [&](Ops &ops, Idx i) { return ops.tanh(ops.load(y, {i[0]})); }));
  p.markOutput(p.reduction(ReductionKind::Sum, {100}, {499},
                           [&](Ops &ops, Idx i) { return ops.load(w, {i[0], i[1]}); }));
  p.markOutput(p.pointwise({41, 37}, [&](Ops &ops, Idx i) { return ops.load(t, {i[1], i[0]}); }));
  passes::schedule::Schedule s = scheduled(p);
  REQUIRE(s.kernels.size() == 4);
  for (size_t k = 1; k < 4; ++k)
    CHECK(s.kernels[k].withPrevious);
  CompiledProgram c = compile(p);
  size_t functions = 0;
  for (const KernelInfo &k : c.module().kernels)
    functions += !k.fusedInto;
  CHECK(functions == 1);
  CHECK(kernel(c, 0).laterRuns.size() == 3);
  std::vector<Tensor> in = {randn({200, 300}), randn({50000}), randn({100, 499}), randn({37, 41})};
  for (int threads : {1, 2, 3, 4}) {
    INFO(threads << " threads");
    setNumThreads(threads);
    int64_t before = splitLaunchCount();
    checkAgainstInterpreter(c, in);
    CHECK(splitLaunchCount() - before == 1); // 50300 rows of 3.2 points on average
  }
  // Without launches: four functions, the same results.
  passes::schedule::Schedule apart =
      passes::schedule::schedule(p, {.fuse = true, .inlineProducers = true, .horizontal = false});
  for (const passes::schedule::Kernel &k : apart.kernels)
    CHECK_FALSE(k.withPrevious);
  ProgramOptions options;
  options.jit.cache = &testCache();
  checkAgainstInterpreter(compileProgram(apart, options), in);
  setNumThreads(0);
}

TEST_CASE("the launch range is the schedule's parallel loops, flattened", "[cpu_emit]") {
  // A row softmax over [2, s0, s1]: the kernel shares [2, s0], so 2 * s0 rows are shared out,
  // not 2; a pointwise node alone splits all its loops but the innermost.
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram p;
  BufferId x = p.addInput(F32, {2, s0, s1});
  BufferId mx = p.reduction(ReductionKind::Max, {2, s0}, {s1},
                            [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1], i[2]}); });
  BufferId sum = p.reduction(ReductionKind::Sum, {2, s0}, {s1}, [&](Ops &ops, Idx i) {
    return ops.exp(ops.load(x, {i[0], i[1], i[2]}) - ops.load(mx, {i[0], i[1]}));
  });
  p.markOutput(p.pointwise({2, s0, s1}, [&](Ops &ops, Idx i) {
    return ops.exp(ops.load(x, {i[0], i[1], i[2]}) - ops.load(mx, {i[0], i[1]})) /
           ops.load(sum, {i[0], i[1]});
  }));
  passes::schedule::Schedule s = scheduled(p);
  REQUIRE(s.kernels.size() == 1);
  CHECK(s.kernels[0].parallel == "i0*i1");
  CompiledProgram c = compile(p);
  CHECK(kernel(c, 0).parallelLoops == 2);
  setNumThreads(4);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{300, 64}, {1, 7}, {0, 5}, {5, 0}}) {
    INFO(rows << " x " << cols);
    int64_t before = splitLaunchCount();
    Tensor in = ops::mul(randn({2, rows, cols}), Tensor::wrapScalar(Scalar(5.0)));
    checkAgainstInterpreter(c, {in});
    CHECK(splitLaunchCount() - before == (rows == 300 ? 1 : 0));
  }
  setNumThreads(0);
}

TEST_CASE("errors: bad inputs and argmax over an empty range", "[cpu_emit][errors]") {
  CompiledProgram soft = compile(softmaxProgram());
  Tensor x = randn({4, 16});
  CHECK(errorOf(ErrorKind::Value, [&] { soft.run({}); }) ==
        "compiled program: the program takes 1 inputs, got 0");
  CHECK(errorOf(ErrorKind::Type, [&] { soft.run({x.to(DType::Float64)}); }) ==
        "compiled program: input buf0 is f32[s0, s1] but the tensor bound to it has dtype float64");
  checkClose(soft.run({x.t()})[0], ops::softmax(x.t(), 1), 1e-5); // copied to contiguous

  LoopProgram empty;
  BufferId e = empty.addInput(F32, {3, 0});
  empty.markOutput(empty.reduction(ReductionKind::ArgMax, {3}, {0},
                                   [&](Ops &ops, Idx i) { return ops.load(e, {i[0], i[1]}); }));
  CompiledProgram ce = compile(empty);
  CHECK(errorOf(ErrorKind::Index, [&] { ce.run({randn({3, 0})}); }) ==
        "compiled program: argmax over an empty reduction range");
}

TEST_CASE("indirect loads: rows, lanes and an out-of-range position", "[cpu_emit]") {
  SymInt s0 = sym("s0");
  LoopProgram p;
  BufferId table = p.addInput(F32, {50, 1031});
  BufferId rows = p.addInput(DType::Int64, {s0});
  BufferId lanes = p.addInput(DType::Int64, {s0, 1031});
  BufferId source = p.addInput(F32, {s0, 1031});
  // A row per outer index (the position is uniform over the vector lanes), split over the pool.
  p.markOutput(p.pointwise({s0, 1031}, [&](Ops &ops, Idx i) {
    return ops.loadIndirect(table, {i[0], i[1]}, 0, ops.load(rows, {i[0]}), true);
  }));
  // A position per lane along the contiguous dim (a vector gather), fused into a sum.
  p.markOutput(p.reduction(ReductionKind::Sum, {s0}, {1031}, [&](Ops &ops, Idx i) {
    return ops.loadIndirect(source, {i[0], i[1]}, 1, ops.load(lanes, {i[0], i[1]}));
  }));
  CompiledProgram c = compile(p);
  REQUIRE(c.module().kernels.size() == 2); // one function: both nodes loop over [s0, 1031]
  CHECK(c.module().kernels[0].checksIndices);
  static Generator gen(11);
  for (int64_t n : {1, 7, 300}) {
    INFO("s0 = " << n);
    Tensor r = ops::randint(-50, 50, {n}, DType::Int64, &gen);
    Tensor l = ops::randint(0, 1031, {n, 1031}, DType::Int64, &gen);
    // The sum adds 1031 float32 values in vector order; the interpreter in float64.
    std::vector<Tensor> out =
        checkAgainstInterpreter(c, {randn({50, 1031}), r, l, randn({n, 1031})}, {}, 10);
    CHECK(out.size() == 2);
  }
  Tensor l = ops::randint(0, 1031, {300, 1031}, DType::Int64, &gen);
  l.select(0, 250).select(0, 17).fill_(Scalar(int64_t{1031}));
  CHECK(errorOf(ErrorKind::Index, [&] {
          c.run({randn({50, 1031}), ops::zeros({300}, DType::Int64), l, randn({300, 1031})});
        }) == "index 1031 is out of bounds for a dimension with size 1031");
  CHECK(errorOf(ErrorKind::Index, [&] {
          c.run({randn({50, 1031}), ops::full({3}, Scalar(int64_t{-51}), DType::Int64),
                 ops::zeros({3, 1031}, DType::Int64), randn({3, 1031})});
        }) == "index -51 is out of bounds for a dimension with size 50");
}

TEST_CASE("the kernel cache: one module per program, keyed by its text", "[cpu_emit]") {
  KernelCache cache("");
  ProgramOptions options;
  options.jit.cache = &cache;
  LoopProgram p = softmaxProgram();
  CompiledProgram cold = compileProgram(scheduled(p), options);
  CompiledProgram warm = compileProgram(scheduled(p), options);
  CHECK_FALSE(cold.fromCache());
  CHECK(warm.fromCache());
  CHECK(cache.stats().misses == 1);
  CHECK(cold.module().kernels.size() == 3);
  CHECK(has(cold.module().text, "//   " + p.str().substr(0, p.str().find('\n'))));
  std::printf("softmax program (3 kernels): cold compile %.1f ms, warm (cache hit) %.1f ms\n",
              cold.compileSeconds() * 1e3, warm.compileSeconds() * 1e3);
  Tensor x = randn({5, 1031});
  checkClose(warm.run({x})[0], cold.run({x})[0], 0);
}

TEST_CASE("prints the softmax module and its assembly (not run by default)", "[.dump]") {
  ProgramOptions options;
  options.jit.cache = &testCache();
  options.jit.dumpStages = true;
  CompiledProgram c = compileProgram(scheduled(softmaxProgram()), options);
  std::printf("%s\n", c.module().text.c_str());
  std::printf("%s\n", c.dumps().assembly.c_str());
}

namespace {
/// Median milliseconds of `fn` over `reps` runs after one warm-up.
template <typename Fn> double medianMs(Fn &&fn, int reps = 15) {
  fn();
  std::vector<double> t;
  for (int k = 0; k < reps; ++k) {
    auto start = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                    .count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
} // namespace

TEST_CASE("compiled vs eager timings (not run by default)", "[.bench]") {
  const int64_t rows = 4096, cols = 1024; // 16 MiB per f32 tensor: an L3 case
  Tensor x = randn({rows, cols}), b = randn({cols});
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram addRelu;
  BufferId ax = addRelu.addInput(F32, {s0, s1}), ab = addRelu.addInput(F32, {s1});
  addRelu.markOutput(addRelu.pointwise({s0, s1}, [&](Ops &ops, Idx i) {
    return ops.maximum(ops.load(ax, {i[0], i[1]}) + ops.load(ab, {i[1]}), ops.constant(0.0, F32));
  }));
  LoopProgram rowSum;
  BufferId rx = rowSum.addInput(F32, {s0, s1});
  rowSum.markOutput(rowSum.reduction(ReductionKind::Sum, {s0}, {s1},
                                     [&](Ops &ops, Idx i) { return ops.load(rx, {i[0], i[1]}); }));
  LoopProgram stats;
  BufferId wx = stats.addInput(F32, {s0, s1});
  WelfordBuffers w =
      stats.welford({s0}, {s1}, [&](Ops &ops, Idx i) { return ops.load(wx, {i[0], i[1]}); });
  stats.markOutput(w.m2);
  CompiledProgram cAdd = compile(addRelu), cSum = compile(rowSum),
                  cSoft = compile(softmaxProgram()), cStats = compile(stats);
  std::printf("[%lld x %lld] f32, median ms (compiled / eager):\n", (long long)rows,
              (long long)cols);
  std::printf("  add+relu       %.2f / %.2f\n", medianMs([&] { cAdd.run({x, b}); }),
              medianMs([&] { ops::relu(ops::add(x, b)); }));
  std::printf("  sum(dim=1)     %.2f / %.2f\n", medianMs([&] { cSum.run({x}); }),
              medianMs([&] { ops::sum(x, Shape{1}); }));
  std::printf("  softmax (3 k)  %.2f / %.2f\n", medianMs([&] { cSoft.run({x}); }),
              medianMs([&] { ops::softmax(x, 1); }));
  std::printf("  welford (var)  %.2f / %.2f\n", medianMs([&] { cStats.run({x}); }),
              medianMs([&] { ops::var(x, Shape{1}, 0.0); }));
}

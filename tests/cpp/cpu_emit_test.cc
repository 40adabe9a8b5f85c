// The loop-IR → MLIR emitter and CompiledProgram: every program runs compiled and through the
// reference interpreter (and, where one exists, the eager kernel), at sizes that leave vector
// tails (1, 7, 16, 1000, 1031).

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

#include <dlfcn.h>

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

TEST_CASE("add-relu with a broadcast bias: vector loads, stride 0, tails", "[cpu_emit]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram indexed, expanded;
  for (LoopProgram *p : {&indexed, &expanded}) {
    BufferId bx = p->addInput(F32, {s0, s1});
    BufferId bb = p == &indexed ? p->addInput(F32, {s1})
                                : p->addInput(F32, {s0, s1}, std::vector<SymInt>{0, 1});
    p->markOutput(p->pointwise({s0, s1}, [&](Ops &ops, Idx i) {
      Val bias = p == &indexed ? ops.load(bb, {i[1]}) : ops.load(bb, {i[0], i[1]});
      return ops.maximum(ops.load(bx, {i[0], i[1]}) + bias, ops.constant(0.0, F32));
    }));
  }
  CompiledProgram a = compile(indexed), b = compile(expanded);
  CHECK(kernel(a, 0).lanes == LaneMode::Range);
  CHECK(kernel(a, 0).width == f32Lanes());
  CHECK(has(a.module().text, "vector.load"));
  CHECK(has(a.module().text, "arith.maximumf"));
  for (int64_t rows : {1, 3})
    for (int64_t cols : kSizes) {
      INFO(rows << "x" << cols);
      Tensor x = randn({rows, cols}), bias = randn({cols});
      Tensor expected = ops::relu(ops::add(x, bias));
      checkClose(a.run({x, bias})[0], expected, 0);
      checkClose(b.run({x, bias.expand({rows, cols})})[0], expected, 0);
    }
}

TEST_CASE("a transpose copy gathers its loads and stores contiguously", "[cpu_emit]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram p;
  BufferId bx = p.addInput(F32, {s0, s1});
  p.markOutput(p.pointwise({s1, s0}, [&](Ops &ops, Idx i) { return ops.load(bx, {i[1], i[0]}); }));
  CompiledProgram c = compile(p);
  CHECK(kernel(c, 0).lanes == LaneMode::Range);
  CHECK(has(c.module().text, "vector.gather"));
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5, 7}, {1031, 16}, {33, 1000}}) {
    Tensor x = randn({rows, cols});
    Tensor y = c.run({x})[0];
    CHECK(y.isContiguous());
    checkClose(y, x.t(), 0);
  }
}

TEST_CASE("a transposed output and a transposed input view", "[cpu_emit]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram p;
  BufferId bx = p.addInput(F32, {s0, s1}, std::vector<SymInt>{1, s0}); // x.t() of a [s1, s0]
  p.markOutput(p.pointwise(
      {s0, s1}, [&](Ops &ops, Idx i) { return ops.exp(ops.load(bx, {i[0], i[1]})); },
      std::vector<SymInt>{1, s0})); // stored transposed: not vectorized
  p.markOutput(p.pointwise({s0, s1}, [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[1]}); }));
  CompiledProgram c = compile(p);
  CHECK(kernel(c, 0).lanes == LaneMode::Scalar);
  CHECK(kernel(c, 1).lanes == LaneMode::Range); // gathers along i1 (coefficient s0)
  for (int64_t n : kSizes) {
    Tensor base = randn({n, 5});
    std::vector<Tensor> out = checkAgainstInterpreter(c, {base.t()});
    CHECK(out[0].stride(0) == 1);
    checkClose(out[1], base.t(), 0);
  }
}

TEST_CASE("sums over the last dim (vector accumulator) and over dim 0 (lanes across outputs)",
          "[cpu_emit]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram p;
  BufferId bx = p.addInput(F32, {s0, s1});
  p.markOutput(p.reduction(ReductionKind::Sum, {s0}, {s1},
                           [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[1]}); }));
  p.markOutput(p.reduction(ReductionKind::Sum, {s1}, {s0},
                           [&](Ops &ops, Idx i) { return ops.load(bx, {i[1], i[0]}); }));
  CompiledProgram c = compile(p);
  CHECK(kernel(c, 0).lanes == LaneMode::Reduce);
  CHECK(kernel(c, 1).lanes == LaneMode::Range);
  CHECK(has(c.module().text, "vector.reduction <add>"));
  for (int64_t rows : {1, 6, 1031})
    for (int64_t cols : kSizes) {
      INFO(rows << "x" << cols);
      Tensor x = randn({rows, cols});
      std::vector<Tensor> out = checkAgainstInterpreter(c, {x}, {}, 5);
      checkClose(out[0], ops::sum(x, Shape{1}), 1e-4);
      checkClose(out[1], ops::sum(x, Shape{0}), 1e-4);
    }
}

TEST_CASE("reductions over two dims and over a middle dim", "[cpu_emit]") {
  SymInt s0 = sym("s0"), s1 = sym("s1"), s2 = sym("s2");
  LoopProgram p;
  BufferId bx = p.addInput(F32, {s0, s1, s2});
  auto inner = [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[1], i[2]}); };
  auto middle = [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[2], i[1]}); };
  p.markOutput(p.reduction(ReductionKind::Sum, {s0}, {s1, s2}, inner));
  WelfordBuffers w = p.welford({s0}, {s1, s2}, inner); // group-norm statistics
  p.markOutput(w.mean);
  p.markOutput(w.m2);
  p.markOutput(p.reduction(ReductionKind::Max, {s0, s2}, {s1}, middle));
  p.markOutput(p.reduction(ReductionKind::ArgMin, {s0}, {s1, s2}, inner));
  CompiledProgram c = compile(p);
  CHECK(kernel(c, 0).lanes == LaneMode::Reduce);
  CHECK(kernel(c, 1).lanes == LaneMode::Reduce);
  CHECK(kernel(c, 2).lanes == LaneMode::Range);
  CHECK(kernel(c, 3).lanes == LaneMode::Scalar);
  for (int64_t n : {1, 7, 16, 37})
    for (int64_t m : {1, 3}) {
      INFO(n << ", " << m);
      Tensor x = randn({2, m, n});
      std::vector<Tensor> out = checkAgainstInterpreter(c, {x}, {}, 5);
      checkClose(out[3], ops::amax(x, Shape{1}), 0);
    }
}

TEST_CASE("full, prod, min and integer reductions", "[cpu_emit]") {
  SymInt s0 = sym("s0");
  LoopProgram p;
  BufferId bx = p.addInput(F32, {3, s0});
  BufferId bn = p.addInput(DType::Int32, {3, s0});
  auto loadX = [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[1]}); };
  p.markOutput(p.reduction(ReductionKind::Sum, {}, {3, s0}, loadX)); // to a 0-d buffer
  p.markOutput(p.reduction(ReductionKind::Prod, {3}, {s0}, [&](Ops &ops, Idx i) {
    return ops.constant(1.0, F32) + ops.constant(0.01, F32) * ops.load(bx, {i[0], i[1]});
  }));
  p.markOutput(p.reduction(ReductionKind::Min, {3}, {s0}, loadX));
  p.markOutput(p.reduction(ReductionKind::Max, {3}, {s0}, loadX));
  p.markOutput(p.reduction(ReductionKind::Sum, {s0}, {3}, [&](Ops &ops, Idx i) {
    return ops.cast(ops.load(bn, {i[1], i[0]}), DType::Int64);
  }));
  p.markOutput(p.reduction(ReductionKind::Max, {3}, {s0},
                           [&](Ops &ops, Idx i) { return ops.load(bn, {i[0], i[1]}); }));
  p.markOutput(p.reduction(ReductionKind::Min, {3}, {s0},
                           [&](Ops &ops, Idx i) { return ops.load(bn, {i[0], i[1]}); }));
  CompiledProgram c = compile(p);
  CHECK(kernel(c, 0).lanes == LaneMode::Reduce);
  for (int64_t cols : kSizes) {
    INFO(cols);
    Tensor x = randn({3, cols});
    Tensor n = ops::randint(-50, 50, {3, cols}, DType::Int32);
    std::vector<Tensor> out = checkAgainstInterpreter(c, {x, n}, {}, 5);
    CHECK(out[0].dim() == 0);
    checkClose(out[2], ops::amin(x, Shape{1}), 0);
    CHECK(values(out[4]) == values(ops::sum(n, Shape{0})));
    CHECK(values(out[5]) == values(ops::amax(n, Shape{1})));
  }
  // NaN wins max and min, in the vector lanes and in the tail.
  Tensor x = randn({3, 1031});
  x.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[2 * 1031 + 1030] = std::numeric_limits<float>::quiet_NaN();
  Tensor n = ops::randint(-50, 50, {3, 1031}, DType::Int32);
  std::vector<Tensor> out = checkAgainstInterpreter(c, {x, n}, {}, 5);
  CHECK(std::isnan(values(out[2])[0]));
  CHECK(std::isnan(values(out[3])[2]));
}

TEST_CASE("softmax as three nodes matches the interpreter and eager softmax", "[cpu_emit]") {
  CompiledProgram c = compile(softmaxProgram());
  CHECK(kernel(c, 0).lanes == LaneMode::Reduce);
  CHECK(kernel(c, 1).lanes == LaneMode::Reduce);
  CHECK(kernel(c, 2).lanes == LaneMode::Range);
  CHECK(has(c.module().text, "math.exp"));
  for (int64_t rows : {1, 5})
    for (int64_t cols : kSizes) {
      INFO(rows << "x" << cols);
      Tensor x = ops::mul(randn({rows, cols}), Tensor::wrapScalar(Scalar(20.0)));
      std::vector<Tensor> out = checkAgainstInterpreter(c, {x});
      checkClose(out[0], ops::softmax(x, 1), 1e-5);
    }
  // -inf entries (masked scores) give exact zeros.
  Tensor x = randn({2, 37});
  x.data<float>()[3] = -std::numeric_limits<float>::infinity();
  Tensor y = checkAgainstInterpreter(c, {x})[0];
  CHECK(values(y)[3] == 0.0);
}

TEST_CASE("fused runs: softmax in one function with its row values in registers", "[cpu_emit]") {
  LoopProgram p = softmaxProgram();
  CompiledProgram c = compile(p);
  REQUIRE(c.module().kernels.size() == 3);
  CHECK_FALSE(kernel(c, 0).fusedInto);
  CHECK(kernel(c, 1).fusedInto == size_t{0});
  CHECK(kernel(c, 2).fusedInto == size_t{0});
  // The row max and sum never reach memory: the function takes the input and the output only.
  CHECK(kernel(c, 0).buffers == std::vector<BufferId>{p.inputs()[0], p.outputs()[0]});
  CHECK(kernel(c, 1).buffers.empty());
  CHECK(has(c.module().text, "func.func @" + kernel(c, 1).name +
                                 "(%args: !llvm.ptr, %begin: i64, %end: i64) {\n    return\n"));
  // One shared row loop: the later nodes' loads of buf1/buf2 became register uses.
  CHECK_FALSE(has(c.module().text, "memref.load %buf1"));
  for (int64_t rows : {3, 300})
    for (int64_t cols : {7, 64, 1031}) {
      INFO(rows << "x" << cols);
      Tensor x = ops::mul(randn({rows, cols}), Tensor::wrapScalar(Scalar(20.0)));
      checkClose(checkAgainstInterpreter(c, {x})[0], ops::softmax(x, 1), 1e-5);
    }
}

TEST_CASE("the code follows the schedule: its kernels, lanes and tiles, changed by hand",
          "[cpu_emit]") {
  using passes::schedule::LaneKind;
  using passes::schedule::Schedule;
  auto compileSchedule = [](const Schedule &s) {
    ProgramOptions options;
    options.jit.cache = &testCache();
    return compileProgram(s, options);
  };
  auto functionsWithCode = [](const CompiledProgram &c) {
    size_t n = 0;
    for (const KernelInfo &k : c.module().kernels)
      n += !k.fusedInto;
    return n;
  };
  Tensor x = ops::mul(randn({5, 1031}), Tensor::wrapScalar(Scalar(20.0)));
  // As scheduled: one loop kernel, one function.
  Schedule fused = scheduled(softmaxProgram());
  REQUIRE(fused.kernels.size() == 1);
  CompiledProgram one = compileSchedule(fused);
  CHECK(functionsWithCode(one) == 1);
  CHECK(kernel(one, 2).lanes == LaneMode::Range);
  checkAgainstInterpreter(one, {x});
  // One kernel per node: three functions; the row values are stored between them.
  Schedule apart = passes::schedule::schedule(softmaxProgram(), {.fuse = false});
  CompiledProgram three = compileSchedule(apart);
  CHECK(functionsWithCode(three) == 3);
  CHECK(kernel(three, 0).buffers.size() == 2); // x and the row max
  checkAgainstInterpreter(three, {x});
  // The output node's lane taken away: that node is emitted scalar, still right.
  Schedule scalar = fused;
  scalar.loops[2].lane = LaneKind::None;
  scalar.loops[2].laneVar.clear();
  CompiledProgram plain = compileSchedule(scalar);
  CHECK(kernel(plain, 2).lanes == LaneMode::Scalar);
  CHECK(kernel(plain, 0).lanes == LaneMode::Reduce); // the other nodes keep theirs
  checkAgainstInterpreter(plain, {x});
  // A tile added to a transposed copy, and taken away from one: the tile loops follow.
  SymInt s0 = sym("s0");
  LoopProgram t;
  BufferId src = t.addInput(F32, {s0, s0});
  t.markOutput(t.pointwise({s0, s0}, [&](Ops &ops, Idx i) { return ops.load(src, {i[1], i[0]}); }));
  Schedule tiled = scheduled(t);
  REQUIRE(tiled.loops[0].tileVar == "i0");
  Schedule untiled = tiled;
  untiled.loops[0].tileVar.clear();
  std::string withTiles = compileSchedule(tiled).module().text;
  std::string without = compileSchedule(untiled).module().text;
  CHECK(withTiles != without);
  CHECK(has(withTiles, "arith.minsi")); // a tile's last block ends at min(start + T, end)
  CHECK_FALSE(has(without, "arith.minsi"));
  for (const Schedule *s : {&tiled, &untiled}) {
    CompiledProgram c = compileSchedule(*s);
    checkAgainstInterpreter(c, {randn({37, 37})});
  }
}

TEST_CASE("fused runs: a node reading another row, or a row value read later, stay apart",
          "[cpu_emit]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram p;
  BufferId bx = p.addInput(F32, {s0, s1});
  BufferId sum = p.reduction(ReductionKind::Sum, {s0}, {s1},
                             [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[1]}); });
  // Row i0 of the output reads the sum of row s0-1-i0: computed by another chunk of rows.
  BufferId flipped = p.pointwise({s0, s1}, [&](Ops &ops, Idx i) {
    return ops.load(bx, {i[0], i[1]}) - ops.load(sum, {s0 - 1 - i[0]});
  });
  // Reads `flipped` at its own row: joins flipped's run; the sum comes from memory.
  BufferId scaled = p.pointwise({s0, s1}, [&](Ops &ops, Idx i) {
    return ops.load(flipped, {i[0], i[1]}) + ops.load(sum, {i[0]});
  });
  p.markOutput(flipped);
  p.markOutput(scaled);
  CompiledProgram c = compile(p);
  REQUIRE(c.module().kernels.size() == 3);
  CHECK_FALSE(kernel(c, 1).fusedInto);
  CHECK(kernel(c, 2).fusedInto == size_t{1});
  CHECK(kernel(c, 1).buffers == std::vector<BufferId>{bx, sum, flipped, scaled});
  for (int64_t rows : {1, 5, 300}) {
    INFO(rows);
    checkAgainstInterpreter(c, {randn({rows, 1031})});
  }
}

TEST_CASE("layer_norm through a welford reduction", "[cpu_emit]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  const double eps = 1e-5;
  LoopProgram p;
  BufferId bx = p.addInput(F32, {s0, s1});
  BufferId bw = p.addInput(F32, {s1});
  BufferId bb = p.addInput(F32, {s1});
  WelfordBuffers st =
      p.welford({s0}, {s1}, [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[1]}); });
  p.markOutput(p.pointwise({s0, s1}, [&](Ops &ops, Idx i) {
    Val var = ops.load(st.m2, {i[0]}) / ops.cast(ops.load(st.count, {i[0]}), F32);
    Val inv = ops.rsqrt(var + ops.constant(eps, F32));
    Val centered = ops.load(bx, {i[0], i[1]}) - ops.load(st.mean, {i[0]});
    return centered * inv * ops.load(bw, {i[1]}) + ops.load(bb, {i[1]});
  }));
  p.markOutput(st.mean);
  p.markOutput(st.m2);
  p.markOutput(st.count);
  // The same statistics over dim 0: welford with lanes across outputs.
  WelfordBuffers cols =
      p.welford({s1}, {s0}, [&](Ops &ops, Idx i) { return ops.load(bx, {i[1], i[0]}); });
  p.markOutput(cols.mean);
  p.markOutput(cols.m2);
  CompiledProgram c = compile(p);
  CHECK(kernel(c, 0).lanes == LaneMode::Reduce);
  CHECK(kernel(c, 0).width == f32Lanes()); // f64 statistics in two registers
  CHECK(kernel(c, 2).lanes == LaneMode::Range);
  for (int64_t d : kSizes) {
    INFO(d);
    Tensor w = randn({d}), b = randn({d});
    Tensor x = ops::add(randn({4, d}), Tensor::wrapScalar(Scalar(3.0)));
    std::vector<Tensor> out = checkAgainstInterpreter(c, {x, w, b});
    checkClose(out[0], ops::layerNorm(x, {d}, w, b, eps), 1e-4);
    CHECK(values(out[3]) == std::vector<double>(4, double(d)));
    // A mean of 1e4 and a variance of 1: f64 statistics keep the variance.
    Tensor big = ops::add(randn({4, d}), Tensor::wrapScalar(Scalar(1e4)));
    out = checkAgainstInterpreter(c, {big, w, b});
    checkClose(out[1], ops::mean(big, Shape{1}), 1e-7);
    if (d > 1)
      checkClose(ops::div(out[2], Tensor::wrapScalar(Scalar(double(d)))),
                 ops::var(big, Shape{1}, 0.0), 1e-5);
  }
}

TEST_CASE("argmax and argmin take the first extreme, NaN included", "[cpu_emit]") {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::empty({4, 4}, F32);
  const float v[] = {1, 3, 3, 2, 5, 5, 5, 5, 0, nan, 7, nan, -1, -2, -4, -4};
  std::copy(std::begin(v), std::end(v), x.data<float>());
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram p;
  BufferId bx = p.addInput(F32, {s0, s1});
  for (ReductionKind kind : {ReductionKind::ArgMax, ReductionKind::ArgMin})
    p.markOutput(
        p.reduction(kind, {s0}, {s1}, [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[1]}); }));
  p.markOutput(p.reduction(ReductionKind::ArgMax, {s1}, {s0}, // over dim 0: lanes across outputs
                           [&](Ops &ops, Idx i) { return ops.load(bx, {i[1], i[0]}); }));
  CompiledProgram c = compile(p);
  CHECK(kernel(c, 2).lanes == LaneMode::Range);
  std::vector<Tensor> out = checkAgainstInterpreter(c, {x});
  CHECK(values(out[0]) == std::vector<double>{1, 0, 1, 0});
  CHECK(values(out[1]) == std::vector<double>{0, 0, 1, 2});
  for (int64_t cols : kSizes) {
    Tensor y = randn({9, cols});
    out = checkAgainstInterpreter(c, {y});
    CHECK(values(out[0]) == values(ops::argmax(y, 1)));
    CHECK(values(out[2]) == values(ops::argmax(y, 0)));
  }
}

TEST_CASE("one compiled program runs at several symbol values", "[cpu_emit]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram p;
  BufferId x = p.addInput(F32, {s0, s1});
  BufferId sum = p.reduction(ReductionKind::Sum, {s0}, {s1},
                             [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1]}); });
  p.markOutput(p.pointwise({s0, s1}, [&](Ops &ops, Idx i) { // x - mean(x, 1)
    Val n = ops.cast(ops.indexValue(s1), F32);
    return ops.load(x, {i[0], i[1]}) - ops.load(sum, {i[0]}) / n;
  }));
  CompiledProgram c = compile(p);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 5}, {6, 1031}, {1, 16}}) {
    Tensor t = randn({rows, cols});
    Tensor y = checkAgainstInterpreter(c, {t}, {}, 5)[0];
    checkClose(y, ops::sub(t, ops::mean(t, Shape{1}, true)), 1e-5);
  }
  // A symbol that no input size gives must be passed.
  LoopProgram flat;
  BufferId f = flat.addInput(F32, {s0 * 2});
  flat.markOutput(flat.pointwise({s0 * 2}, [&](Ops &ops, Idx i) {
    return ops.load(f, {i[0]}) * ops.cast(ops.indexValue(i[0]), F32);
  }));
  CompiledProgram cf = compile(flat);
  CHECK(errorOf(ErrorKind::Value, [&] { cf.run({randn({8})}); }).find("symbol 's0' has no value") !=
        std::string::npos);
  for (int64_t half : {4, 515})
    checkAgainstInterpreter(cf, {randn({2 * half})}, {{"s0", half}});
}

TEST_CASE("index values, integer floordiv/mod and pow, casts", "[cpu_emit]") {
  SymInt s0 = sym("s0");
  LoopProgram p;
  BufferId ba = p.addInput(DType::Int32, {s0});
  BufferId bb = p.addInput(DType::Int32, {s0});
  p.markOutput(
      p.pointwise({s0}, [&](Ops &ops, Idx i) { return ops.cast(ops.indexValue(i[0] * 2), F32); }));
  p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) {
    return ops.floorDiv(ops.load(ba, {i[0]}), ops.load(bb, {i[0]}));
  }));
  p.markOutput(p.pointwise(
      {s0}, [&](Ops &ops, Idx i) { return ops.mod(ops.load(ba, {i[0]}), ops.load(bb, {i[0]})); }));
  p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) {
    return ops.pow(ops.load(ba, {i[0]}), ops.constant(3, DType::Int32));
  }));
  p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) { // f32 floordiv and mod like Python
    Val a = ops.cast(ops.load(ba, {i[0]}), F32), b = ops.cast(ops.load(bb, {i[0]}), F32);
    return ops.floorDiv(a, b) * ops.constant(100.0, F32) + ops.mod(a, b);
  }));
  p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) { // where, compare, bool logic
    Val a = ops.load(ba, {i[0]}), b = ops.load(bb, {i[0]});
    Val c = ops.bitwiseXor(ops.lt(a, b), ops.ge(a, ops.constant(0, DType::Int32)));
    return ops.where(c, ops.cast(a, DType::Int64), ops.indexValue(i[0]));
  }));
  CompiledProgram c = compile(p);
  for (int64_t n : kSizes) {
    Tensor a = ops::randint(-60, 60, {n}, DType::Int32);
    Tensor b = ops::randint(1, 9, {n}, DType::Int32);
    Tensor nb = ops::neg(b);
    for (const Tensor &d : {b, nb}) {
      std::vector<Tensor> out = checkAgainstInterpreter(c, {a, d});
      CHECK(values(out[1]) == values(ops::floorDivide(a, d)));
      CHECK(values(out[2]) == values(ops::remainder(a, d)));
    }
  }
}

TEST_CASE("every dtype: f64, i64, i32, bool, float16, bfloat16", "[cpu_emit]") {
  for (DType t : {DType::Float64, DType::Float16, DType::BFloat16, F32}) {
    INFO(dtypeName(t));
    SymInt s0 = sym("s0");
    LoopProgram p;
    BufferId bx = p.addInput(t, {s0});
    BufferId by = p.addInput(t, {s0});
    BufferId bz = p.addInput(t, {s0}); // whole numbers and halves, exact in every float dtype
    p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) { // gelu-like math in t
      Val x = ops.load(bx, {i[0]}), y = ops.load(by, {i[0]});
      Val half = ops.constant(0.5, t);
      Val g = x * half * (ops.constant(1.0, t) + ops.erf(x * ops.constant(0.70710678, t)));
      return g + ops.tanh(y) * ops.sigmoid(x) - ops.exp(ops.neg(ops.abs(y))) +
             ops.sqrt(ops.abs(x)) + ops.log(ops.abs(y) + ops.constant(1.0, t)) +
             ops.rsqrt(ops.abs(x) + ops.constant(1.0, t)) + ops.floor(y);
    }));
    p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) { // casts through every dtype
      Val x = ops.load(bz, {i[0]});
      Val i64 = ops.cast(x, DType::Int64), i32 = ops.cast(x, DType::Int32);
      Val pos = ops.gt(x, ops.constant(0.0, t));
      Val mixed = ops.cast(i64, DType::Float64) + ops.cast(i32, DType::Float64) +
                  ops.cast(pos, DType::Float64) +
                  ops.cast(ops.cast(x, DType::Float16), DType::Float64) +
                  ops.cast(ops.cast(x, DType::BFloat16), DType::Float64);
      return ops.cast(mixed, t);
    }));
    p.markOutput(p.reduction(ReductionKind::Sum, {}, {s0},
                             [&](Ops &ops, Idx i) { return ops.load(bx, {i[0]}); }));
    p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) { // bool in and out
      Val x = ops.load(bx, {i[0]}), y = ops.load(by, {i[0]});
      return ops.bitwiseOr(ops.gt(x, y), ops.bitwiseNot(ops.lt(x, ops.constant(1.0, t))));
    }));
    CompiledProgram c = compile(p);
    for (int64_t n : kSizes) {
      INFO(n);
      Tensor z = ops::div(ops::randint(-200, 200, {n}, DType::Int32).to(t),
                          Tensor::wrapScalar(Scalar(2.0)));
      std::vector<Tensor> out = checkAgainstInterpreter(c, {randn({n}, t), randn({n}, t), z}, {},
                                                        isReducedFloat(t) ? 2 : 5);
      CHECK(out[3].dtype() == DType::Bool);
    }
  }
  SymInt s0 = sym("s0");
  LoopProgram p; // integers and bools
  BufferId bi = p.addInput(DType::Int64, {s0});
  BufferId bj = p.addInput(DType::Int32, {s0});
  BufferId bm = p.addInput(DType::Bool, {s0});
  p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) {
    Val a = ops.load(bi, {i[0]}), b = ops.cast(ops.load(bj, {i[0]}), DType::Int64);
    Val m = ops.load(bm, {i[0]});
    return ops.where(m, ops.maximum(a, b) * ops.abs(a) - ops.neg(b),
                     ops.minimum(a, b) + ops.bitwiseAnd(a, b));
  }));
  p.markOutput(p.reduction(ReductionKind::Sum, {}, {s0},
                           [&](Ops &ops, Idx i) { return ops.load(bi, {i[0]}); }));
  p.markOutput(p.reduction(ReductionKind::Max, {}, {s0},
                           [&](Ops &ops, Idx i) { return ops.load(bm, {i[0]}); }));
  p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) {
    return ops.bitwiseNot(
        ops.bitwiseXor(ops.load(bm, {i[0]}), ops.cast(ops.load(bj, {i[0]}), DType::Bool)));
  }));
  CompiledProgram c = compile(p);
  for (int64_t n : kSizes) {
    Tensor m = ops::gt(randn({n}), Tensor::wrapScalar(Scalar(0.0)));
    checkAgainstInterpreter(c, {ops::randint(-1000, 1000, {n}, DType::Int64),
                                ops::randint(-3, 3, {n}, DType::Int32), m});
  }
}

TEST_CASE("index values of every SymInt form match the interpreter", "[cpu_emit]") {
  // Negative coefficients, constants first, powers, and floordiv/mod/max/min (also of negative
  // operands and by a size), as i64 values over [s0, s1]: the inner dim runs vectorized.
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram p;
  BufferId x = p.addInput(F32, {s0, s1});
  auto add = [&](auto index) {
    p.markOutput(p.pointwise({s0, s1}, [&](Ops &ops, Idx i) {
      return ops.indexValue(index(i)) + ops.cast(ops.load(x, {i[0], i[1]}), DType::Int64);
    }));
  };
  add([](Idx i) { return i[1] * 2 - i[0] * 3; });
  add([](Idx i) { return 5 - i[0] - i[1] * i[1] * i[0]; });
  add([](Idx i) { return -i[0] - i[1]; });
  add([&](Idx i) { return floorDiv(i[0] - i[1] * 2, 3) + mod(i[1] - i[0] * 5, s1) * 7; });
  add([&](Idx i) { return max(i[0] - i[1], -3) * min(i[1], s0 - 2) - floorDiv(i[0] - 9, s0); });
  add([&](Idx i) { return mod(i[0] * 3 - 11, s0 + 1) - floorDiv(i[1] * 4 - 7, 6) * s1; });
  CompiledProgram c = compile(p);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {4, 7}, {9, 16}, {13, 37}}) {
    INFO(rows << "x" << cols);
    Tensor in = ops::randint(-4, 4, {rows, cols}, DType::Int32).to(F32);
    std::vector<Tensor> out = checkAgainstInterpreter(c, {in});
    // The comparison can fail: the first output really is i1*2 - i0*3 (+ x).
    CHECK(values(out[0])[cols - 1] == 2 * (cols - 1) + values(in)[cols - 1]);
  }
}

namespace {

/// out = x.permute(perm) over x of sizes `xs` (symbols or constants), as one pointwise node.
LoopProgram permuteProgram(DType t, const std::vector<SymInt> &xs, const std::vector<int> &perm) {
  LoopProgram p;
  BufferId bx = p.addInput(t, xs);
  std::vector<SymInt> ys;
  for (int d : perm)
    ys.push_back(xs[d]);
  p.markOutput(p.pointwise(ys, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> at(xs.size(), SymInt(0));
    for (size_t k = 0; k < perm.size(); ++k)
      at[perm[k]] = i[k];
    return ops.load(bx, at) * ops.cast(ops.constant(2.0, F32), t);
  }));
  return p;
}

Tensor randomOf(Shape sizes, DType t) {
  if (t == DType::Int32 || t == DType::Int64)
    return ops::randint(-1000, 1000, sizes, t);
  return randn(sizes, t);
}

/// x.permute(perm) * 2 compiled: tiled (arith.minsi bounds its blocks), equal to the
/// interpreter and to the eager permute at 1 and 4 threads.
void checkPermute(DType t, const std::vector<SymInt> &xs, const std::vector<int> &perm,
                  const std::vector<Shape> &shapes) {
  CompiledProgram c = compile(permuteProgram(t, xs, perm));
  CHECK(kernel(c, 0).lanes == LaneMode::Range);
  CHECK(has(c.module().text, "arith.minsi"));
  for (int threads : {1, 4}) {
    setNumThreads(threads);
    for (const Shape &shape : shapes) {
      INFO(dtypeName(t) << ", " << threads << " threads, x " << shape[0] << "x" << shape.back());
      Tensor x = randomOf(shape, t);
      Tensor y = checkAgainstInterpreter(c, {x})[0];
      CHECK(y.isContiguous());
      std::vector<int64_t> dims(perm.begin(), perm.end());
      Tensor want = ops::mul(x.permute(dims), Tensor::wrapScalar(Scalar(2.0))).to(t);
      checkClose(y, want, 0);
    }
  }
  setNumThreads(0);
}

} // namespace

TEST_CASE("2-d transposes are tiled: odd and prime sizes, every dtype, threads", "[cpu_emit]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  std::vector<Shape> shapes{{1, 1},    {5, 7},      {31, 33},   {16, 97},
                            {101, 64}, {257, 1031}, {1031, 263}};
  for (DType t : {F32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64})
    checkPermute(t, {s0, s1}, {1, 0}, shapes);
  // Static sizes: the lane coefficient is a constant.
  checkPermute(F32, {SymInt(67), SymInt(131)}, {1, 0}, {{67, 131}});
}

TEST_CASE("3-d permutes are tiled: (0, 2, 1) over a middle loop, (2, 0, 1) over i0", "[cpu_emit]") {
  SymInt s0 = sym("s0"), s1 = sym("s1"), s2 = sym("s2");
  std::vector<Shape> shapes{{1, 1, 1}, {3, 5, 7}, {2, 37, 41}, {5, 131, 67}, {4, 300, 257}};
  for (DType t : {F32, DType::BFloat16, DType::Int64}) {
    checkPermute(t, {s0, s1, s2}, {0, 2, 1}, shapes);
    checkPermute(t, {s0, s1, s2}, {2, 0, 1}, shapes);
  }
  checkPermute(F32, {s0, s1, s2}, {1, 2, 0}, shapes);
}

TEST_CASE("tiling picks the loop a transposed load is contiguous along; others are untouched",
          "[cpu_emit]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram p; // a + b.t(): one contiguous and one transposed load
  BufferId ba = p.addInput(F32, {s0, s1});
  BufferId bb = p.addInput(F32, {s1, s0});
  p.markOutput(p.pointwise({s0, s1}, [&](Ops &ops, Idx i) {
    return ops.load(ba, {i[0], i[1]}) + ops.load(bb, {i[1], i[0]});
  }));
  CompiledProgram c = compile(p);
  CHECK(has(c.module().text, "arith.minsi"));
  CHECK(has(c.module().text, "vector.gather"));
  setNumThreads(4);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 5}, {263, 1031}, {1031, 33}}) {
    Tensor a = randn({rows, cols}), b = randn({cols, rows});
    Tensor y = checkAgainstInterpreter(c, {a, b})[0];
    checkClose(y, ops::add(a, b.t()), 0);
  }
  setNumThreads(0);
  // Contiguous loads, a broadcast (stride 0) and a strided load along no other range variable
  // (every other element of a row) keep the plain loops.
  LoopProgram q;
  BufferId bx = q.addInput(F32, {s0, s1 * 2});
  BufferId bc = q.addInput(F32, {s0});
  q.markOutput(q.pointwise({s0, s1}, [&](Ops &ops, Idx i) {
    return ops.load(bx, {i[0], i[1] * 2}) + ops.load(bc, {i[0]});
  }));
  CompiledProgram d = compile(q);
  CHECK(kernel(d, 0).lanes == LaneMode::Range);
  CHECK_FALSE(has(d.module().text, "arith.minsi"));
  for (int64_t n : kSizes)
    checkAgainstInterpreter(d, {randn({3, 2 * n}), randn({3})}, {{"s1", n}});
}

TEST_CASE("float64 math vectorizes: exp/log as arithmetic, others through libmvec, constant pow",
          "[cpu_emit]") {
  constexpr DType F64 = DType::Float64;
  SymInt s0 = sym("s0");
  LoopProgram p;
  BufferId bx = p.addInput(F64, {s0});
  BufferId by = p.addInput(F64, {s0});
  p.markOutput(p.pointwise({s0}, [&](Ops &ops, Idx i) {
    Val x = ops.abs(ops.load(bx, {i[0]})) + ops.constant(0.25, F64);
    Val y = ops.load(by, {i[0]});
    return ops.exp(y) + ops.log(x) + ops.sin(y) * ops.atan2(y, x) +
           ops.pow(x, ops.constant(-1.5, F64)) + ops.pow(x, ops.constant(0.5, F64)) + ops.pow(x, y);
  }));
  CompiledProgram c = compile(p);
  const std::string &text = c.module().text;
  CHECK(kernel(c, 0).width == f32Lanes() / 2); // f64 lanes, not a scalar loop
  CHECK_FALSE(has(text, "math.exp "));
  CHECK_FALSE(has(text, "math.log "));
  CHECK(has(text, "math.sqrt"));
  if (dlopen("libmvec.so.1", RTLD_NOW) != nullptr) { // glibc's vector math library
    CHECK(has(text, "_sin("));
    CHECK(has(text, "vv_atan2("));
    CHECK(has(text, "vv_pow("));
  }
  for (int64_t n : kSizes) {
    INFO(n);
    checkAgainstInterpreter(
        c, {ops::mul(randn({n}, F64), Tensor::wrapScalar(Scalar(20.0))), randn({n}, F64)});
  }
}

TEST_CASE("runs computing the same thing on other buffers share one function", "[cpu_emit]") {
  // Two time steps of an update that keeps its size (as slice_scatter does), with another
  // kernel between them: the second step is the first's code on other buffers (arguments come
  // in the order a run uses them, so the function text is the same).
  SymInt s0 = sym("s0");
  LoopProgram p;
  BufferId a = p.addInput(DType::Float64, {s0});
  auto step = [&](BufferId in) {
    return p.pointwise({s0}, [&](Ops &ops, Idx i) {
      return ops.load(in, {i[0]}) * ops.constant(0.5, DType::Float64) +
             ops.constant(1.0, DType::Float64);
    });
  };
  BufferId first = step(a);
  p.markOutput(first); // materialized, not inlined into the next step
  BufferId second = p.pointwise({s0}, [&](Ops &ops, Idx i) {
    return ops.exp(ops.load(first, {i[0]})) - ops.load(a, {i[0]});
  });
  p.markOutput(second);
  p.markOutput(step(second));
  CompiledProgram c = compile(p);
  auto of = [&](size_t node) {
    for (const KernelInfo &k : c.module().kernels)
      if (k.node == node)
        return k.name;
    FAIL("no kernel for node " << node);
    return std::string();
  };
  CHECK(of(0) == of(2));
  CHECK(of(1) != of(0));
  const std::string &text = c.module().text;
  CHECK(text.find("func.func @" + of(0) + "(") == text.rfind("func.func @" + of(0) + "("));
  for (int64_t n : {7, 16, 1031}) {
    INFO(n);
    checkAgainstInterpreter(c, {randn({n}, DType::Float64)});
  }
}

TEST_CASE("loads 2 to 4 elements apart are a masked span load and a shuffle, up to the last row",
          "[cpu_emit]") {
  // Each output reads the input at stride 2, 3 and 4 along the lane, ending at the input's last
  // element: the span's mask must stop there (the input is exactly as long as the reads need).
  for (int64_t cols : {1, 7, 16, 33}) {
    INFO(cols << " columns");
    LoopProgram p;
    BufferId x = p.addInput(F32, {5, 4 * cols});
    p.markOutput(p.pointwise({5, cols}, [&](Ops &ops, Idx i) {
      return ops.load(x, {i[0], i[1] * 2 + 1}) +
             ops.load(x, {i[0], i[1] * 3}) * ops.constant(2.0, F32) +
             ops.load(x, {i[0], i[1] * 4 + 3}) * ops.constant(3.0, F32);
    }));
    CompiledProgram c = compile(p);
    CHECK(has(c.module().text, "vector.maskedload"));
    CHECK_FALSE(has(c.module().text, "vector.gather"));
    checkAgainstInterpreter(c, {randn({5, 4 * cols})});
  }
}

TEST_CASE("stores 2 to 4 elements apart are a shuffle and a masked store of the span",
          "[cpu_emit]") {
  // Interleaving: [5, s, cols] laid out as [5, cols, s], each s-th element written by the lane
  // walking the columns; the other nodes' elements between them stay as they are.
  for (int64_t s : {2, 3, 4})
    for (int64_t cols : {1, 7, 16, 33}) {
      INFO(s << " apart, " << cols << " columns");
      LoopProgram p;
      BufferId x = p.addInput(F32, {5, cols});
      p.markOutput(p.pointwise(
          {5, s, cols},
          [&](Ops &ops, Idx i) {
            return ops.load(x, {i[0], i[2]}) * ops.cast(ops.indexValue(i[1] + 1), F32);
          },
          std::vector<SymInt>{SymInt(s * cols), SymInt(1), SymInt(s)}));
      CompiledProgram c = compile(p);
      CHECK(has(c.module().text, "vector.maskedstore"));
      checkAgainstInterpreter(c, {randn({5, cols})});
    }
}

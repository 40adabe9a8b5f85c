// The loop IR's reference interpreter against kiln's eager kernels.

#include "ir/loop/interpreter.h"
#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/index.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/random.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/softmax.h"

#include <cmath>
#include <kiln_catch.h>
#include <limits>

using namespace kiln;
using namespace kiln::ir;
using namespace kiln::ir::loop;

namespace {

constexpr DType F32 = DType::Float32;
using Idx = std::span<const IndexExpr>;
SymInt sym(const char *name) { return SymInt::symbol(name); }

Tensor randn(Shape sizes) {
  static Generator gen(20261129);
  return ops::randn(sizes, F32, &gen);
}

std::vector<double> values(const Tensor &t) {
  Tensor d = t.to(DType::Float64).contiguous();
  return {d.data<double>(), d.data<double>() + d.numel()};
}

/// Same shape and every element within `tol` (relative to max(1, |expected|)); NaNs must match.
void checkClose(const Tensor &actual, const Tensor &expected, double tol) {
  REQUIRE(actual.sizes() == expected.sizes());
  std::vector<double> a = values(actual), e = values(expected);
  for (size_t k = 0; k < a.size(); ++k) {
    INFO("element " << k << ": " << a[k] << " vs " << e[k]);
    if (std::isnan(e[k]))
      CHECK(std::isnan(a[k]));
    else
      CHECK(std::abs(a[k] - e[k]) <= tol * std::max(1.0, std::abs(e[k])));
  }
}

Tensor fromValues(Shape sizes, std::vector<float> v) {
  Tensor t = Tensor::empty(sizes, F32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

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

/// softmax over the last dim of f32[s0, 16] as three loop nodes.
LoopProgram softmaxProgram() {
  LoopProgram p;
  SymInt s0 = sym("s0");
  BufferId x = p.addInput(F32, {s0, 16});
  BufferId mx = p.reduction(ReductionKind::Max, {s0}, {16},
                            [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1]}); });
  BufferId sum = p.reduction(ReductionKind::Sum, {s0}, {16}, [&](Ops &ops, Idx i) {
    return ops.exp(ops.load(x, {i[0], i[1]}) - ops.load(mx, {i[0]}));
  });
  p.markOutput(p.pointwise({s0, 16}, [&](Ops &ops, Idx i) {
    return ops.exp(ops.load(x, {i[0], i[1]}) - ops.load(mx, {i[0]})) / ops.load(sum, {i[0]});
  }));
  return p;
}

} // namespace

TEST_CASE("add-relu with broadcasting matches eager", "[loop][interp]") {
  Tensor x = randn({4, 128}), b = randn({128});
  Tensor expected = ops::relu(ops::add(x, b));
  SymInt s0 = sym("s0");

  SECTION("the bias indexed by i1 alone") {
    LoopProgram p;
    BufferId bx = p.addInput(F32, {s0, 128});
    BufferId bb = p.addInput(F32, {128});
    p.markOutput(p.pointwise({s0, 128}, [&](Ops &ops, Idx i) {
      return ops.maximum(ops.load(bx, {i[0], i[1]}) + ops.load(bb, {i[1]}), ops.constant(0.0, F32));
    }));
    Interpreter interp(p);
    checkClose(interp.run({x, b})[0], expected, 0);
    CHECK(interp.symbols().at("s0") == 4);
  }
  SECTION("the bias as an expanded view: stride 0") {
    LoopProgram p;
    BufferId bx = p.addInput(F32, {s0, 128});
    BufferId bb = p.addInput(F32, {s0, 128}, std::vector<SymInt>{0, 1});
    p.markOutput(p.pointwise({s0, 128}, [&](Ops &ops, Idx i) {
      Val v = ops.load(bx, {i[0], i[1]}) + ops.load(bb, {i[0], i[1]});
      CHECK(v.expr()->operand(1)->index.str() == "i1");
      return ops.maximum(v, ops.constant(0.0, F32));
    }));
    checkClose(interpret(p, std::vector<Tensor>{x, b.expand({4, 128})})[0], expected, 0);
  }
}

TEST_CASE("a transpose copy matches eager", "[loop][interp]") {
  Tensor x = randn({5, 7});
  LoopProgram p;
  BufferId bx = p.addInput(F32, {5, 7});
  p.markOutput(p.pointwise({7, 5}, [&](Ops &ops, Idx i) { return ops.load(bx, {i[1], i[0]}); }));
  Tensor y = interpret(p, std::vector<Tensor>{x})[0];
  CHECK(y.isContiguous());
  checkClose(y, x.t(), 0);
}

TEST_CASE("sums over the last dim and over dim 0 match eager", "[loop][interp]") {
  Tensor x = randn({6, 10});
  LoopProgram p;
  BufferId bx = p.addInput(F32, {6, 10});
  BufferId rows = p.reduction(ReductionKind::Sum, {6}, {10},
                              [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[1]}); });
  BufferId cols = p.reduction(ReductionKind::Sum, {10}, {6},
                              [&](Ops &ops, Idx i) { return ops.load(bx, {i[1], i[0]}); });
  p.markOutput(rows);
  p.markOutput(cols);
  std::vector<Tensor> out = interpret(p, std::vector<Tensor>{x});
  checkClose(out[0], ops::sum(x, Shape{1}), 1e-6);
  checkClose(out[1], ops::sum(x, Shape{0}), 1e-6);
}

TEST_CASE("full, prod, min and integer reductions match eager", "[loop][interp]") {
  Tensor x = randn({3, 4});
  Tensor n = ops::randint(-50, 50, {3, 4}, DType::Int32);
  LoopProgram p;
  BufferId bx = p.addInput(F32, {3, 4});
  BufferId bn = p.addInput(DType::Int32, {3, 4});
  auto loadX = [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[1]}); };
  p.markOutput(p.reduction(ReductionKind::Sum, {}, {3, 4}, loadX)); // to a 0-d buffer
  p.markOutput(p.reduction(ReductionKind::Prod, {3}, {4}, loadX));
  p.markOutput(p.reduction(ReductionKind::Min, {3}, {4}, loadX));
  p.markOutput(p.reduction(ReductionKind::Sum, {4}, {3}, [&](Ops &ops, Idx i) {
    return ops.cast(ops.load(bn, {i[1], i[0]}), DType::Int64); // torch sums int32 in int64
  }));
  p.markOutput(p.reduction(ReductionKind::Max, {3}, {4},
                           [&](Ops &ops, Idx i) { return ops.load(bn, {i[0], i[1]}); }));
  std::vector<Tensor> out = interpret(p, std::vector<Tensor>{x, n});
  CHECK(out[0].dim() == 0);
  checkClose(out[0], ops::sum(x), 1e-6);
  checkClose(out[1], ops::prod(x, 1), 1e-6);
  checkClose(out[2], ops::amin(x, Shape{1}), 0);
  CHECK(out[3].dtype() == DType::Int64);
  CHECK(values(out[3]) == values(ops::sum(n, Shape{0})));
  CHECK(out[4].dtype() == DType::Int32);
  CHECK(values(out[4]) == values(ops::amax(n, Shape{1})));
}

TEST_CASE("softmax as max, exp-sum and pointwise nodes matches eager", "[loop][interp]") {
  LoopProgram p = softmaxProgram();
  for (int64_t rows : {3, 5}) {
    Tensor x = ops::mul(randn({rows, 16}), Tensor::wrapScalar(Scalar(20.0)));
    checkClose(interpret(p, std::vector<Tensor>{x})[0], ops::softmax(x, 1), 1e-6);
  }
}

TEST_CASE("layer_norm through a welford reduction matches eager", "[loop][interp]") {
  const int64_t n = 4, d = 24;
  const double eps = 1e-5;
  LoopProgram p;
  BufferId bx = p.addInput(F32, {n, d});
  BufferId bw = p.addInput(F32, {d});
  BufferId bb = p.addInput(F32, {d});
  WelfordBuffers st =
      p.welford({n}, {d}, [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[1]}); });
  BufferId y = p.pointwise({n, d}, [&](Ops &ops, Idx i) {
    Val var = ops.load(st.m2, {i[0]}) / ops.cast(ops.load(st.count, {i[0]}), F32);
    Val inv = ops.rsqrt(var + ops.constant(eps, F32));
    Val centered = ops.load(bx, {i[0], i[1]}) - ops.load(st.mean, {i[0]});
    return centered * inv * ops.load(bw, {i[1]}) + ops.load(bb, {i[1]});
  });
  p.markOutput(y);
  p.markOutput(st.mean);
  p.markOutput(st.m2);
  p.markOutput(st.count);
  Tensor w = randn({d}), b = randn({d});

  Tensor x = ops::add(randn({n, d}), Tensor::wrapScalar(Scalar(3.0)));
  std::vector<Tensor> out = interpret(p, std::vector<Tensor>{x, w, b});
  checkClose(out[0], ops::layerNorm(x, {d}, w, b, eps), 1e-5);
  CHECK(out[3].dtype() == DType::Int64);
  CHECK(values(out[3]) == std::vector<double>(n, double(d)));

  // A mean of 1e4 and a variance of 1: the statistics must not lose the variance to
  // cancellation (f32 rounding of the mean itself is the only error left).
  Tensor big = ops::add(randn({n, d}), Tensor::wrapScalar(Scalar(1e4)));
  out = interpret(p, std::vector<Tensor>{big, w, b});
  checkClose(out[1], ops::mean(big, Shape{1}), 1e-7);
  checkClose(ops::div(out[2], Tensor::wrapScalar(Scalar(double(d)))), ops::var(big, Shape{1}, 0.0),
             1e-6);
}

TEST_CASE("argmax and argmin take the first extreme, NaN included, like torch", "[loop][interp]") {
  float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = fromValues({4, 4}, {1, 3, 3, 2, 5, 5, 5, 5, 0, nan, 7, nan, -1, -2, -4, -4});
  LoopProgram p;
  BufferId bx = p.addInput(F32, {4, 4});
  for (ReductionKind kind : {ReductionKind::ArgMax, ReductionKind::ArgMin})
    p.markOutput(
        p.reduction(kind, {4}, {4}, [&](Ops &ops, Idx i) { return ops.load(bx, {i[0], i[1]}); }));
  std::vector<Tensor> out = interpret(p, std::vector<Tensor>{x});
  CHECK(out[0].dtype() == DType::Int64);
  CHECK(values(out[0]) == std::vector<double>{1, 0, 1, 0});
  CHECK(values(out[1]) == std::vector<double>{0, 0, 1, 2});
  CHECK(values(out[0]) == values(ops::argmax(x, 1)));
  CHECK(values(out[1]) == values(ops::argmin(x, 1)));

  Tensor y = randn({3, 9}); // over dim 0: the reduction variable walks the rows
  LoopProgram q;
  BufferId by = q.addInput(F32, {3, 9});
  q.markOutput(q.reduction(ReductionKind::ArgMax, {9}, {3},
                           [&](Ops &ops, Idx i) { return ops.load(by, {i[1], i[0]}); }));
  CHECK(values(interpret(q, std::vector<Tensor>{y})[0]) == values(ops::argmax(y, 0)));
}

TEST_CASE("a symbolic-size program runs at two sizes", "[loop][interp]") {
  SymInt s0 = sym("s0"), s1 = sym("s1");
  LoopProgram p;
  BufferId x = p.addInput(F32, {s0, s1});
  BufferId sum = p.reduction(ReductionKind::Sum, {s0}, {s1},
                             [&](Ops &ops, Idx i) { return ops.load(x, {i[0], i[1]}); });
  p.markOutput(p.pointwise({s0, s1}, [&](Ops &ops, Idx i) { // x - mean(x, 1)
    Val n = ops.cast(ops.indexValue(s1), F32);
    return ops.load(x, {i[0], i[1]}) - ops.load(sum, {i[0]}) / n;
  }));
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 5}, {6, 2}}) {
    Tensor t = randn({rows, cols});
    Interpreter interp(p);
    Tensor y = interp.run({t})[0];
    CHECK(interp.symbols().at("s0") == rows);
    CHECK(interp.symbols().at("s1") == cols);
    checkClose(y, ops::sub(t, ops::mean(t, Shape{1}, true)), 1e-6);
  }
}

TEST_CASE("index values, integer prims and externs match eager", "[loop][interp]") {
  SECTION("arange from an index value") {
    LoopProgram p;
    p.markOutput(
        p.pointwise({5}, [&](Ops &ops, Idx i) { return ops.cast(ops.indexValue(i[0] * 2), F32); }));
    checkClose(interpret(p, {})[0], ops::arange(Scalar(0), Scalar(10), Scalar(2), F32), 0);
  }
  SECTION("floordiv and mod round like Python") {
    Tensor a = ops::arange(Scalar(-7), Scalar(8), Scalar(1), DType::Int32);
    Tensor b = ops::full({15}, Scalar(3), DType::Int32);
    Tensor nb = ops::full({15}, Scalar(-3), DType::Int32);
    LoopProgram p;
    BufferId ba = p.addInput(DType::Int32, {15});
    BufferId bb = p.addInput(DType::Int32, {15});
    p.markOutput(p.pointwise({15}, [&](Ops &ops, Idx i) {
      return ops.floorDiv(ops.load(ba, {i[0]}), ops.load(bb, {i[0]}));
    }));
    p.markOutput(p.pointwise({15}, [&](Ops &ops, Idx i) {
      return ops.mod(ops.load(ba, {i[0]}), ops.load(bb, {i[0]}));
    }));
    for (const Tensor &d : {b, nb}) {
      std::vector<Tensor> out = interpret(p, std::vector<Tensor>{a, d});
      CHECK(out[0].dtype() == DType::Int32);
      CHECK(values(out[0]) == values(ops::floorDivide(a, d)));
      CHECK(values(out[1]) == values(ops::remainder(a, d)));
    }
  }
  SECTION("indirect loads gather rows and wrap negative positions when asked") {
    Tensor table = randn({5, 3});
    Tensor idx = ops::arange(Scalar(-2), Scalar(3), Scalar(1), DType::Int64); // -2 .. 2
    for (bool wrap : {false, true}) {
      LoopProgram p;
      BufferId bt = p.addInput(F32, {5, 3});
      BufferId bi = p.addInput(DType::Int64, {5});
      p.markOutput(p.pointwise({5, 3}, [&](Ops &ops, Idx i) {
        return ops.loadIndirect(bt, {i[0], i[1]}, 0, ops.load(bi, {i[0]}), wrap);
      }));
      if (!wrap) {
        CHECK(errorOf(ErrorKind::Index, [&] { interpret(p, std::vector<Tensor>{table, idx}); }) ==
              "index -2 is out of bounds for a dimension with size 5");
        Tensor shifted = ops::add(idx, Tensor::wrapScalar(Scalar(int64_t{2})));
        checkClose(interpret(p, std::vector<Tensor>{table, shifted})[0],
                   ops::indexSelect(table, 0, shifted), 0);
        continue;
      }
      Tensor wrapped = ops::remainder(idx, Tensor::wrapScalar(Scalar(int64_t{5})));
      checkClose(interpret(p, std::vector<Tensor>{table, idx})[0],
                 ops::indexSelect(table, 0, wrapped), 0);
      Tensor tooLow = ops::full({5}, Scalar(-6), DType::Int64);
      CHECK(errorOf(ErrorKind::Index, [&] { interpret(p, std::vector<Tensor>{table, tooLow}); }) ==
            "index -6 is out of bounds for a dimension with size 5");
    }
  }
  SECTION("an mm extern with a pointwise epilogue") {
    Tensor a = randn({3, 8}), w = randn({8, 4});
    LoopProgram p;
    BufferId ba = p.addInput(F32, {3, 8});
    BufferId bw = p.addInput(F32, {8, 4});
    BufferId mm = p.external("mm", {ba, bw}, {TensorMeta::contiguous(F32, {3, 4})})[0];
    p.markOutput(p.pointwise({3, 4}, [&](Ops &ops, Idx i) {
      return ops.maximum(ops.load(mm, {i[0], i[1]}), ops.constant(0.0, F32));
    }));
    checkClose(interpret(p, std::vector<Tensor>{a, w})[0], ops::relu(ops::mm(a, w)), 0);
  }
}

TEST_CASE("the interpreter reports bad bindings and bad loads", "[loop][interp][errors]") {
  LoopProgram soft = softmaxProgram();
  Tensor x = randn({4, 16});
  CHECK(errorOf(ErrorKind::Value, [&] { interpret(soft, {}); }) ==
        "loop interpreter: the program takes 1 inputs, got 0");
  CHECK(errorOf(ErrorKind::Type,
                [&] { interpret(soft, std::vector<Tensor>{x.to(DType::Float64)}); }) ==
        "loop interpreter: input buf0 is f32[s0, 16] but the tensor bound to it has dtype float64");
  CHECK(errorOf(ErrorKind::Value, [&] { interpret(soft, std::vector<Tensor>{x}, {{"s0", 3}}); }) ==
        "loop interpreter: input buf0 is f32[s0, 16] = [3, 16] here, but the tensor bound to it "
        "has shape [4, 16]");
  CHECK(errorOf(ErrorKind::Value, [&] {
          interpret(soft, std::vector<Tensor>{x.t()});
        }).find("has shape [16, 4]") != std::string::npos);

  LoopProgram flat; // s0 appears only inside an expression: it cannot be read off the input
  BufferId f = flat.addInput(F32, {sym("s0") * 2});
  flat.markOutput(
      flat.pointwise({sym("s0") * 2}, [&](Ops &ops, Idx i) { return ops.load(f, {i[0]}); }));
  CHECK(errorOf(ErrorKind::Value, [&] { interpret(flat, std::vector<Tensor>{randn({8})}); }) ==
        "loop interpreter: symbol 's0' has no value: bind() it or pass an input with a dimension "
        "of size s0");
  CHECK(interpret(flat, std::vector<Tensor>{randn({8})}, {{"s0", 4}})[0].numel() == 8);

  LoopProgram shifted; // reads one past the end
  BufferId s = shifted.addInput(F32, {8});
  shifted.markOutput(
      shifted.pointwise({8}, [&](Ops &ops, Idx i) { return ops.load(s, {i[0] + 1}); }));
  CHECK(errorOf(ErrorKind::Index, [&] { interpret(shifted, std::vector<Tensor>{randn({8})}); }) ==
        "loop interpreter: load buf0[i0 + 1] reads offset 8 outside the buffer f32[8] (offsets "
        "0..7) at i0 = 7");

  LoopProgram divide;
  BufferId di = divide.addInput(DType::Int64, {2});
  divide.markOutput(divide.pointwise({2}, [&](Ops &ops, Idx i) {
    return ops.floorDiv(ops.constant(1, DType::Int64), ops.load(di, {i[0]}));
  }));
  CHECK(errorOf(ErrorKind::Value, [&] {
          interpret(divide, std::vector<Tensor>{ops::zeros({2}, DType::Int64)});
        }) == "loop interpreter: integer floordiv by zero");

  LoopProgram empty;
  BufferId e = empty.addInput(F32, {3, 0});
  empty.markOutput(empty.reduction(ReductionKind::ArgMax, {3}, {0},
                                   [&](Ops &ops, Idx i) { return ops.load(e, {i[0], i[1]}); }));
  CHECK(errorOf(ErrorKind::Index, [&] { interpret(empty, std::vector<Tensor>{randn({3, 0})}); }) ==
        "loop interpreter: argmax over an empty reduction range");

  LoopProgram ext;
  BufferId xi = ext.addInput(F32, {2});
  ext.markOutput(ext.external("fft", {xi}, {TensorMeta::contiguous(F32, {2})})[0]);
  CHECK(errorOf(ErrorKind::NotImplemented, [&] {
          interpret(ext, std::vector<Tensor>{randn({2})});
        }).find("no implementation of extern \"fft\"") != std::string::npos);
}

TEST_CASE("interpreter: prims agree bit for bit with the eager kernels on edge values",
          "[loop_interp]") {
  // Each of these once differed: max/min picked the first zero on ties, integer pow rejected a
  // negative exponent, int64 -> f32 rounded twice (through double), f32 pow ran in double.
  Tensor zeros = fromValues({4}, {-0.0f, 0.0f, -0.0f, 0.0f});
  Tensor other = fromValues({4}, {0.0f, -0.0f, -0.0f, 0.0f});
  for (bool isMax : {true, false}) {
    LoopProgram p;
    BufferId a = p.addInput(F32, {4}), b = p.addInput(F32, {4});
    p.markOutput(p.pointwise({4}, [&](Ops &ops, Idx i) {
      Val x = ops.load(a, {i[0]}), y = ops.load(b, {i[0]});
      return isMax ? ops.maximum(x, y) : ops.minimum(x, y);
    }));
    Tensor got = interpret(p, std::vector<Tensor>{zeros, other})[0];
    Tensor want = isMax ? ops::maximum(zeros, other) : ops::minimum(zeros, other);
    for (int64_t k = 0; k < 4; ++k)
      CHECK(std::signbit(got.data<float>()[k]) == std::signbit(want.data<float>()[k]));
  }

  LoopProgram ints;
  BufferId base = ints.addInput(DType::Int64, {5}), exp = ints.addInput(DType::Int64, {5});
  ints.markOutput(ints.pointwise({5}, [&](Ops &ops, Idx i) {
    return ops.pow(ops.load(base, {i[0]}), ops.load(exp, {i[0]}));
  }));
  ints.markOutput(
      ints.pointwise({5}, [&](Ops &ops, Idx i) { return ops.cast(ops.load(base, {i[0]}), F32); }));
  Tensor tb = Tensor::empty({5}, DType::Int64), te = Tensor::empty({5}, DType::Int64);
  int64_t big = (int64_t{1} << 60) + (int64_t{1} << 36) + 1;
  std::vector<int64_t> bv{1, -1, -1, 2, big}, ev{-3, -3, -4, -1, 1};
  std::copy(bv.begin(), bv.end(), tb.data<int64_t>());
  std::copy(ev.begin(), ev.end(), te.data<int64_t>());
  std::vector<Tensor> out = interpret(ints, std::vector<Tensor>{tb, te});
  Tensor powWant = ops::pow(tb, te), castWant = tb.to(F32);
  for (int64_t k = 0; k < 5; ++k) {
    CHECK(out[0].data<int64_t>()[k] == powWant.data<int64_t>()[k]);
    CHECK(out[1].data<float>()[k] == castWant.data<float>()[k]);
  }

  LoopProgram fp;
  BufferId fb = fp.addInput(F32, {64}), fe = fp.addInput(F32, {64});
  fp.markOutput(fp.pointwise(
      {64}, [&](Ops &ops, Idx i) { return ops.pow(ops.load(fb, {i[0]}), ops.load(fe, {i[0]})); }));
  Tensor x = ops::add(ops::abs(randn({64})), fromValues({1}, {1.0f}));
  Tensor e = ops::mul(randn({64}), fromValues({1}, {20.0f}));
  Tensor got = interpret(fp, std::vector<Tensor>{x, e})[0], want = ops::pow(x, e);
  for (int64_t k = 0; k < 64; ++k)
    CHECK(got.data<float>()[k] == want.data<float>()[k]);
}

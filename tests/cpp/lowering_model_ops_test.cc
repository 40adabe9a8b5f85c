// Lowering of the model-zoo ops (arange, contiguous, batch_norm, the 2-d pools, the class losses)
// against kiln's eager kernels: lowered, unfused and fused programs through the loop interpreter.

#include "tests/cpp/lowering_test_util.h"

#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/pool.h"
#include "runtime/ops/softmax.h"
#include "runtime/ops/unary_math.h"

using namespace kiln;
using namespace kiln::lowering_test;

namespace {

Tensor maxPool(const Tensor &x, Shape k, Shape s, Shape p, Shape d, bool ceil) {
  return ops::maxPool(2, x, ops::PoolOptions{k, s, p, d, ceil}, false).first;
}

Tensor avgPool(const Tensor &x, Shape k, Shape s, Shape p, bool ceil, bool includePad,
               std::optional<int64_t> divisor = std::nullopt) {
  return ops::avgPool(2, x, ops::PoolOptions{k, s, p, {1}, ceil}, includePad, divisor);
}

} // namespace

TEST_CASE("arange is an index pointwise: steps, negative steps, dtypes, a symbolic end",
          "[lower][model]") {
  std::string kir = graph("%x: f32[s0, 3]",
                          "  %0 = arange() {end = 7} : i64[7]\n"
                          "  %1 = arange() {end = -4, start = 3, step = -2} : i64[4]\n"
                          "  %2 = arange() {dtype = f32, end = 10, start = 1, step = 3} : f32[3]\n"
                          "  %3 = arange() {end = s0} : i64[s0]\n"
                          "  %4 = arange() {dtype = f16, end = s0, start = 0, step = 2} : "
                          "f16[(s0 + 1) floordiv 2]\n",
                          "%0, %1, %2, %3, %4");
  for (int64_t s0 : {1, 6, 7}) {
    check(kir, {randn({s0, 3})},
          {ops::arange(0, 7, 1, I64), ops::arange(3, -4, -2, I64), ops::arange(1, 10, 3, F32),
           ops::arange(0, s0, 1, I64), ops::arange(0, s0, 2, F16)});
  }
}

TEST_CASE("contiguous copies a view densely (and is free on a dense value)", "[lower][model]") {
  std::string kir = graph("%x: f32[s0, 5, 3]",
                          "  %0 = transpose(%x) {dim0 = 1, dim1 = 2} : f32[s0, 3, 5] "
                          "strided [15, 1, 3]\n"
                          "  %1 = contiguous(%0) : f32[s0, 3, 5]\n"
                          "  %2 = view(%1) {shape = [s0, 15]} : f32[s0, 15]\n"
                          "  %3 = exp(%x) : f32[s0, 5, 3]\n"
                          "  %4 = contiguous(%3) : f32[s0, 5, 3]\n",
                          "%1, %2, %4");
  for (int64_t s0 : {1, 4}) {
    Tensor x = randn({s0, 5, 3});
    Tensor t = x.transpose(1, 2).contiguous();
    check(kir, {x}, {t, t.view({s0, 15}), ops::exp(x)});
    // A transposed (non-dense) input reads through its strides.
    std::string strided = kir;
    strided.replace(strided.find("f32[s0, 5, 3]"), 13, "f32[s0, 5, 3] strided [15, 1, 5]");
    Tensor xt = randn({s0, 3, 5}).transpose(1, 2);
    Tensor tt = xt.transpose(1, 2).contiguous();
    check(strided, {xt}, {tt, tt.view({s0, 15}), ops::exp(xt)});
  }
}

TEST_CASE("batch_norm is a per-channel scale and an affine pointwise", "[lower][model]") {
  std::string kir = graph("%x: f32[s0, 5, 7, 3], %m: f32[5], %v: f32[5], %w: f32[5], %b: f32[5], "
                          "%h: f16[s0, 5, 2], %y: f32[s0, 5]",
                          "  %0 = batch_norm(%x, %m, %v, %w, %b) : f32[s0, 5, 7, 3]\n"
                          "  %1 = batch_norm(%x, %m, %v) {eps = 0.1} : f32[s0, 5, 7, 3]\n"
                          "  %2 = batch_norm(%x, %m, %v, %w) : f32[s0, 5, 7, 3]\n"
                          "  %3 = batch_norm(%h, %m, %v, %w, %b) : f16[s0, 5, 2]\n"
                          "  %4 = batch_norm(%y, %m, %v, %w, %b) {eps = 0.001} : f32[s0, 5]\n",
                          "%0, %1, %2, %3, %4");
  for (int64_t s0 : {1, 3}) {
    Tensor x = randn({s0, 5, 7, 3}), m = randn({5}), v = positive({5}), w = randn({5}),
           b = randn({5});
    Tensor h = randn({s0, 5, 2}, F16), y = randn({s0, 5});
    auto bn = [&](const Tensor &in, const Tensor &wt, const Tensor &bs, double eps) {
      return ops::batchNorm(in, wt, bs, m, v, false, 0.1, eps);
    };
    check(kir, {x, m, v, w, b, h, y},
          {bn(x, w, b, 1e-5), bn(x, Tensor(), Tensor(), 0.1), bn(x, w, Tensor(), 1e-5),
           bn(h, w, b, 1e-5), bn(y, w, b, 1e-3)},
          1e-5);
  }
}

TEST_CASE("max_pool2d and avg_pool2d are loop code: strides, padding, dilation, ceil_mode",
          "[lower][model]") {
  std::string kir =
      graph("%x: f32[s0, 3, 9, 8], %u: f32[2, 7, 5]",
            "  %0 = max_pool2d(%x) {kernel_size = [2, 2]} : f32[s0, 3, 4, 4]\n"
            "  %1 = max_pool2d(%x) {ceil_mode = true, kernel_size = [3, 2], padding = [1, 1], "
            "stride = [2, 3]} : f32[s0, 3, 5, 3]\n"
            "  %2 = max_pool2d(%x) {dilation = [2, 1], kernel_size = [3, 3]} : f32[s0, 3, 2, 2]\n"
            "  %3 = avg_pool2d(%x) {kernel_size = [3, 3], padding = [1, 1], stride = [2, 2]} : "
            "f32[s0, 3, 5, 4]\n"
            "  %4 = avg_pool2d(%x) {ceil_mode = true, count_include_pad = false, kernel_size = "
            "[2, 3], padding = [1, 1], stride = [2, 2]} : f32[s0, 3, 5, 5]\n"
            "  %5 = avg_pool2d(%u) {divisor_override = 5, kernel_size = [2, 2]} : f32[2, 3, 2]\n"
            "  %6 = max_pool2d(%u) {kernel_size = [7, 5]} : f32[2, 1, 1]\n"
            "  %t = transpose(%x) {dim0 = 2, dim1 = 3} : f32[s0, 3, 8, 9] strided [216, 72, 1, 8]\n"
            "  %7 = max_pool2d(%t) {kernel_size = [3, 3], stride = [1, 2]} : f32[s0, 3, 6, 4]\n",
            "%0, %1, %2, %3, %4, %5, %6, %7");
  // Every window is loop code, padded ones and ceil_mode windows over the edge too (guarded
  // reads); only an average dividing by the points inside the input stays an extern.
  std::string text = lower(kir).str();
  CHECK(text.find("reduction max [s0, 3, 4, 4] over [2, 2]") != std::string::npos);
  CHECK(text.find("reduction max [s0, 3, 2, 2] over [3, 3]") != std::string::npos);
  CHECK(text.find("reduction sum [2, 3, 2] over [2, 2]") != std::string::npos);
  CHECK(text.find("reduction max [s0, 3, 5, 3] over [3, 2]") != std::string::npos);
  CHECK(text.find("reduction sum [s0, 3, 5, 4] over [3, 3]") != std::string::npos);
  CHECK(text.find("extern \"max_pool2d\"") == std::string::npos);
  CHECK(text.find("extern \"avg_pool2d\"(buf0) {ceil_mode = true, count_include_pad = false") !=
        std::string::npos);
  for (int64_t s0 : {1, 2}) {
    Tensor x = randn({s0, 3, 9, 8}), u = randn({2, 7, 5});
    check(kir, {x, u},
          {maxPool(x, {2}, {}, {0}, {1}, false), maxPool(x, {3, 2}, {2, 3}, {1}, {1}, true),
           maxPool(x, {3}, {}, {0}, {2, 1}, false), avgPool(x, {3}, {2}, {1}, false, true),
           avgPool(x, {2, 3}, {2}, {1}, true, false), avgPool(u, {2}, {}, {0}, false, true, 5),
           maxPool(u, {7, 5}, {}, {0}, {1}, false),
           maxPool(x.transpose(2, 3), {3}, {1, 2}, {0}, {1}, false)});
  }
}

TEST_CASE("adaptive_avg_pool2d: a global mean is loop code, other sizes an extern",
          "[lower][model]") {
  std::string kir =
      graph("%x: f32[s0, 4, 5, 7], %h: f16[3, 2, 2]",
            "  %0 = adaptive_avg_pool2d(%x) {output_size = [1, 1]} : f32[s0, 4, 1, 1]\n"
            "  %1 = adaptive_avg_pool2d(%x) {output_size = [2, 3]} : f32[s0, 4, 2, 3]\n"
            "  %2 = adaptive_avg_pool2d(%h) {output_size = [1, 1]} : f16[3, 1, 1]\n"
            "  %3 = adaptive_avg_pool2d(%x) {output_size = [1]} : f32[s0, 4, 1, 1]\n",
            "%0, %1, %2, %3");
  LoopProgram p = lower(kir);
  CHECK(p.str().find("reduction sum [s0, 4, 1, 1] over [5, 7]") != std::string::npos);
  CHECK(p.str().find("extern \"adaptive_avg_pool2d\"") != std::string::npos);
  for (int64_t s0 : {1, 3}) {
    Tensor x = randn({s0, 4, 5, 7}), h = randn({3, 2, 2}, F16);
    check(kir, {x, h},
          {ops::adaptiveAvgPool(2, x, {1, 1}), ops::adaptiveAvgPool(2, x, {2, 3}),
           ops::adaptiveAvgPool(2, h, {1, 1}), ops::adaptiveAvgPool(2, x, {1, 1})});
  }
}

TEST_CASE("nll_loss and cross_entropy: ignored, weighted, smoothed and probability targets",
          "[lower][model]") {
  using ops::Reduction;
  std::string kir =
      graph("%x: f32[s0, 6], %t: i64[s0], %w: f32[6], %p: f32[s0, 6], %y: f32[2, 6, 3], %u: u8[2, "
            "3], %t2: i64[s0]",
            "  %0 = cross_entropy(%x, %t) : f32[]\n"
            "  %1 = cross_entropy(%x, %t, %w) {label_smoothing = 0.25, reduction = \"none\"} : "
            "f32[s0]\n"
            "  %2 = nll_loss(%x, %t2, %w) {ignore_index = 2, reduction = \"sum\"} : f32[]\n"
            "  %3 = cross_entropy(%x, %p, %w) {label_smoothing = 0.1} : f32[]\n"
            "  %4 = cross_entropy(%y, %u) {ignore_index = 0} : f32[]\n",
            "%0, %1, %2, %3, %4");
  Tensor none;
  for (int64_t s0 : {1, 5}) {
    Tensor x = randn({s0, 6}), w = ops::add(ops::abs(randn({6})), scalar(0.5));
    Tensor t = randint(0, 6, {s0}, DType::Int64), p = ops::softmax(randn({s0, 6}), 1);
    t.select(0, 0).fill_(Scalar(int64_t{-100}));
    Tensor y = randn({2, 6, 3}), u = randint(0, 6, {2, 3}, DType::UInt8);
    Tensor t2 = ops::remainder(ops::abs(t), Tensor::wrapScalar(Scalar(int64_t{6})));
    check(kir, {x, t, w, p, y, u, t2},
          {ops::crossEntropy(x, t, none, Reduction::Mean, -100, 0),
           ops::crossEntropy(x, t, w, Reduction::None, -100, 0.25),
           ops::nllLoss(x, t2, w, Reduction::Sum, 2),
           ops::crossEntropy(x, p, w, Reduction::Mean, -100, 0.1),
           ops::crossEntropy(y, u, none, Reduction::Mean, 0, 0)},
          1e-5);
  }
}

TEST_CASE("a class index out of range is an IndexError", "[lower][model]") {
  LoopProgram p =
      lower(graph("%x: f32[3, 4], %t: i64[3]",
                  "  %0 = cross_entropy(%x, %t) {reduction = \"none\"} : f32[3]\n", "%0"));
  Tensor t = randint(0, 4, {3}, DType::Int64);
  t.select(0, 1).fill_(Scalar(int64_t{4}));
  try {
    run(p, {randn({3, 4}), t});
    FAIL("an out-of-range class was read");
  } catch (const Error &e) {
    CHECK(e.kind() == ErrorKind::Index);
    CHECK(std::string(e.what()) == "index 4 is out of bounds for a dimension with size 4");
  }
}

// Lowering (passes/lower) against kiln's eager kernels: every graph is parsed from .kir, lowered,
// and run through the loop interpreter three ways (as lowered, scheduled without fusion,
// scheduled with fusion); each output must match the eager op it lowers.

#include "tests/cpp/lowering_test_util.h"

#include "codegen/externs.h"
#include "ir/loop/interpreter.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "passes/lower/lowering.h"
#include "passes/schedule/schedule.h"
#include "runtime/generator.h"
#include "runtime/ops/activation.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/compare.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/index.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/random.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/shape_ops.h"
#include "runtime/ops/softmax.h"
#include "runtime/ops/unary_math.h"

#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <kiln_catch.h>
#include <limits>

using namespace kiln;
using namespace kiln::lowering_test;

TEST_CASE("unary ops and activations match eager", "[lower][elementwise]") {
  struct Case {
    const char *op, *attrs;
    std::function<Tensor(const Tensor &)> eager;
    bool positive = false;
  };
  const Case cases[] = {
      {"neg", "", ops::neg},
      {"abs", "", ops::abs},
      {"exp", "", ops::exp},
      {"log", "", ops::log, true},
      {"sqrt", "", ops::sqrt, true},
      {"rsqrt", "", ops::rsqrt, true},
      {"tanh", "", ops::tanh},
      {"sigmoid", "", ops::sigmoid},
      {"erf", "", ops::erf},
      {"relu", "", ops::relu},
      {"silu", "", ops::silu},
      {"gelu", "", [](const Tensor &t) { return ops::gelu(t, "none"); }},
      {"gelu", " {approximate = \"tanh\"}", [](const Tensor &t) { return ops::gelu(t, "tanh"); }},
  };
  for (const Case &c : cases) {
    std::string kir =
        graph("%x: f32[s0, 7]", fmt::format("  %0 = {}(%x){} : f32[s0, 7]\n", c.op, c.attrs), "%0");
    for (int64_t s0 : {1, 13}) { // a size-1 dim and a prime, the symbol bound twice
      INFO(c.op << c.attrs << " at s0 = " << s0);
      Tensor x = c.positive ? positive({s0, 7}) : randn({s0, 7});
      check(kir, {x}, {c.eager(x)});
    }
  }
}

TEST_CASE("unary ops on integers promote like torch", "[lower][elementwise]") {
  Tensor n = randint(-9, 9, {5}, DType::Int32), m = randint(-9, 9, {5}, I64);
  check(graph("%n: i32[5], %m: i64[5]",
              "  %0 = exp(%n) : f32[5]\n  %1 = abs(%m) : i64[5]\n  %2 = neg(%n) : i32[5]\n"
              "  %3 = relu(%n) : i32[5]\n  %4 = sigmoid(%m) : f32[5]\n",
              "%0, %1, %2, %3, %4"),
        {n, m}, {ops::exp(n), ops::abs(m), ops::neg(n), ops::relu(n), ops::sigmoid(m)});
}

TEST_CASE("binary ops broadcast like torch", "[lower][elementwise]") {
  struct Case {
    const char *op;
    Tensor (*eager)(const Tensor &, const Tensor &);
  };
  const Case cases[] = {
      {"add", [](const Tensor &a, const Tensor &b) { return ops::add(a, b); }},
      {"sub", [](const Tensor &a, const Tensor &b) { return ops::sub(a, b); }},
      {"mul", ops::mul},
      {"div", [](const Tensor &a, const Tensor &b) { return ops::div(a, b); }},
      {"pow", ops::pow},
      {"maximum", ops::maximum},
      {"minimum", ops::minimum},
  };
  for (const Case &c : cases) {
    std::string kir =
        graph("%x: f32[s0, 1, 7], %y: f32[5, 1]",
              fmt::format("  %0 = {}(%x, %y) : f32[s0, 5, 7]\n  %1 = {}(%y, %x) : f32[s0, 5, 7]\n",
                          c.op, c.op),
              "%0, %1");
    for (int64_t s0 : {1, 3}) {
      INFO(c.op << " at s0 = " << s0);
      Tensor x = positive({s0, 1, 7}), y = positive({5, 1});
      check(kir, {x, y}, {c.eager(x, y), c.eager(y, x)});
    }
  }
}

TEST_CASE("comparisons and where promote their operands", "[lower][elementwise]") {
  Tensor x = randint(-2, 3, {4, 6}, F32), y = randint(-2, 3, {6}, DType::Int32);
  std::string body;
  const char *names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  for (int k = 0; k < 6; ++k)
    body += fmt::format("  %{} = {}(%x, %y) : b8[4, 6]\n", k, names[k]);
  check(graph("%x: f32[4, 6], %y: i32[6]", body, "%0, %1, %2, %3, %4, %5"), {x, y},
        {ops::eq(x, y), ops::ne(x, y), ops::lt(x, y), ops::le(x, y), ops::gt(x, y), ops::ge(x, y)});

  Tensor c = ops::gt(randn({4, 1}), scalar(0.0)), a = randn({4, 6}), b = randn({6}, F16);
  check(graph("%c: b8[4, 1], %a: f32[4, 6], %b: f16[6]", "  %0 = where(%c, %a, %b) : f32[4, 6]\n",
              "%0"),
        {c, a, b}, {ops::where(c, a, b)});
}

TEST_CASE("type promotion: casts in the body, float16 computed in float32",
          "[lower][elementwise]") {
  Tensor i = randint(-5, 5, {3, 4}, DType::Int32), h = randn({4}, F16), h2 = randn({3, 4}, F16);
  Tensor bf = randn({3, 4}, DType::BFloat16), f = randn({4});
  Tensor l = randint(-5, 5, {3, 4}, I64), bits = ops::gt(randn({3, 4}), scalar(0.0));
  Tensor bits2 = ops::gt(randn({3, 4}), scalar(0.0)), d = randint(1, 5, {3, 4}, DType::Int32);
  Tensor small = randint(-5, 5, {3, 4}, DType::Int8),
         zeroDim = Tensor::scalarTensor(Scalar(3), I64);
  check(graph("%i: i32[3, 4], %h: f16[4], %h2: f16[3, 4], %bf: bf16[3, 4], %f: f32[4], "
              "%l: i64[3, 4], %bits: b8[3, 4], %bits2: b8[3, 4], %d: i32[3, 4], %small: i8[3, 4], "
              "%z: i64[]",
              "  %c = constant() {value = 2.5} : float\n"
              "  %0 = add(%i, %h) : f16[3, 4]\n"
              "  %1 = mul(%h2, %h2) : f16[3, 4]\n"
              "  %2 = add(%bf, %f) : f32[3, 4]\n"
              "  %3 = mul(%l, %c) : f32[3, 4]\n"
              "  %4 = add(%bits, %bits2) : b8[3, 4]\n"
              "  %5 = div(%i, %d) : f32[3, 4]\n"
              "  %6 = add(%small, %z) : i8[3, 4]\n"
              "  %7 = mul(%bits, %bits2) : b8[3, 4]\n",
              "%0, %1, %2, %3, %4, %5, %6, %7"),
        {i, h, h2, bf, f, l, bits, bits2, d, small, zeroDim},
        {ops::add(i, h), ops::mul(h2, h2), ops::add(bf, f), ops::mul(l, scalar(2.5)),
         ops::add(bits, bits2), ops::div(i, d), ops::add(small, zeroDim), ops::mul(bits, bits2)});
}

TEST_CASE("constants, sym_size, scalar inputs and folded scalar arithmetic", "[lower][scalars]") {
  std::string kir = graph("%x: f32[s0, 7], %a: float",
                          "  %c = constant() {value = 2.5} : float\n"
                          "  %two = constant() {value = 2} : int\n"
                          "  %n = sym_size(%x) {dim = 0} : int\n"
                          "  %m = mul(%n, %two) : int\n"
                          "  %0 = mul(%x, %c) : f32[s0, 7]\n"
                          "  %1 = add(%0, %m) : f32[s0, 7]\n"
                          "  %2 = sub(%1, %a) : f32[s0, 7]\n"
                          "  %k = constant() {value = 3.0} : f32[7]\n"
                          "  %3 = add(%2, %k) : f32[s0, 7]\n",
                          "%3, %m, %k");
  for (int64_t s0 : {1, 6}) {
    Tensor x = randn({s0, 7}), a = Tensor::scalarTensor(Scalar(0.75), DType::Float64);
    Tensor expected =
        ops::add(ops::sub(ops::add(ops::mul(x, scalar(2.5)), Tensor::wrapScalar(Scalar(2 * s0))),
                          scalar(0.75)),
                 ops::full({7}, Scalar(3.0), F32));
    check(kir, {x, a},
          {expected, Tensor::scalarTensor(Scalar(2 * s0), I64), ops::full({7}, Scalar(3.0), F32)});
  }
}

TEST_CASE("arithmetic on run-time numbers is a value the program computes", "[lower][scalars]") {
  // 1 - lr * wd with a learning rate that is a graph input (an optimizer's decoupled decay).
  std::string kir = graph("%x: f32[5], %lr: float",
                          "  %wd = constant() {value = 0.1} : float\n"
                          "  %one = constant() {value = 1} : int\n"
                          "  %d = mul(%lr, %wd) : float\n"
                          "  %k = sub(%one, %d) : float\n"
                          "  %0 = mul(%x, %k) : f32[5]\n",
                          "%0, %k");
  for (double lr : {0.5, 2.0}) {
    Tensor x = randn({5}), a = Tensor::scalarTensor(Scalar(lr), DType::Float64);
    check(kir, {x, a},
          {ops::mul(x, Tensor::wrapScalar(Scalar(1 - lr * 0.1))),
           Tensor::scalarTensor(Scalar(1 - lr * 0.1), DType::Float64)});
  }
}

TEST_CASE("cast truncates, rounds and tests like eager", "[lower][elementwise]") {
  Tensor x = ops::mul(randn({4, 5}), scalar(10.0)), z = randint(-1, 2, {4, 5}, F32);
  Tensor l = randint(-100, 100, {4, 5}, I64);
  check(graph("%x: f32[4, 5], %z: f32[4, 5], %l: i64[4, 5]",
              "  %0 = cast(%x) {dtype = i32} : i32[4, 5]\n"
              "  %1 = cast(%x) {dtype = f16} : f16[4, 5]\n"
              "  %2 = cast(%z) {dtype = b8} : b8[4, 5]\n"
              "  %3 = cast(%l) {dtype = f32} : f32[4, 5]\n",
              "%0, %1, %2, %3"),
        {x, z, l}, {x.to(DType::Int32), x.to(F16), z.to(DType::Bool), l.to(F32)});
}

TEST_CASE("transposed and expanded inputs are read through their strides", "[lower][views]") {
  for (int64_t s0 : {1, 6}) {
    Tensor x = randn({7, s0}).t(), y = randn({7}).expand({s0, 7});
    check(graph("%x: f32[s0, 7] strided [1, s0], %y: f32[s0, 7] strided [0, 1]",
                "  %0 = mul(%x, %y) : f32[s0, 7]\n  %1 = exp(%0) : f32[s0, 7]\n", "%1, %0"),
          {x, y}, {ops::exp(ops::mul(x, y)), ops::mul(x, y)});
  }
}

TEST_CASE("sum, mean, amax and amin over dims, keepdim, dtypes", "[lower][reduce]") {
  std::string kir = graph("%x: f32[s0, 6, 5], %n: i32[s0, 6, 5], %h: f16[s0, 6, 5]",
                          "  %0 = sum(%x) {dim = [1]} : f32[s0, 5]\n"
                          "  %1 = sum(%x) {dim = [0, 2], keepdim = true} : f32[1, 6, 1]\n"
                          "  %2 = sum(%x) : f32[]\n"
                          "  %3 = mean(%x) {dim = [-1]} : f32[s0, 6]\n"
                          "  %4 = amax(%x) {dim = [1], keepdim = true} : f32[s0, 1, 5]\n"
                          "  %5 = amin(%x) {dim = [0]} : f32[6, 5]\n"
                          "  %6 = sum(%n) {dim = [2]} : i64[s0, 6]\n"
                          "  %7 = sum(%h) {dim = [2]} : f16[s0, 6]\n"
                          "  %8 = mean(%h) {dim = [1, 2]} : f16[s0]\n"
                          "  %9 = sum(%x) {dim = [1], dtype = f64} : f64[s0, 5]\n",
                          "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9");
  for (int64_t s0 : {1, 7}) {
    INFO("s0 = " << s0);
    Tensor x = randn({s0, 6, 5}), n = randint(-50, 50, {s0, 6, 5}, DType::Int32);
    Tensor h = randn({s0, 6, 5}, F16);
    check(kir, {x, n, h},
          {ops::sum(x, Shape{1}), ops::sum(x, Shape{0, 2}, true), ops::sum(x),
           ops::mean(x, Shape{-1}), ops::amax(x, Shape{1}, true), ops::amin(x, Shape{0}),
           ops::sum(n, Shape{2}), ops::sum(h, Shape{2}), ops::mean(h, Shape{1, 2}),
           ops::sum(x, Shape{1}, false, DType::Float64)});
  }
}

TEST_CASE("argmax keeps the first maximum", "[lower][reduce]") {
  Tensor x = randint(0, 3, {4, 9}, F32); // ties
  check(graph("%x: f32[4, 9]",
              "  %0 = argmax(%x) {dim = 1} : i64[4]\n  %1 = argmax(%x) : i64[]\n"
              "  %2 = argmax(%x) {dim = 0, keepdim = true} : i64[1, 9]\n",
              "%0, %1, %2"),
        {x}, {ops::argmax(x, 1), ops::argmax(x), ops::argmax(x, 0, true)});
}

TEST_CASE("var uses Welford and the correction", "[lower][reduce]") {
  std::string kir =
      graph("%x: f32[s0, 9]",
            "  %0 = var(%x) {dim = [1]} : f32[s0]\n"
            "  %1 = var(%x) {correction = 0, dim = [1], keepdim = true} : f32[s0, 1]\n"
            "  %2 = var(%x) : f32[]\n"
            "  %3 = var(%x) {dim = [0]} : f32[9]\n",
            "%0, %1, %2, %3");
  for (int64_t s0 : {1, 4}) { // s0 = 1: var over dim 0 divides 0 by 0, NaN as in torch
    Tensor x = ops::add(randn({s0, 9}), scalar(100.0));
    check(kir, {x},
          {ops::var(x, Shape{1}), ops::var(x, Shape{1}, 0.0, true), ops::var(x),
           ops::var(x, Shape{0})},
          1e-4);
  }
}

TEST_CASE("logsumexp subtracts the max and survives infinities", "[lower][reduce]") {
  float inf = std::numeric_limits<float>::infinity();
  Tensor x = fromValues({3, 4}, {1, 2, 3, 4, -inf, -inf, -inf, -inf, 0, inf, 1, 2});
  Tensor big = ops::mul(randn({2, 5}), scalar(300.0)), n = randint(-5, 5, {2, 5}, DType::Int32);
  check(graph("%x: f32[3, 4], %big: f32[2, 5], %n: i32[2, 5]",
              "  %0 = logsumexp(%x) {dim = [1]} : f32[3]\n"
              "  %1 = logsumexp(%big) {dim = [0, 1], keepdim = true} : f32[1, 1]\n"
              "  %2 = logsumexp(%n) {dim = [-1]} : f32[2]\n",
              "%0, %1, %2"),
        {x, big, n},
        {ops::logsumexp(x, Shape{1}), ops::logsumexp(big, Shape{0, 1}, true),
         ops::logsumexp(n, Shape{-1})});
}

TEST_CASE("softmax and log_softmax match eager on any dim and dtype", "[lower][reduce]") {
  std::string kir = graph("%x: f32[s0, 11], %h: f16[s0, 11]",
                          "  %0 = softmax(%x) {dim = -1} : f32[s0, 11]\n"
                          "  %1 = log_softmax(%x) {dim = -1} : f32[s0, 11]\n"
                          "  %2 = softmax(%x) {dim = 0} : f32[s0, 11]\n"
                          "  %3 = softmax(%h) {dim = 1} : f16[s0, 11]\n"
                          "  %4 = log_softmax(%h) {dim = 1, dtype = f32} : f32[s0, 11]\n",
                          "%0, %1, %2, %3, %4");
  for (int64_t s0 : {1, 5}) {
    Tensor x = ops::mul(randn({s0, 11}), scalar(20.0)), h = randn({s0, 11}, F16);
    check(kir, {x, h},
          {ops::softmax(x, -1), ops::logSoftmax(x, -1), ops::softmax(x, 0), ops::softmax(h, 1),
           ops::logSoftmax(h, 1, F32)});
  }
  float inf = std::numeric_limits<float>::infinity();
  Tensor y = fromValues({2, 3}, {-inf, 0, 1, 5, -inf, inf});
  check(graph("%y: f32[2, 3]", "  %0 = softmax(%y) {dim = 1} : f32[2, 3]\n", "%0"), {y},
        {ops::softmax(y, 1)});
}

TEST_CASE("views are index maps: reshape, permute, slice, select, expand, squeeze",
          "[lower][views]") {
  std::string kir = graph("%x: f32[s0, 8, 16], %y: f32[6, 35]",
                          "  %0 = reshape(%x) {shape = [s0, 128]} : f32[s0, 128]\n"
                          "  %1 = view(%0) {shape = [s0, 4, 32]} : f32[s0, 4, 32]\n"
                          "  %2 = permute(%1) {dims = [2, 0, 1]} : f32[32, s0, 4]\n"
                          "  %3 = transpose(%x) {dim0 = 1, dim1 = 2} : f32[s0, 16, 8]\n"
                          "  %4 = slice(%x) {dim = 2, end = -1, start = 1, step = 3} : "
                          "f32[s0, 8, 5]\n"
                          "  %5 = select(%x) {dim = 1, index = -1} : f32[s0, 16]\n"
                          "  %6 = unsqueeze(%5) {dim = 1} : f32[s0, 1, 16]\n"
                          "  %7 = expand(%6) {size = [s0, 3, 16]} : f32[s0, 3, 16]\n"
                          "  %8 = squeeze(%6) {dim = [1]} : f32[s0, 16]\n"
                          "  %9 = reshape(%3) {shape = [s0, 128]} : f32[s0, 128]\n"
                          "  %10 = add(%9, %0) : f32[s0, 128]\n"
                          "  %11 = reshape(%y) {shape = [14, 15]} : f32[14, 15]\n"
                          "  %12 = view(%y) {shape = [210]} : f32[210]\n"
                          "  %13 = reshape(%12) {shape = [5, -1]} : f32[5, 42]\n",
                          "%1, %2, %4, %7, %8, %10, %11, %13");
  for (int64_t s0 : {1, 3}) {
    INFO("s0 = " << s0);
    Tensor x = randn({s0, 8, 16}), y = randn({6, 35});
    Tensor flat = x.reshape({s0, 128});
    Tensor row = x.select(1, -1);
    check(kir, {x, y},
          {flat.view({s0, 4, 32}), flat.view({s0, 4, 32}).permute({2, 0, 1}), x.slice(2, 1, -1, 3),
           row.unsqueeze(1).expand({s0, 3, 16}), row.unsqueeze(1).squeeze(Shape{1}),
           ops::add(x.transpose(1, 2).reshape({s0, 128}), flat), y.reshape({14, 15}),
           y.reshape({5, 42})});
  }
}

TEST_CASE("views of a transposed input compose", "[lower][views]") {
  Tensor x = randn({9, 4}).t(); // [4, 9] strided [1, 4]
  check(graph("%x: f32[4, 9] strided [1, 4]",
              "  %0 = slice(%x) {dim = 1, start = 2} : f32[4, 7]\n"
              "  %1 = transpose(%0) {dim0 = 0, dim1 = 1} : f32[7, 4]\n"
              "  %2 = reshape(%1) {shape = [28]} : f32[28]\n"
              "  %3 = neg(%2) : f32[28]\n",
              "%3"),
        {x}, {ops::neg(x.slice(1, 2, std::nullopt).t().reshape({28}))});
}

TEST_CASE("cat promotes and stitches operands", "[lower][views]") {
  std::string kir = graph("%a: f32[s0, 3], %b: f32[s0, 5] strided [1, s0], %c: f16[s0, 2]",
                          "  %0 = cat(%a, %b, %c) {dim = 1} : f32[s0, 10]\n"
                          "  %1 = cat(%a, %a) : f32[s0*2, 3]\n",
                          "%0, %1");
  for (int64_t s0 : {1, 4}) {
    Tensor a = randn({s0, 3}), b = randn({5, s0}).t(), c = randn({s0, 2}, F16);
    std::vector<Tensor> abc{a, b, c}, aa{a, a};
    check(kir, {a, b, c}, {ops::cat(abc, 1), ops::cat(aa, 0)});
  }
}

TEST_CASE("slice_scatter and select_scatter write the source over the base", "[lower][views]") {
  std::string kir =
      graph("%base: f32[s0, 10], %src: f32[s0, 3], %row: f32[10]",
            "  %0 = slice_scatter(%base, %src) {dim = 1, end = 9, start = 2, step = 3}"
            " : f32[s0, 10]\n"
            "  %1 = slice_scatter(%base, %src) {dim = 1, start = -3} : f32[s0, 10]\n"
            "  %2 = select_scatter(%base, %row) {dim = 0, index = -1} : "
            "f32[s0, 10]\n",
            "%0, %1, %2");
  for (int64_t s0 : {1, 4}) {
    Tensor base = randn({s0, 10}), src = randn({s0, 3}), row = randn({10});
    Tensor a = base.clone(), b = base.clone(), c = base.clone();
    a.slice(1, 2, 9, 3).copy_(src);
    b.slice(1, -3, std::nullopt).copy_(src);
    c.select(0, -1).copy_(row);
    check(kir, {base, src, row}, {a, b, c});
  }
}

TEST_CASE("layer_norm is Welford, rstd and an affine pointwise", "[lower][nn]") {
  std::string kir = graph("%x: f32[s0, 3, 16], %w: f32[16], %b: f32[16], %h: f16[s0, 16], "
                          "%hw: f16[16], %hb: f16[16]",
                          "  %0 = layer_norm(%x, %w, %b) {normalized_shape = [16]} : "
                          "f32[s0, 3, 16]\n"
                          "  %1 = layer_norm(%x) {eps = 0.001, normalized_shape = [3, 16]} : "
                          "f32[s0, 3, 16]\n"
                          "  %2 = layer_norm(%h, %hw, %hb) {normalized_shape = [16]} : "
                          "f16[s0, 16]\n",
                          "%0, %1, %2");
  for (int64_t s0 : {1, 5}) {
    Tensor x = ops::add(randn({s0, 3, 16}), scalar(3.0)), w = randn({16}), b = randn({16});
    Tensor h = randn({s0, 16}, F16), hw = randn({16}, F16), hb = randn({16}, F16);
    check(kir, {x, w, b, h, hw, hb},
          {ops::layerNorm(x, Shape{16}, w, b, 1e-5),
           ops::layerNorm(x, Shape{3, 16}, Tensor(), Tensor(), 1e-3),
           ops::layerNorm(h, Shape{16}, hw, hb, 1e-5)},
          1e-4);
  }
}

TEST_CASE("matmul is an extern; a transposed operand is passed with a flag", "[lower][nn]") {
  std::string kir = graph("%a: f32[s0, 6], %b: f32[6, 4], %w: f32[4, 6], %c: f32[2, s0, 6], "
                          "%v: f32[6], %at: f32[s0, 6] strided [1, s0]",
                          "  %0 = matmul(%a, %b) : f32[s0, 4]\n"
                          "  %t = transpose(%w) {dim0 = 0, dim1 = 1} : f32[6, 4]\n"
                          "  %1 = matmul(%a, %t) : f32[s0, 4]\n"
                          "  %2 = matmul(%c, %b) : f32[2, s0, 4]\n"
                          "  %3 = matmul(%v, %b) : f32[4]\n"
                          "  %4 = matmul(%at, %t) : f32[s0, 4]\n"
                          "  %s = slice(%a) {dim = 1, start = 2} : f32[s0, 4]\n"
                          "  %5 = matmul(%s, %w) : f32[s0, 6]\n",
                          "%0, %1, %2, %3, %4, %5");
  LoopProgram p = lower(kir);
  CHECK(p.str().find("extern \"matmul\"(buf0, buf2) {transpose_b = true}") != std::string::npos);
  for (int64_t s0 : {1, 5}) {
    Tensor a = randn({s0, 6}), b = randn({6, 4}), w = randn({4, 6}), c = randn({2, s0, 6});
    Tensor v = randn({6}), at = randn({6, s0}).t();
    check(kir, {a, b, w, c, v, at},
          {ops::matmul(a, b), ops::matmul(a, w.t()), ops::matmul(c, b), ops::matmul(v, b),
           ops::matmul(at, w.t()), ops::matmul(a.slice(1, 2, std::nullopt), w)},
          1e-4);
  }
}

TEST_CASE("linear and conv2d: the bias is a pointwise epilogue", "[lower][nn]") {
  std::string kir = graph("%x: f32[2, s0, 6], %w: f32[5, 6], %b: f32[5], %img: f32[2, 3, 9, 9], "
                          "%k: f32[4, 3, 3, 3], %kb: f32[4]",
                          "  %0 = linear(%x, %w, %b) : f32[2, s0, 5]\n"
                          "  %1 = linear(%x, %w) : f32[2, s0, 5]\n"
                          "  %2 = conv2d(%img, %k, %kb) {padding = [1], stride = [2]} : "
                          "f32[2, 4, 5, 5]\n",
                          "%0, %1, %2");
  ops::ConvOptions o;
  o.stride = {2};
  o.padding = {1};
  for (int64_t s0 : {1, 3}) {
    Tensor x = randn({2, s0, 6}), w = randn({5, 6}), b = randn({5});
    Tensor img = randn({2, 3, 9, 9}), k = randn({4, 3, 3, 3}), kb = randn({4});
    check(
        kir, {x, w, b, img, k, kb},
        {ops::linear(x, w, b), ops::linear(x, w, std::nullopt), ops::convolution(2, img, k, kb, o)},
        1e-4);
  }
}

TEST_CASE("scaled_dot_product_attention is an extern", "[lower][nn]") {
  std::string kir = graph("%q: f32[2, 3, 5, 8], %k: f32[2, 3, 7, 8], %v: f32[2, 3, 7, 4], "
                          "%m: b8[5, 7]",
                          "  %0 = scaled_dot_product_attention(%q, %k, %v) : f32[2, 3, 5, 4]\n"
                          "  %1 = scaled_dot_product_attention(%q, %k, %v) {is_causal = true, "
                          "scale = 0.5} : f32[2, 3, 5, 4]\n"
                          "  %2 = scaled_dot_product_attention(%q, %k, %v, %m) : f32[2, 3, 5, 4]\n",
                          "%0, %1, %2");
  Tensor q = randn({2, 3, 5, 8}), k = randn({2, 3, 7, 8}), v = randn({2, 3, 7, 4});
  Tensor m = ops::gt(randn({5, 7}), scalar(-0.5));
  check(kir, {q, k, v, m},
        {ops::scaledDotProductAttention(q, k, v, Tensor(), 0, false, std::nullopt, false),
         ops::scaledDotProductAttention(q, k, v, Tensor(), 0, true, 0.5, false),
         ops::scaledDotProductAttention(q, k, v, m, 0, false, std::nullopt, false)},
        1e-4);
}

TEST_CASE("embedding, gather and index_select are indirect loads", "[lower][gather]") {
  std::string kir =
      graph("%idx: i64[s0, 3], %table: f32[10, 4], %x: f32[s0, 6], %gi: i32[s0, 2], %si: i64[5]",
            "  %0 = exp(%table) : f32[10, 4]\n"
            "  %1 = embedding(%idx, %0) : f32[s0, 3, 4]\n"
            "  %2 = gather(%x, %gi) {dim = 1} : f32[s0, 2]\n"
            "  %3 = index_select(%x, %si) {dim = 1} : f32[s0, 5]\n"
            "  %4 = add(%3, %3) : f32[s0, 5]\n",
            "%1, %2, %4");
  for (int64_t s0 : {1, 4}) {
    Tensor idx = randint(0, 10, {s0, 3}, I64), table = randn({10, 4}), x = randn({s0, 6});
    Tensor gi = randint(0, 6, {s0, 2}, DType::Int32), si = randint(0, 6, {5}, I64);
    Tensor picked = ops::indexSelect(x, 1, si);
    check(kir, {idx, table, x, gi, si},
          {ops::embedding(idx, ops::exp(table)), ops::gather(x, 1, gi), ops::add(picked, picked)},
          1e-6);
  }
  // A position outside the gathered dim is an IndexError, as eager raises, never a stray read.
  LoopProgram p = lower(kir);
  Tensor badIdx = ops::add(randint(0, 10, {2, 3}, I64), Tensor::wrapScalar(Scalar(int64_t{10})));
  std::vector<Tensor> in = {badIdx, randn({10, 4}), randn({2, 6}),
                            randint(0, 6, {2, 2}, DType::Int32), randint(0, 6, {5}, I64)};
  try {
    run(p, in);
    FAIL("an out-of-range index was read");
  } catch (const Error &e) {
    CHECK(e.kind() == ErrorKind::Index);
    CHECK_THAT(e.what(), Catch::Matchers::Contains("for a dimension with size 10"));
  }
}

TEST_CASE("advanced indexing by one tensor reads views in place", "[lower][gather]") {
  // x[1:, ::2][:, idx] over a transposed input, x.t()[idx] and a reshaped (realized) source.
  std::string kir = graph("%x: f32[s0, 9], %idx: i64[2, 3]",
                          "  %0 = slice(%x) {start = 1} : f32[s0 - 1, 9] strided [9, 1]\n"
                          "  %1 = slice(%0) {dim = 1, step = 2} : f32[s0 - 1, 5] strided [9, 2]\n"
                          "  %2 = index(%1, %idx) {dim = 1} : f32[s0 - 1, 2, 3]\n"
                          "  %3 = transpose(%x) {dim0 = 0, dim1 = 1} : f32[9, s0] strided [1, 9]\n"
                          "  %4 = index(%3, %idx) {dim = 0} : f32[2, 3, s0]\n"
                          "  %5 = reshape(%x) {shape = [3, s0 * 3]} : f32[3, s0 * 3]\n"
                          "  %6 = index(%5, %idx) {dim = 0} : f32[2, 3, s0 * 3]\n",
                          "%2, %4, %6");
  for (int64_t s0 : {3, 6}) {
    Tensor x = randn({s0, 9});
    Tensor idx = ops::sub(randint(0, 6, {2, 3}, I64), Tensor::wrapScalar(Scalar(int64_t{3})));
    Tensor sliced = x.slice(0, 1, std::nullopt, 1).slice(1, std::nullopt, std::nullopt, 2);
    Tensor none, t = x.t(), r = x.reshape({3, s0 * 3});
    std::vector<Tensor> at1 = {none, idx}, at0 = {idx};
    check(kir, {x, idx}, {ops::index(sliced, at1), ops::index(t, at0), ops::index(r, at0)}, 0);
  }
}

TEST_CASE("outputs that are inputs, views or repeated get their own buffer", "[lower]") {
  std::string kir = graph("%x: f32[4, 6]",
                          "  %0 = transpose(%x) {dim0 = 0, dim1 = 1} : f32[6, 4] strided [1, 6]\n"
                          "  %1 = exp(%x) : f32[4, 6]\n",
                          "%x, %0, %1, %1");
  LoopProgram p = lower(kir);
  REQUIRE(p.outputs().size() == 4);
  // The transpose keeps its dense transposed layout; each output is a distinct buffer.
  CHECK(p.buffer(p.outputs()[1]).meta.strides == std::vector<ir::SymInt>{1, 6});
  CHECK(p.outputs()[2] != p.outputs()[3]);
  Tensor x = randn({4, 6});
  check(kir, {x}, {x, x.t(), ops::exp(x), ops::exp(x)});
}

TEST_CASE("a lowering declines with the node and the reason", "[lower][errors]") {
  auto declined = [](const std::string &kir) -> std::string {
    try {
      lower(kir);
    } catch (const ir::DiagnosticError &e) {
      CHECK(e.diagnostic().node != nullptr);
      return e.diagnostic().message;
    }
    FAIL("the lowering did not decline");
    return "";
  };
  CHECK(declined(graph("%x: f32[4]",
                       "  %0 = call(%x) {args = \"($0)\", target = \"torch.foo\"} : f32[4]\n",
                       "%0")) ==
        "%0 = call: cannot lower: 'call' runs an opaque Python callable, which compiled code "
        "cannot contain");
  CHECK(declined(graph("%x: f32[4], %y: f32[4]", "  %0 = copy_(%x, %y) : f32[4]\n", "%0"))
            .find("must be functionalized") != std::string::npos);
  // Python's ints raise on a zero divisor: their run-time quotients stay folded-only (a
  // product of run-time ints, index arithmetic, computes in int64).
  CHECK(declined(graph("%a: int", "  %0 = floor_divide(%a, %a) : int\n", "%0"))
            .find("known at compile time") != std::string::npos);
  CHECK(declined(graph("%x: b8[4]", "  %0 = abs(%x) : b8[4]\n", "%0")).find("bool operands") !=
        std::string::npos);
  CHECK(declined(graph("%x: f32[4]", "  %0 = gelu(%x) {approximate = \"fast\"} : f32[4]\n", "%0"))
            .find("approximate") != std::string::npos);
  CHECK(passes::lower::hasLowering(ir::OpKind::Softmax));
  CHECK_FALSE(passes::lower::hasLowering(ir::OpKind::Call));
}

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/meta.h"
#include "autograd/ops.h"
#include "runtime/error.h"
#include "runtime/ops/factory.h"

#include <kiln_catch.h>

#include <vector>

using namespace kiln;
namespace ag = kiln::autograd;

namespace {
Tensor leaf(std::vector<double> values) {
  Tensor t = Tensor::empty({static_cast<int64_t>(values.size())}, DType::Float64);
  for (size_t i = 0; i < values.size(); ++i)
    t.data<double>()[i] = values[i];
  t.setRequiresGrad(true);
  return t;
}
double at(const Tensor &t, int64_t i) { return t.contiguous().data<double>()[i]; }
Tensor gradOf(const Tensor &t) { return ag::metaOrNull(t) ? ag::metaOrNull(t)->grad : Tensor(); }
} // namespace

TEST_CASE("backward accumulates the product rule into the leaves", "[autograd]") {
  Tensor x = leaf({1, 2, 3}), w = leaf({4, 5, 6});
  Tensor loss = ag::ops::sum(ag::ops::mul(ag::ops::mul(x, w), x));
  REQUIRE(loss.requiresGrad());
  REQUIRE(ag::gradFn(loss)->name() == "SumBackward1");
  std::vector<Tensor> roots{loss};
  ag::backward(roots, {}, false, false);
  // d/dx (x^2 w) = 2 x w, d/dw = x^2
  CHECK(at(gradOf(x), 2) == 36);
  CHECK(at(gradOf(w), 1) == 4);
  // A second backward through the released graph raises.
  CHECK_THROWS_WITH(ag::backward(roots, {}, false, false),
                    Catch::Matchers::Contains("backward through the graph a second time"));
}

TEST_CASE("grad mode off records nothing", "[autograd]") {
  Tensor x = leaf({1, 2});
  ag::GradModeGuard off(false);
  Tensor y = ag::ops::exp(x);
  CHECK_FALSE(y.requiresGrad());
  CHECK(ag::gradFn(y) == nullptr);
}

TEST_CASE("a saved tensor written in place fails the version check", "[autograd]") {
  Tensor x = leaf({0.5, 1.0});
  Tensor y = ag::ops::sigmoid(x);
  Tensor loss = ag::ops::sum(y);
  {
    ag::GradModeGuard off(false);
    y.fill_(Scalar(2.0));
    y.bumpVersion();
  }
  std::vector<Tensor> roots{loss};
  CHECK_THROWS_WITH(ag::backward(roots, {}, false, false),
                    Catch::Matchers::Contains("modified by an inplace operation"));
}

TEST_CASE("create_graph records the backward: a second derivative", "[autograd]") {
  Tensor x = leaf({0.3, -1.2});
  Tensor y = ag::ops::sum(ag::ops::mul(ag::ops::tanh(x), x)); // d2/dx2 (x tanh x)
  std::vector<Tensor> outs{y}, ins{x};
  std::vector<Tensor> g = ag::grad(outs, {}, ins, true, true, false);
  REQUIRE(g[0].requiresGrad());
  std::vector<Tensor> outs2{ag::ops::sum(g[0])};
  std::vector<Tensor> gg = ag::grad(outs2, {}, ins, false, false, false);
  for (int64_t i = 0; i < 2; ++i) {
    double v = at(x, i), t = std::tanh(v), s = 1 - t * t; // sech^2
    CHECK(at(gg[0], i) == Approx(2 * s - 2 * v * t * s).epsilon(1e-12));
  }
}

TEST_CASE("broadcast gradients are reduced to the operand's shape", "[autograd]") {
  Tensor a = leaf({1, 2, 3});                   // [3]
  Tensor b = ops::ones({2, 3}, DType::Float64); // [2, 3]
  b.setRequiresGrad(true);
  Tensor loss = ag::ops::sum(ag::ops::add(a, b));
  std::vector<Tensor> roots{loss};
  ag::backward(roots, {}, false, false);
  REQUIRE(gradOf(a).sizes() == Shape{3});
  CHECK(at(gradOf(a), 0) == 2);
  CHECK(gradOf(b).sizes() == Shape{2, 3});
}

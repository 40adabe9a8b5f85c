// Every op of the table (ir/ops.def) has decided how gradients cross it: a derivative rule
// (autograd/derivatives.h, on graph nodes through passes/autodiff/node_vjp), no gradient
// (NoGradient, Comparison or Integral in the table), or a listed gap below.
#include "passes/autodiff/node_vjp.h"

#include <catch2/catch.hpp>

#include <set>
#include <string>

using kiln::passes::autodiff::Differentiability;
using kiln::passes::autodiff::differentiability;

namespace {

/// Ops without a compiled derivative: a part where one reads a value that requires grad trains
/// on eager kernels, whose autograd has every rule (the reason is in kiln.explain). Adding an op
/// to the table means giving it a rule, marking it NoGradient, or listing it here.
const std::set<std::string> kMissing = {
    // structural: graph outputs, opaque calls, in-place writes (functionalized before autodiff),
    // shape assertions, and a backward op's own extern
    "return",
    "call",
    "copy_",
    "index_put",
    "select_scatter",
    "slice_scatter",
    "sym_constrain_range",
    "max_pool2d_backward",
    "cumprod_backward",
    "convolution_weight_grad"};

} // namespace

TEST_CASE("every op kind has a derivative rule, no gradient, or is a listed gap") {
  std::set<std::string> missing;
  for (int k = 0; k < kiln::ir::kNumOpKinds; ++k) {
    auto op = static_cast<kiln::ir::OpKind>(k);
    if (differentiability(op) == Differentiability::Missing)
      missing.insert(std::string(kiln::ir::opKeyword(op)));
  }
  std::string text;
  for (const std::string &m : missing)
    text += "\"" + m + "\", ";
  INFO("ops without a compiled derivative: " << text);
  CHECK(missing == kMissing);
}

TEST_CASE("the table's no-gradient ops are constants to autodiff") {
  using kiln::ir::OpKind;
  for (OpKind op : {OpKind::Argmax, OpKind::Rand, OpKind::Bernoulli, OpKind::SymSize, OpKind::All,
                    OpKind::Isnan, OpKind::LogicalAnd, OpKind::Full})
    CHECK(differentiability(op) == Differentiability::Constant);
  for (OpKind op : {OpKind::Add, OpKind::Matmul, OpKind::Softmax, OpKind::Conv2d, OpKind::Gather})
    CHECK(differentiability(op) == Differentiability::Rule);
}

#pragma once
/// GraphRuleBuilder: the builder the derivative rules (autograd/derivatives.h) run against when
/// compiled training builds a backward graph.
///
/// Each call adds one graph-IR node through an ir::GraphBuilder (typed by the op's shape rule at
/// once), so a rule written once for eager autograd adds the nodes of its vector-Jacobian
/// product here. Values are graph values; sizes are concrete (a rule reads them as numbers:
/// counts, reshape targets), so a value with a symbolic size makes `sizes` throw Unsupported.

#include "ir/graph_builder.h"
#include "runtime/dtype.h"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln::passes::autodiff {

/// A graph the joint-graph builder cannot differentiate (an op without a compiled derivative, a
/// symbolic size): the caller runs that part on the eager kernels, which record autograd.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class GraphRuleBuilder {
public:
  using Value = ir::Value *;
  using Sizes = std::vector<int64_t>;
  using DimList = std::optional<Sizes>;

  GraphRuleBuilder(ir::GraphBuilder &graph, ir::SourceLoc loc) : g_(graph), loc_(std::move(loc)) {}

  static Sizes sizes(Value v);
  static DType dtype(Value v);

  Value add(Value a, Value b) { return op(ir::OpKind::Add, {a, b}); }
  Value sub(Value a, Value b) { return op(ir::OpKind::Sub, {a, b}); }
  Value mul(Value a, Value b) { return op(ir::OpKind::Mul, {a, b}); }
  Value div(Value a, Value b) { return op(ir::OpKind::Div, {a, b}); }
  Value neg(Value a) { return op(ir::OpKind::Neg, {a}); }
  Value exp(Value a) { return op(ir::OpKind::Exp, {a}); }
  Value log(Value a) { return op(ir::OpKind::Log, {a}); }
  Value sqrt(Value a) { return op(ir::OpKind::Sqrt, {a}); }
  Value tanh(Value a) { return op(ir::OpKind::Tanh, {a}); }
  Value sigmoid(Value a) { return op(ir::OpKind::Sigmoid, {a}); }
  Value sin(Value a) { return op(ir::OpKind::Sin, {a}); }
  Value cos(Value a) { return op(ir::OpKind::Cos, {a}); }
  Value sinh(Value a) { return op(ir::OpKind::Sinh, {a}); }
  Value cosh(Value a) { return op(ir::OpKind::Cosh, {a}); }
  Value abs(Value a) { return op(ir::OpKind::Abs, {a}); }
  Value softplus(Value a) { return op(ir::OpKind::Softplus, {a}); }
  Value sign(Value a) { return op(ir::OpKind::Sign, {a}); }
  Value erf(Value a) { return op(ir::OpKind::Erf, {a}); }
  Value softmax(Value a, int64_t dim) { return op(ir::OpKind::Softmax, {a}, {{"dim", dim}}); }

  Value scale(Value a, double s) { return s == 1.0 ? a : op(ir::OpKind::Mul, {a, number(s)}); }
  Value addScalar(Value a, double s) { return op(ir::OpKind::Add, {a, number(s)}); }
  Value powScalar(Value a, double s) { return op(ir::OpKind::Pow, {a, number(s)}); }
  Value rsubScalar(Value a, double s) { return op(ir::OpKind::Sub, {number(s), a}); }
  Value powT(Value a, Value b) { return op(ir::OpKind::Pow, {a, b}); }

  Value gtScalar(Value a, double s) { return op(ir::OpKind::Gt, {a, number(s)}); }
  Value ltScalar(Value a, double s) { return op(ir::OpKind::Lt, {a, number(s)}); }
  Value geScalar(Value a, double s) { return op(ir::OpKind::Ge, {a, number(s)}); }
  Value leScalar(Value a, double s) { return op(ir::OpKind::Le, {a, number(s)}); }
  Value eqScalar(Value a, double s) { return op(ir::OpKind::Eq, {a, number(s)}); }
  Value eq(Value a, Value b) { return op(ir::OpKind::Eq, {a, b}); }
  Value gt(Value a, Value b) { return op(ir::OpKind::Gt, {a, b}); }
  Value ge(Value a, Value b) { return op(ir::OpKind::Ge, {a, b}); }
  Value le(Value a, Value b) { return op(ir::OpKind::Le, {a, b}); }
  Value isnan(Value a) { return op(ir::OpKind::Isnan, {a}); }
  Value isfinite(Value a) { return op(ir::OpKind::Isfinite, {a}); }
  Value floor(Value a) { return op(ir::OpKind::Floor, {a}); }
  Value trunc(Value a) { return op(ir::OpKind::Trunc, {a}); }
  Value logicalNot(Value a) { return op(ir::OpKind::LogicalNot, {a}); }
  Value logicalOr(Value a, Value b) { return op(ir::OpKind::LogicalOr, {a, b}); }
  Value logicalAnd(Value a, Value b) { return op(ir::OpKind::LogicalAnd, {a, b}); }
  Value where(Value cond, Value a, Value b) { return op(ir::OpKind::Where, {cond, a, b}); }
  /// cond ? 0 : a.
  Value zeroWhere(Value a, Value cond) {
    return op(ir::OpKind::MaskedFill, {a, cond, number(0.0)});
  }
  /// Compiled graphs are differentiated once: the link a second derivative needs is not kept.
  Value connect(Value value, Value) { return value; }
  Value cast(Value a, DType dtype);
  Value zeros(const Sizes &sizes, DType dtype);

  Value sum(Value a, const DimList &dims, bool keepdim);
  Value cumsum(Value a, int64_t dim) { return op(ir::OpKind::Cumsum, {a}, {{"dim", dim}}); }
  Value cumprod(Value a, int64_t dim) { return op(ir::OpKind::Cumprod, {a}, {{"dim", dim}}); }
  Value logcumsumexp(Value a, int64_t dim) {
    return op(ir::OpKind::Logcumsumexp, {a}, {{"dim", dim}});
  }
  Value reduceTo(Value g, const Sizes &sizes, DType dtype);
  Value unsqueezeReduced(Value g, const DimList &dims, int64_t rank);
  Value expand(Value a, const Sizes &sizes);
  Value reshape(Value a, const Sizes &sizes);
  Value transpose(Value a, int64_t d0, int64_t d1) {
    return op(ir::OpKind::Transpose, {a}, {{"dim0", d0}, {"dim1", d1}});
  }
  Value permute(Value a, const Sizes &dims) {
    return op(ir::OpKind::Permute, {a}, {{"dims", dims}});
  }
  Value unsqueeze(Value a, int64_t dim) { return op(ir::OpKind::Unsqueeze, {a}, {{"dim", dim}}); }
  Value squeezeDim(Value a, int64_t dim) {
    return op(ir::OpKind::Squeeze, {a}, {{"dim", Sizes{dim}}});
  }
  Value tril(Value a, int64_t diagonal) {
    return op(ir::OpKind::Tril, {a}, {{"diagonal", diagonal}});
  }
  Value triu(Value a, int64_t diagonal) {
    return op(ir::OpKind::Triu, {a}, {{"diagonal", diagonal}});
  }
  Value flip(Value a, const Sizes &dims) { return op(ir::OpKind::Flip, {a}, {{"dims", dims}}); }
  Value roll(Value a, const Sizes &shifts, const Sizes &dims) {
    return op(ir::OpKind::Roll, {a}, {{"shifts", shifts}, {"dims", dims}});
  }
  Value matmul(Value a, Value b) { return op(ir::OpKind::Matmul, {a, b}); }
  Value linalgSolve(Value a, Value b) { return op(ir::OpKind::LinalgSolve, {a, b}); }
  Value linalgSolveTriangular(Value a, Value b, bool upper, bool unit) {
    return op(ir::OpKind::LinalgSolveTriangular, {a, b},
              {{"upper", upper}, {"unitriangular", unit}});
  }
  Value cat(const std::vector<Value> &parts, int64_t dim) {
    return op(ir::OpKind::Cat, parts, {{"dim", dim}});
  }
  Value padConstant(Value a, const Sizes &widths) {
    return op(ir::OpKind::Pad, {a}, {{"pad", widths}, {"value", 0.0}});
  }
  /// g placed into zeros of `sizes` at [start:end:step] of dim.
  Value sliceBackward(Value g, const Sizes &sizes, int64_t dim, int64_t start, int64_t end,
                      int64_t step);
  Value slice(Value a, int64_t dim, int64_t start, int64_t end, int64_t step);
  Value select(Value a, int64_t dim, int64_t index);
  Value scatterAdd(const Sizes &sizes, int64_t dim, Value index, Value src);
  Value indexAdd(const Sizes &sizes, int64_t dim, Value index, Value src);
  Value gather(Value a, int64_t dim, Value index) {
    return op(ir::OpKind::Gather, {a, index}, {{"dim", dim}});
  }
  Value scatter(Value a, int64_t dim, Value index, Value src) {
    return op(ir::OpKind::Scatter, {a, index, src}, {{"dim", dim}});
  }
  Value indexSelect(Value a, int64_t dim, Value index) {
    return op(ir::OpKind::IndexSelect, {a, index}, {{"dim", dim}});
  }

  /// A node of any op (the node rules use it for ops the rules do not name).
  Value op(ir::OpKind kind, std::vector<Value> operands, ir::Attributes attrs = {});
  /// A Python number as a graph scalar.
  Value number(double v);
  Value integer(int64_t v);

private:
  ir::GraphBuilder &g_;
  ir::SourceLoc loc_;
};

} // namespace kiln::passes::autodiff

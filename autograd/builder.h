#pragma once
/// EagerBuilder: the builder the derivative rules (derivatives_*.h) run against in eager mode.
///
/// A rule is written once, define-by-run, over a builder `b` (`b.mul(g, b.sub(1, b.mul(y, y)))`):
/// run on this builder it computes with the differentiable ops, so a backward run with grad mode
/// on (create_graph) is itself recorded; the graph builder of compiled training adds graph nodes
/// for the same calls. Values are tensors; sizes are concrete.

#include "runtime/dtype.h"
#include "runtime/ops/reduce.h"
#include "runtime/scalar.h"
#include "runtime/tensor.h"

#include <optional>
#include <vector>

namespace kiln::autograd {

using kiln::ops::DimList;

struct EagerBuilder {
  using Value = Tensor;
  using Sizes = Shape;

  static Sizes sizes(const Tensor &v) { return v.sizes(); }
  static DType dtype(const Tensor &v) { return v.dtype(); }

  Tensor add(const Tensor &a, const Tensor &b);
  Tensor sub(const Tensor &a, const Tensor &b);
  Tensor mul(const Tensor &a, const Tensor &b);
  Tensor div(const Tensor &a, const Tensor &b);
  Tensor neg(const Tensor &a);
  Tensor exp(const Tensor &a);
  Tensor log(const Tensor &a);
  Tensor sqrt(const Tensor &a);
  Tensor tanh(const Tensor &a);
  Tensor sigmoid(const Tensor &a);
  Tensor sin(const Tensor &a);
  Tensor sinh(const Tensor &a);
  Tensor cosh(const Tensor &a);
  Tensor abs(const Tensor &a);
  Tensor softplus(const Tensor &a);
  Tensor cos(const Tensor &a);
  Tensor sign(const Tensor &a);
  Tensor erf(const Tensor &a);
  Tensor softmax(const Tensor &a, int64_t dim);
  /// a * s, a + s, a ** s, s - a for a number s.
  Tensor scale(const Tensor &a, double s);
  Tensor addScalar(const Tensor &a, double s);
  Tensor powScalar(const Tensor &a, double s);
  Tensor rsubScalar(const Tensor &a, double s);
  /// Comparisons give bool masks.
  Tensor gtScalar(const Tensor &a, double s);
  Tensor ltScalar(const Tensor &a, double s);
  Tensor geScalar(const Tensor &a, double s);
  Tensor leScalar(const Tensor &a, double s);
  Tensor eq(const Tensor &a, const Tensor &b);
  Tensor eqScalar(const Tensor &a, double s);
  Tensor gt(const Tensor &a, const Tensor &b);
  Tensor ge(const Tensor &a, const Tensor &b);
  Tensor le(const Tensor &a, const Tensor &b);
  Tensor isnan(const Tensor &a);
  Tensor isfinite(const Tensor &a);
  Tensor floor(const Tensor &a);
  Tensor trunc(const Tensor &a);
  Tensor logicalNot(const Tensor &a);
  Tensor logicalOr(const Tensor &a, const Tensor &b);
  /// a ** b for tensors.
  Tensor powT(const Tensor &a, const Tensor &b);
  Tensor logicalAnd(const Tensor &a, const Tensor &b);
  Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b);
  /// cond ? 0 : a.
  Tensor zeroWhere(const Tensor &a, const Tensor &cond);
  /// `value`, recorded as also reading `source` with a zero derivative: a piecewise-linear
  /// rule's gradient (relu's mask of its input) depends on the input as torch's backward ops
  /// do, so a second derivative reaches it as zeros instead of leaving it unused.
  Tensor connect(const Tensor &value, const Tensor &source);
  Tensor cast(const Tensor &a, DType dtype);
  Tensor zeros(const Sizes &sizes, DType dtype);

  Tensor sum(const Tensor &a, const DimList &dims, bool keepdim);
  Tensor cumsum(const Tensor &a, int64_t dim);
  Tensor cumprod(const Tensor &a, int64_t dim);
  Tensor logcumsumexp(const Tensor &a, int64_t dim);
  /// The gradient of a broadcast: g summed over the dims its operand was broadcast along, viewed
  /// as `sizes` and cast to `dtype`.
  Tensor reduceTo(const Tensor &g, const Sizes &sizes, DType dtype);
  /// A reduction's gradient back over the reduced dims (`dims` of an input of `rank`, not kept).
  Tensor unsqueezeReduced(const Tensor &g, const DimList &dims, int64_t rank);
  Tensor expand(const Tensor &a, const Sizes &sizes);
  Tensor reshape(const Tensor &a, const Sizes &sizes);
  Tensor transpose(const Tensor &a, int64_t d0, int64_t d1);
  Tensor permute(const Tensor &a, const Shape &dims);
  Tensor unsqueeze(const Tensor &a, int64_t dim);
  Tensor squeezeDim(const Tensor &a, int64_t dim);
  Tensor tril(const Tensor &a, int64_t diagonal);
  Tensor flip(const Tensor &a, const Shape &dims);
  Tensor roll(const Tensor &a, const Shape &shifts, const Shape &dims);
  Tensor triu(const Tensor &a, int64_t diagonal);
  Tensor matmul(const Tensor &a, const Tensor &b);
  Tensor linalgSolve(const Tensor &a, const Tensor &b);
  Tensor linalgSolveTriangular(const Tensor &a, const Tensor &b, bool upper, bool unit);
  Tensor cat(const std::vector<Tensor> &parts, int64_t dim);
  /// Constant (zero) padding by torch's widths, negative ones cropping.
  Tensor padConstant(const Tensor &a, const Shape &widths);
  /// The gradient of a slice: g placed into zeros of `sizes` at [start:end:step] of dim.
  Tensor sliceBackward(const Tensor &g, const Sizes &sizes, int64_t dim, int64_t start, int64_t end,
                       int64_t step);
  Tensor slice(const Tensor &a, int64_t dim, int64_t start, int64_t end, int64_t step);
  Tensor select(const Tensor &a, int64_t dim, int64_t index);
  /// Scatter-adds of index gradients, recorded (their derivative is the gather again).
  Tensor indexPutAccumulate(const Sizes &sizes, DType dtype, const std::vector<Tensor> &indices,
                            const Tensor &values);
  Tensor scatterAdd(const Sizes &sizes, int64_t dim, const Tensor &index, const Tensor &src);
  Tensor indexAdd(const Sizes &sizes, int64_t dim, const Tensor &index, const Tensor &src);
  Tensor gather(const Tensor &a, int64_t dim, const Tensor &index);
  Tensor scatter(const Tensor &a, int64_t dim, const Tensor &index, const Tensor &src);
  Tensor indexSelect(const Tensor &a, int64_t dim, const Tensor &index);
};

} // namespace kiln::autograd

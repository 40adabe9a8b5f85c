#include "autograd/builder.h"

#include "autograd/derivatives.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/ops/compare.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/unary_math.h"

namespace kiln::autograd {
Tensor EagerBuilder::add(const Tensor &a, const Tensor &b) { return ops::add(a, b); }
Tensor EagerBuilder::sub(const Tensor &a, const Tensor &b) { return ops::sub(a, b); }
Tensor EagerBuilder::mul(const Tensor &a, const Tensor &b) { return ops::mul(a, b); }
Tensor EagerBuilder::div(const Tensor &a, const Tensor &b) { return ops::div(a, b); }
Tensor EagerBuilder::neg(const Tensor &a) { return ops::neg(a); }
Tensor EagerBuilder::exp(const Tensor &a) { return ops::exp(a); }
Tensor EagerBuilder::log(const Tensor &a) { return ops::log(a); }
Tensor EagerBuilder::sqrt(const Tensor &a) { return ops::sqrt(a); }
Tensor EagerBuilder::tanh(const Tensor &a) { return ops::tanh(a); }
Tensor EagerBuilder::sigmoid(const Tensor &a) { return ops::sigmoid(a); }
Tensor EagerBuilder::sin(const Tensor &a) { return ops::sin(a); }
Tensor EagerBuilder::cos(const Tensor &a) { return ops::cos(a); }
Tensor EagerBuilder::sinh(const Tensor &a) { return ops::sinh(a); }
Tensor EagerBuilder::cosh(const Tensor &a) { return ops::cosh(a); }
Tensor EagerBuilder::abs(const Tensor &a) { return ops::abs(a); }
Tensor EagerBuilder::softplus(const Tensor &a) { return ops::softplus(a); }
Tensor EagerBuilder::sign(const Tensor &a) { return kiln::ops::sign(a); }
Tensor EagerBuilder::erf(const Tensor &a) { return ops::erf(a); }
Tensor EagerBuilder::softmax(const Tensor &a, int64_t dim) { return ops::softmax(a, dim); }

Tensor EagerBuilder::scale(const Tensor &a, double s) { return ops::mul(a, number(s)); }
Tensor EagerBuilder::addScalar(const Tensor &a, double s) { return ops::add(a, number(s)); }
Tensor EagerBuilder::powScalar(const Tensor &a, double s) { return ops::pow(a, number(s)); }
Tensor EagerBuilder::rsubScalar(const Tensor &a, double s) { return ops::sub(number(s), a); }
Tensor EagerBuilder::powT(const Tensor &a, const Tensor &b) { return ops::pow(a, b); }

Tensor EagerBuilder::gtScalar(const Tensor &a, double s) { return kiln::ops::gt(a, number(s)); }
Tensor EagerBuilder::ltScalar(const Tensor &a, double s) { return kiln::ops::lt(a, number(s)); }
Tensor EagerBuilder::geScalar(const Tensor &a, double s) { return kiln::ops::ge(a, number(s)); }
Tensor EagerBuilder::leScalar(const Tensor &a, double s) { return kiln::ops::le(a, number(s)); }
Tensor EagerBuilder::eqScalar(const Tensor &a, double s) { return kiln::ops::eq(a, number(s)); }
Tensor EagerBuilder::eq(const Tensor &a, const Tensor &b) { return kiln::ops::eq(a, b); }
Tensor EagerBuilder::gt(const Tensor &a, const Tensor &b) { return kiln::ops::gt(a, b); }
Tensor EagerBuilder::ge(const Tensor &a, const Tensor &b) { return kiln::ops::ge(a, b); }
Tensor EagerBuilder::le(const Tensor &a, const Tensor &b) { return kiln::ops::le(a, b); }
Tensor EagerBuilder::isnan(const Tensor &a) { return kiln::ops::isnan(a); }
Tensor EagerBuilder::isfinite(const Tensor &a) { return kiln::ops::isfinite(a); }
// Piecewise constant: what a rule reads through them carries no gradient.
Tensor EagerBuilder::floor(const Tensor &a) { return kiln::ops::floor(a); }
Tensor EagerBuilder::trunc(const Tensor &a) { return kiln::ops::trunc(a); }
Tensor EagerBuilder::logicalAnd(const Tensor &a, const Tensor &b) {
  return kiln::ops::logicalAnd(a, b);
}
Tensor EagerBuilder::logicalOr(const Tensor &a, const Tensor &b) {
  return kiln::ops::logicalOr(a, b);
}
Tensor EagerBuilder::logicalNot(const Tensor &a) { return kiln::ops::logicalNot(a); }
Tensor EagerBuilder::where(const Tensor &cond, const Tensor &a, const Tensor &b) {
  return ops::where(cond, a, b);
}
Tensor EagerBuilder::zeroWhere(const Tensor &a, const Tensor &cond) {
  return ops::where(cond, number(0.0), a);
}
Tensor EagerBuilder::connect(const Tensor &value, const Tensor &source) {
  if (!isGradEnabled() || !source.requiresGrad())
    return value;
  Tensor out = detach(value);
  record("ZeroDerivativeBackward", {&value, &source}, out, [&](const NodePtr &) {
    return
        [sizes = source.sizes(), dtype = source.dtype()](EagerBuilder &b, const Node &n, Grads &g) {
          Grads r(2);
          if (n.needsInputGrad(0))
            r[0] = g[0];
          if (n.needsInputGrad(1))
            r[1] = b.zeros(sizes, dtype);
          return r;
        };
  });
  return out;
}
Tensor EagerBuilder::cast(const Tensor &a, DType dtype) {
  return a.dtype() == dtype ? a : autograd::to(a, dtype);
}
Tensor EagerBuilder::zeros(const Sizes &sizes, DType dtype) {
  return kiln::ops::zeros(sizes, dtype);
}

Tensor EagerBuilder::sum(const Tensor &a, const DimList &dims, bool keepdim) {
  return ops::sum(a, dims, keepdim);
}

Tensor EagerBuilder::cumsum(const Tensor &a, int64_t dim) { return ops::cumsum(a, dim); }
Tensor EagerBuilder::cumprod(const Tensor &a, int64_t dim) { return ops::cumprod(a, dim); }
Tensor EagerBuilder::logcumsumexp(const Tensor &a, int64_t dim) {
  return ops::logcumsumexp(a, dim);
}

Tensor EagerBuilder::reduceTo(const Tensor &g, const Sizes &sizes, DType dtype) {
  if (g.sizes() == sizes)
    return cast(g, dtype);
  Shape dims = rules::broadcastDims(g.sizes(), sizes);
  Tensor s = dims.empty() ? g : ops::sum(g, DimList(dims), true);
  return cast(autograd::reshape(s, sizes), dtype);
}

Tensor EagerBuilder::unsqueezeReduced(const Tensor &g, const DimList &dims, int64_t rank) {
  if (!dims || dims->empty())
    return autograd::reshape(g, Shape(rank, 1));
  Tensor r = g;
  for (int64_t d : rules::sortedReducedDims(dims, rank))
    r = autograd::unsqueeze(r, d);
  return r;
}

Tensor EagerBuilder::expand(const Tensor &a, const Sizes &sizes) {
  return a.sizes() == sizes ? a : autograd::expand(a, sizes);
}
Tensor EagerBuilder::reshape(const Tensor &a, const Sizes &sizes) {
  return autograd::reshape(a, sizes);
}
Tensor EagerBuilder::transpose(const Tensor &a, int64_t d0, int64_t d1) {
  return autograd::transpose(a, d0, d1);
}
Tensor EagerBuilder::permute(const Tensor &a, const Shape &dims) {
  return autograd::permute(a, dims);
}
Tensor EagerBuilder::unsqueeze(const Tensor &a, int64_t dim) { return autograd::unsqueeze(a, dim); }
Tensor EagerBuilder::squeezeDim(const Tensor &a, int64_t dim) {
  return autograd::squeeze(a, Shape{dim});
}
Tensor EagerBuilder::tril(const Tensor &a, int64_t diagonal) { return ops::tril(a, diagonal); }
Tensor EagerBuilder::flip(const Tensor &a, const Shape &dims) { return ops::flip(a, dims); }
Tensor EagerBuilder::roll(const Tensor &a, const Shape &shifts, const Shape &dims) {
  return ops::roll(a, shifts, dims);
}
Tensor EagerBuilder::triu(const Tensor &a, int64_t diagonal) { return ops::triu(a, diagonal); }
Tensor EagerBuilder::matmul(const Tensor &a, const Tensor &b) { return ops::matmul(a, b); }
Tensor EagerBuilder::linalgSolve(const Tensor &a, const Tensor &b) {
  return ops::linalgSolve(a, b);
}
Tensor EagerBuilder::linalgSolveTriangular(const Tensor &a, const Tensor &b, bool upper,
                                           bool unit) {
  return ops::linalgSolveTriangular(a, b, upper, unit);
}
Tensor EagerBuilder::cat(const std::vector<Tensor> &parts, int64_t dim) {
  return ops::cat(parts, dim);
}
Tensor EagerBuilder::slice(const Tensor &a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return autograd::slice(a, dim, start, end, step);
}

Tensor EagerBuilder::select(const Tensor &a, int64_t dim, int64_t index) {
  return autograd::select(a, dim, index);
}

Tensor EagerBuilder::sliceBackward(const Tensor &g, const Sizes &sizes, int64_t dim, int64_t start,
                                   int64_t end, int64_t step) {
  Tensor out = kiln::ops::zeros(sizes, g.dtype());
  out.slice(dim, start, end, step).copy_(g);
  record("SliceBackwardBackward0", {&g}, out, [&](const NodePtr &) {
    return [dim, start, end, step](EagerBuilder &b, const Node &, Grads &grads) {
      return Grads{b.slice(grads[0], dim, start, end, step)};
    };
  });
  return out;
}

// The scatters below are the backward of gathers (index, gather, index_select); each records
// its own backward, the gather again, so that create_graph differentiates through them. Outside
// create_graph, grad mode is off during backward and record() does nothing.

Tensor EagerBuilder::indexPutAccumulate(const Sizes &sizes, DType dtype,
                                        const std::vector<Tensor> &indices, const Tensor &values) {
  Tensor out = kiln::ops::zeros(sizes, dtype);
  kiln::ops::indexPut_(out, indices, values, true);
  record("IndexPutBackward0", {&values}, out, [&](const NodePtr &) {
    return [indices](EagerBuilder &, const Node &, Grads &g) {
      return Grads{ops::index(g[0], indices)};
    };
  });
  return out;
}

Tensor EagerBuilder::scatterAdd(const Sizes &sizes, int64_t dim, const Tensor &index,
                                const Tensor &src) {
  Tensor out = kiln::ops::zeros(sizes, src.dtype());
  kiln::ops::scatterAdd_(out, dim, index, src.contiguous());
  record("ScatterAddBackward0", {&src}, out, [&](const NodePtr &) {
    return [dim, index](EagerBuilder &, const Node &, Grads &g) {
      return Grads{ops::gather(g[0], dim, index)};
    };
  });
  return out;
}

Tensor EagerBuilder::gather(const Tensor &a, int64_t dim, const Tensor &index) {
  return ops::gather(a, dim, index);
}

Tensor EagerBuilder::padConstant(const Tensor &a, const Shape &widths) {
  return ops::pad(a, widths, "constant", 0.0);
}

Tensor EagerBuilder::scatter(const Tensor &a, int64_t dim, const Tensor &index, const Tensor &src) {
  return ops::scatter(a, dim, index, src);
}

Tensor EagerBuilder::indexSelect(const Tensor &a, int64_t dim, const Tensor &index) {
  return ops::indexSelect(a, dim, index);
}

Tensor EagerBuilder::indexAdd(const Sizes &sizes, int64_t dim, const Tensor &index,
                              const Tensor &src) {
  Tensor out = kiln::ops::zeros(sizes, src.dtype());
  kiln::ops::indexAdd_(out, dim, index, src);
  record("IndexAddBackward0", {&src}, out, [&](const NodePtr &) {
    return [dim, index](EagerBuilder &, const Node &, Grads &g) {
      return Grads{ops::indexSelect(g[0], dim, index)};
    };
  });
  return out;
}

} // namespace kiln::autograd

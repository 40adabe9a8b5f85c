#pragma once
/// Derivative rules (vector-Jacobian products), written once against a builder `B`.
///
/// Each rule maps the gradient of an op's output(s) to the gradients of its inputs, using only
/// builder calls; run on EagerBuilder (builder.h) it computes with the differentiable eager ops,
/// and the graph builder of compiled training reuses it to add backward nodes. A rule gets what
/// the op saved (input values, sizes, dtypes, attributes) and `Needs`, the inputs that want a
/// gradient; it leaves the others undefined. The rules are named after the graph-IR op they
/// differentiate (ir/ops.def); the ops without one are listed non-differentiable there.

#include "runtime/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

namespace kiln::autograd::rules {

// The same types as kiln::Shape and kiln::ops::DimList, spelled here so that the rules need no
// runtime header (the graph builder of compiled training uses them without the runtime).
using Shape = std::vector<int64_t>;
using DimList = std::optional<Shape>;

/// The dims a gradient of sizes `g` is summed over (keepdim) to become one of `target`, the
/// reverse of a broadcast: g's extra leading dims and those target has as 1. Both builders'
/// reduceTo use it.
inline Shape broadcastDims(const Shape &g, const Shape &target) {
  const int64_t rank = static_cast<int64_t>(g.size());
  const int64_t lead = rank - static_cast<int64_t>(target.size());
  Shape dims;
  for (int64_t d = 0; d < rank; ++d)
    if (d < lead || (target[d - lead] == 1 && g[d] != 1))
      dims.push_back(d);
  return dims;
}

/// The reduced dims of an input of `rank`, wrapped and sorted: where both builders'
/// unsqueezeReduced put a reduction's gradient back (nullopt or empty: every dim).
inline Shape sortedReducedDims(const DimList &dims, int64_t rank) {
  Shape sorted;
  if (!dims || dims->empty()) {
    for (int64_t d = 0; d < rank; ++d)
      sorted.push_back(d);
    return sorted;
  }
  for (int64_t d : *dims)
    sorted.push_back(d < 0 ? d + rank : d);
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

/// Which inputs of the op need a gradient: a bit per input, the first 64 inline (a cat of
/// more pieces keeps the rest beside them).
struct Needs {
  uint64_t bits = 0;
  std::vector<bool> beyond; ///< inputs from the 65th on

  bool operator[](size_t i) const {
    return i < 64 ? (bits >> i) & 1 : i - 64 < beyond.size() && beyond[i - 64];
  }
  void set(size_t i) {
    if (i < 64) {
      bits |= uint64_t{1} << i;
      return;
    }
    if (beyond.size() <= i - 64)
      beyond.resize(i - 63);
    beyond[i - 64] = true;
  }
  template <class N> static Needs of(const N &node) {
    Needs n;
    for (size_t i = 0; i < node.next.size(); ++i)
      if (node.needsInputGrad(i))
        n.set(i);
    return n;
  }
};

/// Sizes and dtype of an input: what its gradient must have.
template <class B> struct InputInfo {
  typename B::Sizes sizes;
  DType dtype;
};
template <class B> InputInfo<B> infoOf(const typename B::Value &v) {
  return {B::sizes(v), B::dtype(v)};
}

template <class B> using V = typename B::Value;
template <class B> using Out = std::vector<typename B::Value>;

constexpr double kSqrt2OverPi = 0.79788456080286535588;   // sqrt(2 / pi)
constexpr double kTwoOverSqrtPi = 1.12837916709551257390; // 2 / sqrt(pi)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;    // 1 / sqrt(2 pi)

// ---- binary arithmetic -------------------------------------------------------------------------

template <class B>
Out<B> add(B &b, const V<B> &g, const InputInfo<B> &x, const InputInfo<B> &y, double alpha,
           Needs need) {
  Out<B> r(2);
  if (need[0])
    r[0] = b.reduceTo(g, x.sizes, x.dtype);
  if (need[1])
    r[1] = b.reduceTo(alpha == 1.0 ? g : b.scale(g, alpha), y.sizes, y.dtype);
  return r;
}

template <class B> Out<B> mul(B &b, const V<B> &g, const V<B> &x, const V<B> &y, Needs need) {
  Out<B> r(2);
  if (need[0])
    r[0] = b.reduceTo(b.mul(g, y), B::sizes(x), B::dtype(x));
  if (need[1])
    r[1] = b.reduceTo(b.mul(g, x), B::sizes(y), B::dtype(y));
  return r;
}

/// self + value * t1 * t2 (addcmul) or, with `divide`, self + value * t1 / t2 (addcdiv).
template <class B>
Out<B> addcmul(B &b, const V<B> &g, const InputInfo<B> &self, const V<B> &t1, const V<B> &t2,
               double value, bool divide, Needs need) {
  Out<B> r(3);
  if (need[0])
    r[0] = b.reduceTo(g, self.sizes, self.dtype);
  if (need[1])
    r[1] = b.reduceTo(divide ? b.div(b.scale(g, value), t2) : b.mul(g, b.scale(t2, value)),
                      B::sizes(t1), B::dtype(t1));
  if (need[2])
    r[2] = b.reduceTo(divide ? b.neg(b.div(b.mul(g, b.scale(t1, value)), b.mul(t2, t2)))
                             : b.mul(g, b.scale(t1, value)),
                      B::sizes(t2), B::dtype(t2));
  return r;
}

template <class B> Out<B> div(B &b, const V<B> &g, const V<B> &x, const V<B> &y, Needs need) {
  Out<B> r(2);
  if (need[0])
    r[0] = b.reduceTo(b.div(g, y), B::sizes(x), B::dtype(x));
  if (need[1])
    r[1] = b.reduceTo(b.neg(b.div(b.mul(g, x), b.mul(y, y))), B::sizes(y), B::dtype(y));
  return r;
}

/// pow(x, y): d/dx = y * x^(y-1); d/dy = x^y * log(x), 0 where x == 0 and y >= 0 (torch's mask).
template <class B>
Out<B> pow(B &b, const V<B> &g, const V<B> &x, const V<B> &y, const V<B> &out, Needs need) {
  Out<B> r(2);
  if (need[0]) {
    V<B> d = b.mul(y, b.powT(x, b.addScalar(y, -1.0)));
    r[0] = b.reduceTo(b.mul(g, d), B::sizes(x), B::dtype(x));
  }
  if (need[1]) {
    V<B> d = b.mul(out, b.log(x));
    V<B> zero = b.logicalAnd(b.eqScalar(x, 0.0), b.geScalar(y, 0.0));
    r[1] = b.reduceTo(b.mul(g, b.zeroWhere(d, zero)), B::sizes(y), B::dtype(y));
  }
  return r;
}

/// pow(x, s) for a number s.
template <class B> V<B> powScalar(B &b, const V<B> &g, const V<B> &x, double s) {
  if (s == 0.0)
    return b.scale(g, 0.0);
  return b.mul(g, b.scale(b.powScalar(x, s - 1.0), s));
}

/// maximum/minimum: the gradient goes to the selected operand, split evenly on ties.
template <class B>
Out<B> maximum(B &b, const V<B> &g, const V<B> &x, const V<B> &y, bool isMax, Needs need) {
  Out<B> r(2);
  V<B> tie = b.eq(x, y);
  V<B> half = b.scale(g, 0.5);
  V<B> xWins = isMax ? b.gt(x, y) : b.gt(y, x);
  if (need[0])
    r[0] = b.reduceTo(b.where(tie, half, b.where(xWins, g, b.scale(g, 0.0))), B::sizes(x),
                      B::dtype(x));
  if (need[1]) {
    V<B> yWins = isMax ? b.gt(y, x) : b.gt(x, y);
    r[1] = b.reduceTo(b.where(tie, half, b.where(yWins, g, b.scale(g, 0.0))), B::sizes(y),
                      B::dtype(y));
  }
  return r;
}

template <class B>
Out<B> where(B &b, const V<B> &g, const V<B> &cond, const InputInfo<B> &x, const InputInfo<B> &y,
             Needs need) {
  Out<B> r(3);
  if (need[1])
    r[1] = b.reduceTo(b.zeroWhere(g, b.logicalNot(cond)), x.sizes, x.dtype);
  if (need[2])
    r[2] = b.reduceTo(b.zeroWhere(g, cond), y.sizes, y.dtype);
  return r;
}

/// clamp(x, lo, hi): the gradient passes where lo <= x <= hi; a tensor bound gets it where it
/// clamped.
template <class B>
Out<B> clamp(B &b, const V<B> &g, const V<B> &x, const std::optional<V<B>> &lo,
             const std::optional<V<B>> &hi, Needs need) {
  Out<B> r(3);
  if (need[0]) {
    V<B> gx = g;
    if (lo)
      gx = b.zeroWhere(gx, b.gt(*lo, x));
    if (hi)
      gx = b.zeroWhere(gx, b.gt(x, *hi));
    r[0] = b.reduceTo(gx, B::sizes(x), B::dtype(x));
  }
  if (need[1] && lo)
    r[1] = b.reduceTo(b.zeroWhere(g, b.logicalNot(b.gt(*lo, x))), B::sizes(*lo), B::dtype(*lo));
  if (need[2] && hi)
    r[2] = b.reduceTo(b.zeroWhere(g, b.logicalNot(b.gt(x, *hi))), B::sizes(*hi), B::dtype(*hi));
  return r;
}

template <class B>
Out<B> maskedFill(B &b, const V<B> &g, const V<B> &mask, const InputInfo<B> &self,
                  const InputInfo<B> &value, Needs need) {
  Out<B> r(3);
  if (need[0])
    r[0] = b.reduceTo(b.zeroWhere(g, mask), self.sizes, self.dtype);
  if (need[2])
    r[2] = b.reduceTo(b.zeroWhere(g, b.logicalNot(mask)), value.sizes, value.dtype);
  return r;
}

// ---- unary math: g times the local derivative
// ----------------------------------------------------

template <class B> V<B> neg(B &b, const V<B> &g) { return b.neg(g); }
template <class B> V<B> abs(B &b, const V<B> &g, const V<B> &x) {
  return b.connect(b.mul(g, b.sign(x)), x);
}
template <class B> V<B> square(B &b, const V<B> &g, const V<B> &x) {
  return b.mul(g, b.scale(x, 2.0));
}
template <class B> V<B> reciprocal(B &b, const V<B> &g, const V<B> &y) {
  return b.neg(b.mul(g, b.mul(y, y)));
}
template <class B> V<B> exp(B &b, const V<B> &g, const V<B> &y) { return b.mul(g, y); }
template <class B> V<B> log(B &b, const V<B> &g, const V<B> &x) { return b.div(g, x); }
template <class B> V<B> log1p(B &b, const V<B> &g, const V<B> &x) {
  return b.div(g, b.addScalar(x, 1.0));
}
template <class B> V<B> expm1(B &b, const V<B> &g, const V<B> &y) {
  return b.mul(g, b.addScalar(y, 1.0));
}
template <class B> V<B> sqrt(B &b, const V<B> &g, const V<B> &y) {
  return b.div(g, b.scale(y, 2.0));
}
template <class B> V<B> rsqrt(B &b, const V<B> &g, const V<B> &y) {
  return b.mul(g, b.scale(b.mul(y, b.mul(y, y)), -0.5));
}
template <class B> V<B> sin(B &b, const V<B> &g, const V<B> &x) { return b.mul(g, b.cos(x)); }
template <class B> V<B> cos(B &b, const V<B> &g, const V<B> &x) {
  return b.neg(b.mul(g, b.sin(x)));
}
template <class B> V<B> tanh(B &b, const V<B> &g, const V<B> &y) {
  return b.mul(g, b.rsubScalar(b.mul(y, y), 1.0));
}
template <class B> V<B> sigmoid(B &b, const V<B> &g, const V<B> &y) {
  return b.mul(g, b.mul(y, b.rsubScalar(y, 1.0)));
}
template <class B> V<B> erf(B &b, const V<B> &g, const V<B> &x) {
  return b.mul(g, b.scale(b.exp(b.neg(b.mul(x, x))), kTwoOverSqrtPi));
}
template <class B> V<B> erfc(B &b, const V<B> &g, const V<B> &x) { return b.neg(erf(b, g, x)); }

// ---- activations
// ---------------------------------------------------------------------------------
// The piecewise-linear rules read their input only through a mask; `connect` records that
// dependence (zero derivative), as torch's threshold/leaky_relu/hardtanh backward ops have it.

template <class B> V<B> relu(B &b, const V<B> &g, const V<B> &y) {
  return b.connect(b.zeroWhere(g, b.leScalar(y, 0.0)), y);
}

/// gelu, exact: Phi(x) + x phi(x); tanh: torch's derivative of its approximation.
template <class B> V<B> gelu(B &b, const V<B> &g, const V<B> &x, bool tanhApprox) {
  if (!tanhApprox) {
    V<B> cdf = b.scale(b.addScalar(b.erf(b.scale(x, M_SQRT1_2)), 1.0), 0.5);
    V<B> pdf = b.scale(b.exp(b.scale(b.mul(x, x), -0.5)), kInvSqrt2Pi);
    return b.mul(g, b.add(cdf, b.mul(x, pdf)));
  }
  constexpr double kKappa = 0.044715;
  V<B> x2 = b.mul(x, x);
  V<B> inner = b.scale(b.add(x, b.scale(b.mul(x2, x), kKappa)), kSqrt2OverPi);
  V<B> t = b.tanh(inner);
  V<B> left = b.scale(x, 0.5);
  V<B> right = b.addScalar(t, 1.0);
  V<B> leftDerivative = b.scale(right, 0.5);
  V<B> tanhDerivative = b.rsubScalar(b.mul(t, t), 1.0);
  V<B> innerDerivative = b.scale(b.addScalar(b.scale(x2, 3.0 * kKappa), 1.0), kSqrt2OverPi);
  V<B> rightDerivative = b.mul(left, b.mul(tanhDerivative, innerDerivative));
  return b.mul(g, b.add(leftDerivative, rightDerivative));
}

template <class B> V<B> silu(B &b, const V<B> &g, const V<B> &x) {
  V<B> s = b.sigmoid(x);
  return b.mul(g, b.mul(s, b.addScalar(b.mul(x, b.rsubScalar(s, 1.0)), 1.0)));
}

template <class B>
V<B> softplus(B &b, const V<B> &g, const V<B> &x, double beta, double threshold) {
  V<B> bx = b.scale(x, beta);
  return b.where(b.gtScalar(bx, threshold), g, b.mul(g, b.sigmoid(bx)));
}

template <class B> V<B> leakyRelu(B &b, const V<B> &g, const V<B> &x, double slope) {
  return b.connect(b.where(b.gtScalar(x, 0.0), g, b.scale(g, slope)), x);
}

/// elu and its scaled form (selu), torch's elu_backward from the output: g scale where x > 0,
/// else g input_scale (y + alpha scale).
template <class B>
V<B> elu(B &b, const V<B> &g, const V<B> &x, const V<B> &y, double alpha, double scale = 1.0,
         double inputScale = 1.0) {
  V<B> negative = b.addScalar(y, alpha * scale);
  return b.where(b.gtScalar(x, 0.0), scale == 1.0 ? g : b.scale(g, scale),
                 b.mul(inputScale == 1.0 ? g : b.scale(g, inputScale), negative));
}

template <class B> V<B> hardtanh(B &b, const V<B> &g, const V<B> &x, double lo, double hi) {
  return b.connect(b.zeroWhere(g, b.logicalOr(b.leScalar(x, lo), b.geScalar(x, hi))), x);
}

// ---- reductions
// ----------------------------------------------------------------------------------

/// sum: the gradient broadcast back over the reduced dims.
template <class B>
V<B> sum(B &b, const V<B> &g, const InputInfo<B> &x, const DimList &dims, bool keepdim) {
  V<B> gk = keepdim ? g : b.unsqueezeReduced(g, dims, static_cast<int64_t>(x.sizes.size()));
  return b.cast(b.expand(gk, x.sizes), x.dtype);
}

template <class B>
V<B> mean(B &b, const V<B> &g, const InputInfo<B> &x, const DimList &dims, bool keepdim,
          double count) {
  return b.scale(sum(b, g, x, dims, keepdim), count == 0 ? 0.0 : 1.0 / count);
}

/// nanmean: the mean's gradient over each slice's non-NaN elements; NaNs get none.
template <class B>
V<B> nanmean(B &b, const V<B> &g, const V<B> &x, const DimList &dims, bool keepdim) {
  int64_t rank = static_cast<int64_t>(B::sizes(x).size());
  V<B> gk = keepdim ? g : b.unsqueezeReduced(g, dims, rank);
  V<B> kept = b.eq(x, x);
  V<B> count = b.sum(b.cast(kept, B::dtype(g)), dims, true);
  return b.zeroWhere(b.expand(b.div(gk, count), B::sizes(x)), b.logicalNot(kept));
}

/// amax/amin: the gradient split evenly over the elements equal to the extreme.
template <class B>
V<B> amax(B &b, const V<B> &g, const V<B> &x, const V<B> &y, const DimList &dims, bool keepdim) {
  int64_t rank = static_cast<int64_t>(B::sizes(x).size());
  V<B> yk = keepdim ? y : b.unsqueezeReduced(y, dims, rank);
  V<B> gk = keepdim ? g : b.unsqueezeReduced(g, dims, rank);
  V<B> mask = b.eq(x, yk);
  V<B> count = b.sum(b.cast(mask, B::dtype(g)), dims, true);
  return b.zeroWhere(b.expand(b.div(gk, count), B::sizes(x)), b.logicalNot(mask));
}

/// var: 2 (x - mean) / (N - correction); std: (x - mean) / ((N - correction) std).
template <class B>
V<B> var(B &b, const V<B> &g, const V<B> &x, const DimList &dims, double correction, bool keepdim,
         double count, const std::optional<V<B>> &stdOut) {
  int64_t rank = static_cast<int64_t>(B::sizes(x).size());
  V<B> centered = b.sub(x, b.scale(b.sum(x, dims, true), 1.0 / count));
  V<B> gk = stdOut ? b.div(g, *stdOut) : b.scale(g, 2.0);
  gk = keepdim ? gk : b.unsqueezeReduced(gk, dims, rank);
  double denom = count - correction;
  return b.mul(gk, b.scale(centered, stdOut ? 1.0 / denom : 1.0 / denom));
}

template <class B>
V<B> logsumexp(B &b, const V<B> &g, const V<B> &x, const V<B> &y, const DimList &dims,
               bool keepdim) {
  int64_t rank = static_cast<int64_t>(B::sizes(x).size());
  V<B> yk = keepdim ? y : b.unsqueezeReduced(y, dims, rank);
  V<B> gk = keepdim ? g : b.unsqueezeReduced(g, dims, rank);
  return b.mul(gk, b.exp(b.sub(x, yk)));
}

template <class B> V<B> softmax(B &b, const V<B> &g, const V<B> &y, int64_t dim) {
  V<B> gy = b.mul(g, y);
  return b.sub(gy, b.mul(y, b.sum(gy, DimList(Shape{dim}), true)));
}

template <class B> V<B> logSoftmax(B &b, const V<B> &g, const V<B> &y, int64_t dim) {
  return b.sub(g, b.mul(b.exp(y), b.sum(g, DimList(Shape{dim}), true)));
}

// ---- linear algebra
// ------------------------------------------------------------------------------

/// matmul with torch's 1-D promotion rules and broadcast batch dims.
template <class B> Out<B> matmul(B &b, const V<B> &g, const V<B> &x, const V<B> &y, Needs need) {
  Out<B> r(2);
  auto xs = B::sizes(x), ys = B::sizes(y);
  if (xs.size() == 1 && ys.size() == 1) {
    if (need[0])
      r[0] = b.mul(g, y);
    if (need[1])
      r[1] = b.mul(g, x);
    return r;
  }
  // Promote 1-D operands to matrices, as matmul does, and the gradient with them.
  V<B> x2 = xs.size() == 1 ? b.unsqueeze(x, 0) : x;
  V<B> y2 = ys.size() == 1 ? b.unsqueeze(y, 1) : y;
  V<B> g2 = g;
  if (xs.size() == 1)
    g2 = b.unsqueeze(g2, -2);
  if (ys.size() == 1)
    g2 = b.unsqueeze(g2, -1);
  // Undo the promotions and sum the broadcast batch dims.
  if (need[0]) {
    V<B> gx = b.matmul(g2, b.transpose(y2, -1, -2));
    if (xs.size() == 1)
      gx = b.squeezeDim(gx, -2);
    r[0] = b.reduceTo(gx, xs, B::dtype(x));
  }
  if (need[1]) {
    V<B> gy = b.matmul(b.transpose(x2, -1, -2), g2);
    if (ys.size() == 1)
      gy = b.squeezeDim(gy, -1);
    r[1] = b.reduceTo(gy, ys, B::dtype(y));
  }
  return r;
}

/// linear(x, W, bias) = x W^T + bias over any leading dims of x.
template <class B>
Out<B> linear(B &b, const V<B> &g, const V<B> &x, const V<B> &w, const typename B::Sizes &ws,
              const std::optional<InputInfo<B>> &bias, Needs need) {
  Out<B> r(3);
  if (need[0])
    r[0] = b.matmul(g, w);
  if (need[1]) {
    int64_t out = ws[0], in = ws.size() > 1 ? ws[1] : 1;
    V<B> g2 = b.reshape(g, {-1, out});
    V<B> x2 = b.reshape(x, {-1, in});
    r[1] = b.reshape(b.matmul(b.transpose(g2, 0, 1), x2), ws);
  }
  if (need[2] && bias)
    r[2] = b.reduceTo(g, bias->sizes, bias->dtype);
  return r;
}

template <class B>
Out<B> addmm(B &b, const V<B> &g, const InputInfo<B> &self, const V<B> &m1, const V<B> &m2,
             double beta, double alpha, Needs need) {
  Out<B> r(3);
  if (need[0])
    r[0] = b.reduceTo(b.scale(g, beta), self.sizes, self.dtype);
  if (need[1])
    r[1] = b.scale(b.matmul(g, b.transpose(m2, 0, 1)), alpha);
  if (need[2])
    r[2] = b.scale(b.matmul(b.transpose(m1, 0, 1), g), alpha);
  return r;
}

// ---- normalization
// -------------------------------------------------------------------------------

/// layer_norm over the trailing `normDims` dims; mean and rstd are recomputed from x.
template <class B>
Out<B> layerNorm(B &b, const V<B> &g, const V<B> &x, const std::optional<V<B>> &w,
                 const std::optional<InputInfo<B>> &bias, int64_t normDims, double eps,
                 Needs need) {
  Out<B> r(3);
  auto xs = B::sizes(x);
  int64_t rank = static_cast<int64_t>(xs.size());
  Shape dims;
  double count = 1;
  for (int64_t d = rank - normDims; d < rank; ++d) {
    dims.push_back(d);
    count *= static_cast<double>(xs[d]);
  }
  Shape lead;
  for (int64_t d = 0; d < rank - normDims; ++d)
    lead.push_back(d);
  DimList nd(dims), ld(lead);
  V<B> mu = b.scale(b.sum(x, nd, true), 1.0 / count);
  V<B> centered = b.sub(x, mu);
  V<B> var = b.scale(b.sum(b.mul(centered, centered), nd, true), 1.0 / count);
  V<B> rstd = b.powScalar(b.addScalar(var, eps), -0.5);
  V<B> xhat = b.mul(centered, rstd);
  if (need[0]) {
    V<B> gxhat = w ? b.mul(g, *w) : g;
    V<B> m1 = b.scale(b.sum(gxhat, nd, true), 1.0 / count);
    V<B> m2 = b.scale(b.sum(b.mul(gxhat, xhat), nd, true), 1.0 / count);
    r[0] = b.mul(rstd, b.sub(b.sub(gxhat, m1), b.mul(xhat, m2)));
  }
  if (need[1] && w)
    r[1] = b.reduceTo(b.mul(g, xhat), B::sizes(*w), B::dtype(*w));
  if (need[2] && bias)
    r[2] = b.reduceTo(g, bias->sizes, bias->dtype);
  return r;
}

// ---- scatters ----------------------------------------------------------------------------------

/// scatter_reduce's sum, mean, amax and amin, as torch differentiates them: sum passes g to self
/// and gathers it for src; mean divides it by how many values each position averaged; amax/amin
/// share it evenly among the values equal to the result (self's and src's). Without
/// include_self, self's values at the scattered positions get none. (prod is not written.)
template <class B>
Out<B> scatterReduce(B &b, const V<B> &g, const V<B> &self, const V<B> &index, const V<B> &src,
                     const V<B> &out, int64_t dim, bool amaxOrAmin, bool mean, bool includeSelf,
                     Needs need) {
  const auto sizes = B::sizes(g); // self's and the result's
  const DType dt = B::dtype(g);
  auto ones = [&](const V<B> &like) { return b.addScalar(b.zeros(B::sizes(like), dt), 1.0); };
  V<B> toSelf = g, toSrc;
  if (amaxOrAmin) {
    V<B> value = b.gather(out, dim, index);
    V<B> selfIs = b.cast(b.eq(self, out), dt), srcIs = b.cast(b.eq(src, value), dt);
    V<B> each = b.div(g, b.add(selfIs, b.scatterAdd(sizes, dim, index, srcIs)));
    toSelf = b.mul(selfIs, each);
    toSrc = b.mul(srcIs, b.gather(each, dim, index));
  } else {
    if (mean) {
      V<B> count = b.scatterAdd(sizes, dim, index, ones(index));
      if (includeSelf)
        count = b.addScalar(count, 1.0);
      toSelf = b.div(g, b.where(b.eqScalar(count, 0.0), b.addScalar(count, 1.0), count));
    }
    toSrc = b.gather(toSelf, dim, index);
  }
  Out<B> r(3);
  if (need[0])
    r[0] = includeSelf
               ? toSelf
               : b.zeroWhere(toSelf, b.gtScalar(b.scatterAdd(sizes, dim, index, ones(index)), 0.0));
  if (need[2])
    r[2] = toSrc;
  return r;
}

} // namespace kiln::autograd::rules

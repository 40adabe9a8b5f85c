#pragma once
/// Derivative rules of the remaining pointwise math (trigonometric, hyperbolic, logarithmic,
/// rounding), the smooth and piecewise activations and the binary math ops, written once
/// against a builder `B` as in derivatives.h: eager autograd (autograd/ops_math.cc) and compiled
/// training (passes/autodiff/node_vjp_math.cc) both run them.
///
/// A unary rule maps g to g times the local derivative at x (the input) or y (the output). A
/// binary rule returns both operands' gradients before the broadcast is undone: the caller
/// reduces each to its operand (reduceTo) and drops the ones not needed.

#include "autograd/derivatives.h"

#include <array>

namespace kiln::autograd::rules {

constexpr double kLn2 = 0.69314718055994530942, kLn10 = 2.30258509299404568402;
constexpr double kSeluAlpha = 1.6732632423543772848, kSeluScale = 1.0507009873554804934;

template <class B> V<B> squared(B &b, const V<B> &x) { return b.mul(x, x); }

// ---- trigonometric, hyperbolic, logarithmic ------------------------------------------------

template <class B> V<B> tan(B &b, const V<B> &g, const V<B> &y) {
  return b.mul(g, b.addScalar(squared(b, y), 1.0));
}
template <class B> V<B> asin(B &b, const V<B> &g, const V<B> &x) {
  return b.div(g, b.sqrt(b.rsubScalar(squared(b, x), 1.0)));
}
template <class B> V<B> acos(B &b, const V<B> &g, const V<B> &x) { return b.neg(asin(b, g, x)); }
template <class B> V<B> atan(B &b, const V<B> &g, const V<B> &x) {
  return b.div(g, b.addScalar(squared(b, x), 1.0));
}
template <class B> V<B> sinh(B &b, const V<B> &g, const V<B> &x) { return b.mul(g, b.cosh(x)); }
template <class B> V<B> cosh(B &b, const V<B> &g, const V<B> &x) { return b.mul(g, b.sinh(x)); }
template <class B> V<B> asinh(B &b, const V<B> &g, const V<B> &x) {
  return b.div(g, b.sqrt(b.addScalar(squared(b, x), 1.0)));
}
template <class B> V<B> acosh(B &b, const V<B> &g, const V<B> &x) {
  return b.div(g, b.sqrt(b.addScalar(squared(b, x), -1.0)));
}
template <class B> V<B> atanh(B &b, const V<B> &g, const V<B> &x) {
  return b.div(g, b.rsubScalar(squared(b, x), 1.0));
}
template <class B> V<B> exp2(B &b, const V<B> &g, const V<B> &y) {
  return b.mul(g, b.scale(y, kLn2));
}
template <class B> V<B> log2(B &b, const V<B> &g, const V<B> &x) {
  return b.div(g, b.scale(x, kLn2));
}
template <class B> V<B> log10(B &b, const V<B> &g, const V<B> &x) {
  return b.div(g, b.scale(x, kLn10));
}

/// floor, ceil, trunc, round, sign: flat almost everywhere (torch's zeros_like(grad)).
template <class B> V<B> flat(B &b, const V<B> &g) { return b.zeros(B::sizes(g), B::dtype(g)); }

// ---- activations -------------------------------------------------------------------------------

template <class B> V<B> celu(B &b, const V<B> &g, const V<B> &x, double alpha) {
  return b.where(b.gtScalar(x, 0.0), g, b.mul(g, b.exp(b.scale(x, 1.0 / alpha))));
}
template <class B> V<B> hardsigmoid(B &b, const V<B> &g, const V<B> &x) {
  return b.zeroWhere(b.scale(g, 1.0 / 6.0), b.logicalOr(b.leScalar(x, -3.0), b.geScalar(x, 3.0)));
}
/// torch's kinks: 0 at -3, 1 at 3.
template <class B> V<B> hardswish(B &b, const V<B> &g, const V<B> &x) {
  V<B> middle = b.mul(g, b.scale(b.addScalar(b.scale(x, 2.0), 3.0), 1.0 / 6.0));
  return b.where(b.leScalar(x, -3.0), b.scale(g, 0.0), b.where(b.ltScalar(x, 3.0), middle, g));
}
/// tanh(sp) + x sigmoid(x) (1 - tanh(sp)^2), sp = softplus(x).
template <class B> V<B> mish(B &b, const V<B> &g, const V<B> &x) {
  V<B> t = b.tanh(b.softplus(x));
  return b.mul(g, b.add(t, b.mul(b.mul(x, b.sigmoid(x)), b.rsubScalar(squared(b, t), 1.0))));
}
template <class B> V<B> logSigmoid(B &b, const V<B> &g, const V<B> &x) {
  return b.mul(g, b.sigmoid(b.neg(x)));
}
template <class B> V<B> softsign(B &b, const V<B> &g, const V<B> &x) {
  return b.div(g, squared(b, b.addScalar(b.abs(x), 1.0)));
}
template <class B> V<B> tanhshrink(B &b, const V<B> &g, const V<B> &x) {
  return b.mul(g, squared(b, b.tanh(x)));
}
/// hardshrink and softshrink: g where |x| > lambd.
template <class B> V<B> shrink(B &b, const V<B> &g, const V<B> &x, double lambd) {
  return b.connect(b.zeroWhere(g, b.leScalar(b.abs(x), lambd)), x);
}
template <class B> V<B> threshold(B &b, const V<B> &g, const V<B> &x, double threshold) {
  return b.connect(b.zeroWhere(g, b.leScalar(x, threshold)), x);
}
/// The replaced values (NaN, +-inf) are constants.
template <class B> V<B> nanToNum(B &b, const V<B> &g, const V<B> &x) {
  return b.zeroWhere(g, b.logicalNot(b.isfinite(x)));
}

// ---- binary math -------------------------------------------------------------------------------

template <class B> using Pair = std::array<V<B>, 2>;

template <class B> Pair<B> atan2(B &b, const V<B> &g, const V<B> &a, const V<B> &c) {
  V<B> r2 = b.add(squared(b, a), squared(b, c));
  return {b.mul(g, b.div(c, r2)), b.neg(b.mul(g, b.div(a, r2)))};
}
template <class B> Pair<B> hypot(B &b, const V<B> &g, const V<B> &a, const V<B> &c, const V<B> &y) {
  return {b.mul(g, b.div(a, y)), b.mul(g, b.div(c, y))};
}
/// fmax/fmin: the operand selected gets all of g (the first on ties, the non-NaN one on NaN).
template <class B> Pair<B> fmaxFmin(B &b, const V<B> &g, const V<B> &a, const V<B> &c, bool max) {
  V<B> took = b.logicalOr(max ? b.ge(a, c) : b.le(a, c), b.isnan(c));
  return {b.zeroWhere(g, b.logicalNot(took)), b.zeroWhere(g, took)};
}
/// remainder (floor) and fmod (trunc): a - q c, flat in the quotient q.
template <class B>
Pair<B> remainder(B &b, const V<B> &g, const V<B> &a, const V<B> &c, bool floorQuotient) {
  V<B> ratio = b.div(a, c);
  V<B> q = floorQuotient ? b.floor(ratio) : b.trunc(ratio);
  return {g, b.neg(b.mul(g, q))};
}
/// lerp(a, e, w) = a + w (e - a); `keep` is 1 - w (taken in double for a number weight).
template <class B>
Out<B> lerp(B &b, const V<B> &g, const V<B> &a, const V<B> &e, const V<B> &w, const V<B> &keep,
            Needs need) {
  Out<B> r(3);
  if (need[0])
    r[0] = b.mul(g, keep);
  if (need[1])
    r[1] = b.mul(g, w);
  if (need[2])
    r[2] = b.mul(g, b.sub(e, a));
  return r;
}

} // namespace kiln::autograd::rules

// Differentiable elementwise math beyond ops_elementwise.cc: the trigonometric, hyperbolic and
// logarithmic families, the piecewise-constant ops (zero gradient, as torch), the remaining
// activations and binary ops.
#include "autograd/derivatives_math.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/ops/activation.h"

namespace kiln::autograd::ops {
namespace {
using rules::Needs;
using B = EagerBuilder;

template <class RuleFn>
Tensor binaryRule(const char *name, const Tensor &a, const Tensor &b, Tensor out, RuleFn rule) {
  record(name, {&a, &b}, out, [&](const NodePtr &self) {
    return [sa = SavedTensor(a), sb = SavedTensor(b), so = SavedTensor(out, self),
            rule](B &bd, const Node &n, Grads &g) {
      Tensor x = sa.unpack(n), y = sb.unpack(n);
      auto [gx, gy] = rule(bd, g[0], x, y, so.unpack(n));
      Grads r(2);
      if (n.needsInputGrad(0))
        r[0] = bd.reduceTo(gx, x.sizes(), x.dtype());
      if (n.needsInputGrad(1))
        r[1] = bd.reduceTo(gy, y.sizes(), y.dtype());
      return r;
    };
  });
  return out;
}
} // namespace

#define KILN_FROM_INPUT(fn, Name, expr)                                                            \
  Tensor fn(const Tensor &a) {                                                                     \
    return unaryFromInput(Name, a, kiln::ops::fn(a),                                               \
                          [](B &b, const Tensor &g, const Tensor &x) { return expr; });            \
  }
#define KILN_FROM_OUTPUT(fn, Name, expr)                                                           \
  Tensor fn(const Tensor &a) {                                                                     \
    return unaryFromOutput(Name, a, kiln::ops::fn(a),                                              \
                           [](B &b, const Tensor &g, const Tensor &y) { return expr; });           \
  }
/// Piecewise constant: zero gradient, but the output still requires grad (as in torch).
#define KILN_ZERO_GRAD(fn, Name)                                                                   \
  Tensor fn(const Tensor &a) {                                                                     \
    Tensor out = kiln::ops::fn(a);                                                                 \
    if (isFloating(out.dtype()))                                                                   \
      record(Name, {&a}, out, [&](const NodePtr &) {                                               \
        return [](B &b, const Node &, Grads &g) { return Grads{rules::flat(b, g[0])}; };           \
      });                                                                                          \
    return out;                                                                                    \
  }

KILN_FROM_OUTPUT(tan, "TanBackward0", rules::tan(b, g, y))
KILN_FROM_INPUT(asin, "AsinBackward0", rules::asin(b, g, x))
KILN_FROM_INPUT(acos, "AcosBackward0", rules::acos(b, g, x))
KILN_FROM_INPUT(atan, "AtanBackward0", rules::atan(b, g, x))
KILN_FROM_INPUT(sinh, "SinhBackward0", rules::sinh(b, g, x))
KILN_FROM_INPUT(cosh, "CoshBackward0", rules::cosh(b, g, x))
KILN_FROM_INPUT(asinh, "AsinhBackward0", rules::asinh(b, g, x))
KILN_FROM_INPUT(acosh, "AcoshBackward0", rules::acosh(b, g, x))
KILN_FROM_INPUT(atanh, "AtanhBackward0", rules::atanh(b, g, x))
KILN_FROM_OUTPUT(exp2, "Exp2Backward0", rules::exp2(b, g, y))
KILN_FROM_INPUT(log2, "Log2Backward0", rules::log2(b, g, x))
KILN_FROM_INPUT(log10, "Log10Backward0", rules::log10(b, g, x))
KILN_FROM_INPUT(erfc, "ErfcBackward0", rules::erfc(b, g, x))
KILN_FROM_INPUT(frac, "FracBackward0", g)
KILN_FROM_INPUT(hardsigmoid, "HardsigmoidBackward0", rules::hardsigmoid(b, g, x))
KILN_FROM_INPUT(hardswish, "HardswishBackward0", rules::hardswish(b, g, x))
KILN_FROM_INPUT(mish, "MishBackward0", rules::mish(b, g, x))
KILN_FROM_INPUT(logsigmoid, "LogSigmoidBackward0", rules::logSigmoid(b, g, x))
KILN_FROM_INPUT(softsign, "SoftsignBackward0", rules::softsign(b, g, x))
KILN_FROM_INPUT(tanhshrink, "TanhshrinkBackward0", rules::tanhshrink(b, g, x))

Tensor selu(const Tensor &a) {
  Tensor out = kiln::ops::selu(a);
  record("EluBackward0", {&a}, out, [&](const NodePtr &self) {
    return [sa = SavedTensor(a), so = SavedTensor(out, self)](B &b, const Node &n, Grads &g) {
      return Grads{rules::elu(b, g[0], sa.unpack(n), so.unpack(n), rules::kSeluAlpha,
                              rules::kSeluScale, 1.0)};
    };
  });
  return out;
}

KILN_ZERO_GRAD(floor, "FloorBackward0")
KILN_ZERO_GRAD(ceil, "CeilBackward0")
KILN_ZERO_GRAD(trunc, "TruncBackward0")
KILN_ZERO_GRAD(sign, "SignBackward0")
#undef KILN_FROM_INPUT
#undef KILN_FROM_OUTPUT
#undef KILN_ZERO_GRAD

Tensor round(const Tensor &a, std::optional<int64_t> decimals) {
  Tensor out = kiln::ops::round(a, decimals);
  if (isFloating(out.dtype()))
    record("RoundBackward0", {&a}, out, [&](const NodePtr &) {
      return [](B &b, const Node &, Grads &g) { return Grads{rules::flat(b, g[0])}; };
    });
  return out;
}

Tensor nanToNum(const Tensor &a, std::optional<double> nan, std::optional<double> posinf,
                std::optional<double> neginf) {
  return unaryFromInput(
      "NanToNumBackward0", a, kiln::ops::nanToNum(a, nan, posinf, neginf),
      [](B &b, const Tensor &g, const Tensor &x) { return rules::nanToNum(b, g, x); });
}

Tensor celu(const Tensor &a, double alpha) {
  return unaryFromInput(
      "CeluBackward0", a, kiln::ops::celu(a, alpha),
      [alpha](B &b, const Tensor &g, const Tensor &x) { return rules::celu(b, g, x, alpha); });
}

Tensor hardshrink(const Tensor &a, double lambd) {
  return unaryFromInput(
      "HardshrinkBackward0", a, kiln::ops::hardshrink(a, lambd),
      [lambd](B &b, const Tensor &g, const Tensor &x) { return rules::shrink(b, g, x, lambd); });
}

Tensor softshrink(const Tensor &a, double lambd) {
  return unaryFromInput(
      "SoftshrinkBackward0", a, kiln::ops::softshrink(a, lambd),
      [lambd](B &b, const Tensor &g, const Tensor &x) { return rules::shrink(b, g, x, lambd); });
}

Tensor threshold(const Tensor &a, const Scalar &threshold, const Scalar &value) {
  double th = threshold.toDouble();
  return unaryFromInput(
      "ThresholdBackward0", a, kiln::ops::threshold(a, threshold, value),
      [th](B &b, const Tensor &g, const Tensor &x) { return rules::threshold(b, g, x, th); });
}

Tensor atan2(const Tensor &a, const Tensor &b) {
  return binaryRule("Atan2Backward0", a, b, kiln::ops::atan2(a, b),
                    [](B &bd, const Tensor &g, const Tensor &x, const Tensor &y, const Tensor &) {
                      return rules::atan2(bd, g, x, y);
                    });
}

Tensor hypot(const Tensor &a, const Tensor &b) {
  return binaryRule("HypotBackward0", a, b, kiln::ops::hypot(a, b),
                    [](B &bd, const Tensor &g, const Tensor &x, const Tensor &y, const Tensor &h) {
                      return rules::hypot(bd, g, x, y, h);
                    });
}

Tensor fmax(const Tensor &a, const Tensor &b) {
  return binaryRule("FmaxBackward0", a, b, kiln::ops::fmax(a, b),
                    [](B &bd, const Tensor &g, const Tensor &x, const Tensor &y, const Tensor &) {
                      return rules::fmaxFmin(bd, g, x, y, true);
                    });
}

Tensor fmin(const Tensor &a, const Tensor &b) {
  return binaryRule("FminBackward0", a, b, kiln::ops::fmin(a, b),
                    [](B &bd, const Tensor &g, const Tensor &x, const Tensor &y, const Tensor &) {
                      return rules::fmaxFmin(bd, g, x, y, false);
                    });
}

Tensor fmod(const Tensor &a, const Tensor &b) {
  return binaryRule("FmodBackward1", a, b, kiln::ops::fmod(a, b),
                    [](B &bd, const Tensor &g, const Tensor &x, const Tensor &y, const Tensor &) {
                      return rules::remainder(bd, g, x, y, false);
                    });
}

Tensor remainder(const Tensor &a, const Tensor &b) {
  return binaryRule("RemainderBackward1", a, b, kiln::ops::remainder(a, b),
                    [](B &bd, const Tensor &g, const Tensor &x, const Tensor &y, const Tensor &) {
                      return rules::remainder(bd, g, x, y, true);
                    });
}

Tensor floatPower(const Tensor &a, const Tensor &b) {
  Tensor out = kiln::ops::floatPower(a, b);
  record("PowBackward1", {&a, &b}, out, [&](const NodePtr &self) {
    return [sa = SavedTensor(a), sb = SavedTensor(b),
            so = SavedTensor(out, self)](B &bd, const Node &n, Grads &g) {
      Tensor x = sa.unpack(n).to(DType::Float64), y = sb.unpack(n).to(DType::Float64);
      Grads r = rules::pow(bd, g[0], x, y, so.unpack(n), Needs::of(n));
      if (r[0].defined())
        r[0] = bd.cast(r[0], sa.unpack(n).dtype());
      if (r[1].defined())
        r[1] = bd.cast(r[1], sb.unpack(n).dtype());
      return r;
    };
  });
  return out;
}

namespace {
/// addcmul or (divide) addcdiv: the eager kernel, recorded with the one rule both share.
Tensor addc(bool divide, const Tensor &self, const Tensor &t1, const Tensor &t2,
            const Scalar &value) {
  Tensor out =
      divide ? kiln::ops::addcdiv(self, t1, t2, value) : kiln::ops::addcmul(self, t1, t2, value);
  record(divide ? "AddcdivBackward0" : "AddcmulBackward0", {&self, &t1, &t2}, out,
         [&](const NodePtr &) {
           return [x = rules::infoOf<B>(self), s1 = SavedTensor(t1), s2 = SavedTensor(t2),
                   v = value.toDouble(), divide](B &bd, const Node &n, Grads &g) {
             return rules::addcmul(bd, g[0], x, s1.unpack(n), s2.unpack(n), v, divide,
                                   Needs::of(n));
           };
         });
  return out;
}
} // namespace

Tensor addcmul(const Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value) {
  return addc(false, self, t1, t2, value);
}

Tensor addcdiv(const Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value) {
  return addc(true, self, t1, t2, value);
}

Tensor lerp(const Tensor &a, const Tensor &end, const Tensor &weight) {
  Tensor out = kiln::ops::lerp(a, end, weight);
  record("LerpBackward1", {&a, &end, &weight}, out, [&](const NodePtr &) {
    return [sa = SavedTensor(a), se = SavedTensor(end),
            sw = SavedTensor(weight)](B &bd, const Node &n, Grads &g) {
      Tensor x = sa.unpack(n), e = se.unpack(n), w = sw.unpack(n);
      // A number weight's 1 - w is taken in double, as torch's Scalar (not in the default
      // dtype two wrapped numbers promote to).
      Tensor keep = w.isWrappedNumber() ? Tensor::wrapScalar(Scalar(1.0 - w.item().toDouble()))
                                        : bd.rsubScalar(w, 1.0);
      Grads r = rules::lerp(bd, g[0], x, e, w, keep, Needs::of(n));
      const Tensor *operands[] = {&x, &e, &w};
      for (size_t k = 0; k < 3; ++k)
        if (r[k].defined())
          r[k] = bd.reduceTo(r[k], operands[k]->sizes(), operands[k]->dtype());
      return r;
    };
  });
  return out;
}

} // namespace kiln::autograd::ops

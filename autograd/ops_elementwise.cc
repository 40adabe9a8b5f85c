// Differentiable elementwise ops: the kernel, then the rule of derivatives.h when recording.
#include "autograd/derivatives.h"
#include "autograd/ops.h"
#include "autograd/record.h"

namespace kiln::autograd::ops {
namespace {
using rules::infoOf;
using rules::Needs;
using B = EagerBuilder;

double toDouble(const Scalar &s) { return s.toDouble(); }

/// Records a binary op whose rule reads both inputs.
template <class RuleFn>
Tensor binary(const char *name, const Tensor &a, const Tensor &b, Tensor out, RuleFn rule) {
  record(name, {&a, &b}, out, [&](const NodePtr &) {
    return [sa = SavedTensor(a), sb = SavedTensor(b), rule](B &bd, const Node &n, Grads &g) {
      return rule(bd, g[0], sa.unpack(n), sb.unpack(n), Needs::of(n));
    };
  });
  return out;
}
} // namespace

Tensor add(const Tensor &a, const Tensor &b, const Scalar &alpha) {
  Tensor out = kiln::ops::add(a, b, alpha);
  record("AddBackward0", {&a, &b}, out, [&](const NodePtr &) {
    return
        [x = infoOf<B>(a), y = infoOf<B>(b), al = toDouble(alpha)](B &bd, const Node &n, Grads &g) {
          return rules::add(bd, g[0], x, y, al, Needs::of(n));
        };
  });
  return out;
}

Tensor sub(const Tensor &a, const Tensor &b, const Scalar &alpha) {
  Tensor out = kiln::ops::sub(a, b, alpha);
  record("SubBackward0", {&a, &b}, out, [&](const NodePtr &) {
    return
        [x = infoOf<B>(a), y = infoOf<B>(b), al = toDouble(alpha)](B &bd, const Node &n, Grads &g) {
          return rules::add(bd, g[0], x, y, -al, Needs::of(n));
        };
  });
  return out;
}

Tensor mul(const Tensor &a, const Tensor &b) {
  return binary("MulBackward0", a, b, kiln::ops::mul(a, b),
                [](B &bd, const Tensor &g, const Tensor &x, const Tensor &y, Needs need) {
                  return rules::mul(bd, g, x, y, need);
                });
}

Tensor div(const Tensor &a, const Tensor &b, const std::string &roundingMode) {
  Tensor out = kiln::ops::div(a, b, roundingMode);
  if (!roundingMode.empty())
    return out; // floor/trunc division is piecewise constant: no gradient, as in torch
  return binary("DivBackward0", a, b, out,
                [](B &bd, const Tensor &g, const Tensor &x, const Tensor &y, Needs need) {
                  return rules::div(bd, g, x, y, need);
                });
}

Tensor pow(const Tensor &a, const Tensor &b) {
  Tensor out = kiln::ops::pow(a, b);
  if (b.isWrappedNumber() && !a.isWrappedNumber()) {
    double s = b.item().toDouble();
    return unaryFromInput("PowBackward0", a, out, [s](B &bd, const Tensor &g, const Tensor &x) {
      return rules::powScalar(bd, g, x, s);
    });
  }
  record("PowBackward1", {&a, &b}, out, [&](const NodePtr &self) {
    return [sa = SavedTensor(a), sb = SavedTensor(b),
            so = SavedTensor(out, self)](B &bd, const Node &n, Grads &g) {
      return rules::pow(bd, g[0], sa.unpack(n), sb.unpack(n), so.unpack(n), Needs::of(n));
    };
  });
  return out;
}

Tensor maximum(const Tensor &a, const Tensor &b) {
  return binary("MaximumBackward0", a, b, kiln::ops::maximum(a, b),
                [](B &bd, const Tensor &g, const Tensor &x, const Tensor &y, Needs need) {
                  return rules::maximum(bd, g, x, y, true, need);
                });
}

Tensor minimum(const Tensor &a, const Tensor &b) {
  return binary("MinimumBackward0", a, b, kiln::ops::minimum(a, b),
                [](B &bd, const Tensor &g, const Tensor &x, const Tensor &y, Needs need) {
                  return rules::maximum(bd, g, x, y, false, need);
                });
}

Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b) {
  Tensor out = kiln::ops::where(cond, a, b);
  record("WhereBackward0", {nullptr, &a, &b}, out, [&](const NodePtr &) {
    return [sc = SavedTensor(cond), x = infoOf<B>(a), y = infoOf<B>(b)](B &bd, const Node &n,
                                                                        Grads &g) {
      return rules::where(bd, g[0], sc.unpack(n), x, y, Needs::of(n));
    };
  });
  return out;
}

Tensor clamp(const Tensor &a, const std::optional<Tensor> &lo, const std::optional<Tensor> &hi) {
  Tensor out = kiln::ops::clamp(a, lo, hi);
  const Tensor *plo = lo ? &*lo : nullptr, *phi = hi ? &*hi : nullptr;
  record("ClampBackward1", {&a, plo, phi}, out, [&](const NodePtr &) {
    return [sa = SavedTensor(a), slo = SavedTensor(lo ? *lo : Tensor()),
            shi = SavedTensor(hi ? *hi : Tensor())](B &bd, const Node &n, Grads &g) {
      std::optional<Tensor> l, h;
      if (slo.defined())
        l = slo.unpack(n);
      if (shi.defined())
        h = shi.unpack(n);
      return rules::clamp(bd, g[0], sa.unpack(n), l, h, Needs::of(n));
    };
  });
  return out;
}

Tensor maskedFill(const Tensor &self, const Tensor &mask, const Tensor &value) {
  Tensor out = kiln::ops::maskedFill(self, mask, value);
  record("MaskedFillBackward0", {&self, nullptr, &value}, out, [&](const NodePtr &) {
    return [sm = SavedTensor(mask), x = infoOf<B>(self), v = infoOf<B>(value)](B &bd, const Node &n,
                                                                               Grads &g) {
      return rules::maskedFill(bd, g[0], sm.unpack(n), x, v, Needs::of(n));
    };
  });
  return out;
}

// ---- unary -------------------------------------------------------------------------------------

#define KILN_UNARY_FROM_INPUT(fn, Name, rule)                                                      \
  Tensor fn(const Tensor &a) {                                                                     \
    return unaryFromInput(Name, a, kiln::ops::fn(a),                                               \
                          [](B &bd, const Tensor &g, const Tensor &x) { return rule; });           \
  }
#define KILN_UNARY_FROM_OUTPUT(fn, Name, rule)                                                     \
  Tensor fn(const Tensor &a) {                                                                     \
    return unaryFromOutput(Name, a, kiln::ops::fn(a),                                              \
                           [](B &bd, const Tensor &g, const Tensor &y) { return rule; });          \
  }

Tensor neg(const Tensor &a) {
  Tensor out = kiln::ops::neg(a);
  record("NegBackward0", {&a}, out, [&](const NodePtr &) {
    return [](B &bd, const Node &, Grads &g) { return Grads{rules::neg(bd, g[0])}; };
  });
  return out;
}

KILN_UNARY_FROM_INPUT(abs, "AbsBackward0", rules::abs(bd, g, x))
KILN_UNARY_FROM_INPUT(square, "PowBackward0", rules::square(bd, g, x))
KILN_UNARY_FROM_OUTPUT(reciprocal, "ReciprocalBackward0", rules::reciprocal(bd, g, y))
KILN_UNARY_FROM_OUTPUT(exp, "ExpBackward0", rules::exp(bd, g, y))
KILN_UNARY_FROM_INPUT(log, "LogBackward0", rules::log(bd, g, x))
KILN_UNARY_FROM_INPUT(log1p, "Log1PBackward0", rules::log1p(bd, g, x))
KILN_UNARY_FROM_OUTPUT(expm1, "Expm1Backward0", rules::expm1(bd, g, y))
KILN_UNARY_FROM_OUTPUT(sqrt, "SqrtBackward0", rules::sqrt(bd, g, y))
KILN_UNARY_FROM_OUTPUT(rsqrt, "RsqrtBackward0", rules::rsqrt(bd, g, y))
KILN_UNARY_FROM_INPUT(sin, "SinBackward0", rules::sin(bd, g, x))
KILN_UNARY_FROM_INPUT(cos, "CosBackward0", rules::cos(bd, g, x))
KILN_UNARY_FROM_OUTPUT(tanh, "TanhBackward0", rules::tanh(bd, g, y))
KILN_UNARY_FROM_OUTPUT(sigmoid, "SigmoidBackward0", rules::sigmoid(bd, g, y))
KILN_UNARY_FROM_INPUT(erf, "ErfBackward0", rules::erf(bd, g, x))

// ---- activations -------------------------------------------------------------------------------

KILN_UNARY_FROM_OUTPUT(relu, "ReluBackward0", rules::relu(bd, g, y))
KILN_UNARY_FROM_INPUT(silu, "SiluBackward0", rules::silu(bd, g, x))
#undef KILN_UNARY_FROM_INPUT
#undef KILN_UNARY_FROM_OUTPUT

Tensor gelu(const Tensor &a, const std::string &approximate) {
  bool tanhApprox = approximate == "tanh";
  return unaryFromInput("GeluBackward0", a, kiln::ops::gelu(a, approximate),
                        [tanhApprox](B &bd, const Tensor &g, const Tensor &x) {
                          // One fused pass unless the backward is itself recorded.
                          if (!isGradEnabled() && x.isCpu())
                            return kiln::ops::geluBackward(g, x, tanhApprox ? "tanh" : "none");
                          return rules::gelu(bd, g, x, tanhApprox);
                        });
}

Tensor softplus(const Tensor &a, double beta, double threshold) {
  return unaryFromInput("SoftplusBackward0", a, kiln::ops::softplus(a, beta, threshold),
                        [beta, threshold](B &bd, const Tensor &g, const Tensor &x) {
                          return rules::softplus(bd, g, x, beta, threshold);
                        });
}

Tensor leakyRelu(const Tensor &a, double negativeSlope) {
  return unaryFromInput("LeakyReluBackward0", a, kiln::ops::leakyRelu(a, negativeSlope),
                        [negativeSlope](B &bd, const Tensor &g, const Tensor &x) {
                          return rules::leakyRelu(bd, g, x, negativeSlope);
                        });
}

Tensor elu(const Tensor &a, double alpha) {
  Tensor out = kiln::ops::elu(a, alpha);
  record("EluBackward0", {&a}, out, [&](const NodePtr &self) {
    return
        [sa = SavedTensor(a), so = SavedTensor(out, self), alpha](B &bd, const Node &n, Grads &g) {
          return Grads{rules::elu(bd, g[0], sa.unpack(n), so.unpack(n), alpha)};
        };
  });
  return out;
}

Tensor hardtanh(const Tensor &a, const Scalar &minVal, const Scalar &maxVal) {
  double lo = minVal.toDouble(), hi = maxVal.toDouble();
  return unaryFromInput("HardtanhBackward0", a, kiln::ops::hardtanh(a, minVal, maxVal),
                        [lo, hi](B &bd, const Tensor &g, const Tensor &x) {
                          return rules::hardtanh(bd, g, x, lo, hi);
                        });
}

Tensor relu6(const Tensor &a) { return hardtanh(a, Scalar(0.0), Scalar(6.0)); }

Tensor dropout(const Tensor &input, double p, bool train, Generator *gen) {
  if (!train || p == 0.0 || !anyRequiresGrad({&input}))
    return kiln::ops::dropout(input, p, train, gen);
  if (onDevice({&input})) {
    Tensor out = kiln::ops::dropout(input, p, train, gen);
    recordUnsupportedOnDevice("dropout", {&input}, out);
    return out;
  }
  // The same draws as the kernel's; the product's rule multiplies the gradient by the mask.
  return mul(input, kiln::ops::dropoutMask(input, p, gen).to(input.device()));
}

} // namespace kiln::autograd::ops

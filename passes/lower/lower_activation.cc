// The bodies of activations (see elementwise_bodies.h), each the expression of its eager kernel
// in runtime/ops/activation.cc.

#include "passes/lower/elementwise_bodies.h"

#include "runtime/error.h"

namespace kiln::passes::lower {

using ir::OpKind;
using ir::loop::Ops;
using ir::loop::Val;

namespace {

constexpr double kSqrtHalf = 0.70710678118654752440;      // 1/sqrt(2), gelu's erf form
constexpr double kSqrtTwoOverPi = 0.79788456080286535588; // sqrt(2/pi), gelu's tanh form
constexpr double kGeluCubic = 0.044715;

constexpr auto c = constantLike; // short: the bodies read like the math

Val gelu(Ops &ops, Val x, const std::string &approximate) {
  Val half = c(ops, x, 0.5), one = c(ops, x, 1.0);
  if (approximate == "tanh") {
    Val cube = x * x * x;
    Val inner = c(ops, x, kSqrtTwoOverPi) * (x + c(ops, x, kGeluCubic) * cube);
    return half * x * (one + ops.tanh(inner));
  }
  return half * x * (one + ops.erf(x * c(ops, x, kSqrtHalf)));
}

/// scale * (x > 0 ? x : alpha * (exp(x * inputScale) - 1)), with expm1 and alpha * scale folded
/// first, as eager's elu family computes it.
Val eluBody(Ops &ops, Val x, double alpha, double scale, double inputScale) {
  Val zero = c(ops, x, 0.0);
  return ops.where(ops.gt(x, zero), x * c(ops, x, scale),
                   ops.expm1(x * c(ops, x, inputScale)) * c(ops, x, alpha * scale));
}

/// min(max(x + 3, 0), 6) / 6.
Val relu6Shifted(Ops &ops, Val x) {
  Val clamped = ops.minimum(ops.maximum(x + c(ops, x, 3.0), c(ops, x, 0.0)), c(ops, x, 6.0));
  return clamped / c(ops, x, 6.0);
}

Val softplus(Ops &ops, Val x, double beta, double threshold) {
  Val b = c(ops, x, beta), z = x * b;
  return ops.where(ops.gt(z, c(ops, x, threshold)), x, ops.log1p(ops.exp(z)) / b);
}

/// Eager's bounds: NaN stays NaN, then x < lo ? lo : (x > hi ? hi : x).
Val hardtanh(Ops &ops, Val x, double lo, double hi) {
  Val l = castConstant(ops, lo, x.dtype()), h = castConstant(ops, hi, x.dtype());
  Val clamped = ops.where(ops.lt(x, l), l, ops.where(ops.gt(x, h), h, x));
  return isFloating(x.dtype()) ? ops.where(ops.ne(x, x), x, clamped) : clamped;
}

} // namespace

bool isActivation(OpKind op) {
  switch (op) {
  case OpKind::Relu:
  case OpKind::Gelu:
  case OpKind::Silu:
  case OpKind::Softplus:
  case OpKind::Mish:
  case OpKind::Elu:
  case OpKind::Celu:
  case OpKind::LeakyRelu:
  case OpKind::Hardtanh:
  case OpKind::Hardsigmoid:
  case OpKind::Hardswish:
  case OpKind::LogSigmoid:
  case OpKind::Softsign:
  case OpKind::Tanhshrink:
  case OpKind::Hardshrink:
  case OpKind::Softshrink:
  case OpKind::Threshold:
    return true;
  default:
    return false;
  }
}

std::string activationUnsupported(const ir::Node &n, DType compute) {
  OpKind op = n.op();
  switch (op) {
  case OpKind::Relu:
  case OpKind::Softsign:
  case OpKind::Tanhshrink:
  case OpKind::Threshold:
  case OpKind::Gelu:
  case OpKind::Silu:
    if (compute == DType::Bool)
      return "bool operands are not supported by this op";
    break;
  case OpKind::Hardtanh: {
    double lo = numberAttr(n, "min_val", -1.0), hi = numberAttr(n, "max_val", 1.0);
    if (compute == DType::Bool)
      return "bool operands are not supported by this op";
    if (lo > hi)
      return "hardtanh's min_val is greater than its max_val";
    if (compute == DType::UInt8 && lo < 0)
      return "an unsigned hardtanh with negative limits";
    break;
  }
  case OpKind::Softshrink:
    if (numberAttr(n, "lambd", 0.5) < 0)
      return "softshrink's lambd is negative";
    [[fallthrough]];
  default: // the float-only activations
    if (!isFloating(compute))
      return std::string(n.keyword()) + " takes floating operands only";
  }
  if (op == OpKind::Gelu) {
    const ir::Attribute *a = n.attr("approximate");
    if (a && a->toString() != "none" && a->toString() != "tanh")
      return "gelu's 'approximate' must be \"none\" or \"tanh\"";
  }
  return {};
}

Val activationBody(Ops &ops, const ir::Node &n, Val x) {
  Val zero = c(ops, x, 0.0), one = c(ops, x, 1.0);
  switch (n.op()) {
  case OpKind::Relu:
    return ops.maximum(x, zero);
  case OpKind::Gelu: {
    const ir::Attribute *a = n.attr("approximate");
    return gelu(ops, x, a ? a->toString() : "none");
  }
  case OpKind::Silu:
    return x * ops.sigmoid(x);
  case OpKind::Softplus:
    return softplus(ops, x, numberAttr(n, "beta", 1.0), numberAttr(n, "threshold", 20.0));
  case OpKind::Mish:
    return x * ops.tanh(ops.log1p(ops.exp(x)));
  case OpKind::Elu:
    return eluBody(ops, x, numberAttr(n, "alpha", 1.0), numberAttr(n, "scale", 1.0),
                   numberAttr(n, "input_scale", 1.0));
  case OpKind::Celu: {
    double alpha = numberAttr(n, "alpha", 1.0);
    return eluBody(ops, x, alpha, 1.0, 1.0 / alpha);
  }
  case OpKind::LeakyRelu:
    return ops.where(ops.gt(x, zero), x, x * c(ops, x, numberAttr(n, "negative_slope", 0.01)));
  case OpKind::Hardtanh:
    return hardtanh(ops, x, numberAttr(n, "min_val", -1.0), numberAttr(n, "max_val", 1.0));
  case OpKind::Hardsigmoid:
    return relu6Shifted(ops, x);
  case OpKind::Hardswish:
    return x * relu6Shifted(ops, x);
  case OpKind::LogSigmoid:
    return ops.minimum(x, zero) - ops.log1p(ops.exp(-ops.abs(x)));
  case OpKind::Softsign:
    return x / (one + ops.abs(x));
  case OpKind::Tanhshrink:
    return x - ops.tanh(x);
  case OpKind::Hardshrink: {
    Val l = c(ops, x, numberAttr(n, "lambd", 0.5));
    return ops.where(ops.bitwiseAnd(ops.ge(x, -l), ops.le(x, l)), zero, x);
  }
  case OpKind::Softshrink: { // NaN stays NaN
    Val l = c(ops, x, numberAttr(n, "lambd", 0.5));
    return ops.where(ops.gt(x, l), x - l,
                     ops.where(ops.lt(x, -l), x + l, ops.where(ops.ne(x, x), x, zero)));
  }
  case OpKind::Threshold: // x <= threshold ? value : x (NaN stays)
    return ops.where(ops.le(x, castConstant(ops, numberAttr(n, "threshold", 0), x.dtype())),
                     castConstant(ops, numberAttr(n, "value", 0), x.dtype()), x);
  default:
    fail(ErrorKind::Runtime, "lowering: '{}' is not an activation", n.keyword());
  }
}

} // namespace kiln::passes::lower

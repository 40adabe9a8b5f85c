// The bodies of the elementwise math families: the unary math functions, rounding,
// predicates, logical and bitwise ops, clamp and nan_to_num, and the binary ops (see
// elementwise_bodies.h). Activations are in lower_activation.cc.

#include "passes/lower/elementwise_bodies.h"

#include "ir/loop/prim_eval.h"
#include "runtime/error.h"

#include <cmath>
#include <limits>

namespace kiln::passes::lower {

using ir::OpKind;
using ir::loop::Ops;
using ir::loop::Val;

Val activationBody(Ops &ops, const ir::Node &n, Val x); // lower_activation.cc
bool isActivation(OpKind op);                           // lower_activation.cc
std::string activationUnsupported(const ir::Node &n, DType compute);

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The largest finite value of a floating dtype (nan_to_num's default for +inf).
double largestFinite(DType t) {
  switch (t) {
  case DType::Float16:
    return 65504.0;
  case DType::BFloat16:
    return 3.3895313892515355e38;
  case DType::Float32:
    return std::numeric_limits<float>::max();
  default:
    return std::numeric_limits<double>::max();
  }
}

/// round(x, decimals): half to even, at `decimals` places (eager's scaling: x * 10^d, or
/// x / 10^-d for negative d).
Val roundBody(Ops &ops, const ir::Node &n, Val x) {
  if (!isFloating(x.dtype()))
    return x;
  int64_t decimals = static_cast<int64_t>(numberAttr(n, "decimals", 0));
  if (decimals == 0)
    return ops.roundEven(x);
  Val scale = constantLike(ops, x, std::pow(10.0, static_cast<double>(std::abs(decimals))));
  return decimals > 0 ? ops.roundEven(x * scale) / scale : ops.roundEven(x / scale) * scale;
}

/// A predicate of floating values; integers are never NaN or infinite.
Val floatPredicate(Ops &ops, OpKind op, Val x) {
  bool fl = isFloating(x.dtype());
  Val inf = fl ? constantLike(ops, x, kInf) : Val();
  switch (op) {
  case OpKind::Isnan:
    return fl ? ops.ne(x, x) : ops.constant(false);
  case OpKind::Isinf:
    return fl ? ops.eq(ops.abs(x), inf) : ops.constant(false);
  case OpKind::Isfinite:
    return fl ? ops.lt(ops.abs(x), inf) : ops.constant(true);
  case OpKind::Isposinf:
    return fl ? ops.eq(x, inf) : ops.constant(false);
  case OpKind::Isneginf:
    return fl ? ops.eq(x, -inf) : ops.constant(false);
  default: // signbit: the sign bit of floats (-0.0 and -NaN included), x < 0 for signed ints
    if (fl)
      return ops.lt(ops.copySign(constantLike(ops, x, 1.0), x), constantLike(ops, x, 0.0));
    if (x.dtype() == DType::Bool || x.dtype() == DType::UInt8)
      return ops.constant(false);
    return ops.lt(x, constantLike(ops, x, 0.0));
  }
}

Val nanToNum(Ops &ops, const ir::Node &n, Val x, DType result) {
  if (!isFloating(x.dtype()))
    return x;
  Val nan = constantLike(ops, x, numberAttr(n, "nan", 0.0));
  Val pos = constantLike(ops, x, numberAttr(n, "posinf", largestFinite(result)));
  Val neg = constantLike(ops, x, numberAttr(n, "neginf", -largestFinite(result)));
  Val inf = constantLike(ops, x, kInf);
  return ops.where(ops.ne(x, x), nan,
                   ops.where(ops.eq(x, inf), pos, ops.where(ops.eq(x, -inf), neg, x)));
}

/// Clamps to the bounds that are present, NaN staying NaN (maximum and minimum propagate it).
Val clampBody(Ops &ops, const ir::Node &n, Val x, const char *lo, const char *hi) {
  if (n.attr(lo))
    x = ops.maximum(x, castConstant(ops, numberAttr(n, lo, 0), x.dtype()));
  if (n.attr(hi))
    x = ops.minimum(x, castConstant(ops, numberAttr(n, hi, 0), x.dtype()));
  return x;
}

/// C's fmod / integer %: the remainder of truncating division, with the dividend's sign.
Val fmodBody(Ops &ops, Val a, Val b) {
  if (isFloating(a.dtype()))
    return ops.fmod(a, b);
  Val r = ops.mod(a, b), zero = constantLike(ops, a, 0.0);
  if (a.dtype() == DType::UInt8)
    return r;
  Val fix = ops.bitwiseAnd(ops.ne(r, zero), ops.ne(ops.lt(r, zero), ops.lt(a, zero)));
  return ops.where(fix, r - b, r);
}

/// hypot as std::hypot: an infinite operand wins over NaN, and the squares neither overflow nor
/// underflow (narrower floats are squared in double precision, doubles scaled by the larger
/// magnitude first).
Val hypotBody(Ops &ops, Val a, Val b) {
  DType t = a.dtype();
  Val inf = constantLike(ops, a, kInf);
  Val infinite = ops.bitwiseOr(ops.eq(ops.abs(a), inf), ops.eq(ops.abs(b), inf));
  Val r;
  if (t != DType::Float64) {
    Val x = ops.cast(a, DType::Float64), y = ops.cast(b, DType::Float64);
    r = ops.cast(ops.sqrt(x * x + y * y), t);
  } else {
    Val m = ops.maximum(ops.abs(a), ops.abs(b)), n = ops.minimum(ops.abs(a), ops.abs(b));
    Val zero = constantLike(ops, a, 0.0), one = constantLike(ops, a, 1.0);
    Val q = n / ops.where(ops.eq(m, zero), one, m);
    r = m * ops.sqrt(one + q * q);
  }
  return ops.where(infinite, inf, r);
}

/// fmax/fmin: a NaN operand loses to the other.
Val nanIgnoring(Ops &ops, Val a, Val b, bool max) {
  Val m = max ? ops.maximum(a, b) : ops.minimum(a, b);
  if (!isFloating(a.dtype()))
    return m;
  return ops.where(ops.ne(a, a), b, ops.where(ops.ne(b, b), a, m));
}

bool floatOnly(OpKind op) {
  switch (op) {
  case OpKind::Frac:
  case OpKind::Hypot:
  case OpKind::Lerp:
    return true;
  default:
    return false;
  }
}

bool rejectsBool(OpKind op) {
  switch (op) {
  case OpKind::Neg:
  case OpKind::Abs:
  case OpKind::Sub:
  case OpKind::Div:
  case OpKind::Pow:
  case OpKind::FloorDivide:
  case OpKind::Remainder:
  case OpKind::Fmod:
  case OpKind::Clamp:
  case OpKind::Relu:
  case OpKind::BitwiseLeftShift:
  case OpKind::BitwiseRightShift:
    return true;
  default:
    return false;
  }
}

} // namespace

Val castConstant(Ops &ops, double v, DType dtype) {
  if (isFloating(dtype))
    return ops.constant(v, dtype);
  ir::loop::Elem e = ir::loop::convert({v, 0}, DType::Float64, dtype); // eager's cast rule
  return dtype == DType::Bool ? ops.constant(e.i != 0) : ops.constant(e.i, dtype);
}

Val constantLike(Ops &ops, const Val &x, double v) { return ops.constant(v, x.dtype()); }

double numberAttr(const ir::Node &n, std::string_view name, double fallback) {
  const ir::Attribute *a = n.attr(name);
  if (!a)
    return fallback;
  if (a->is<bool>())
    return a->toBool() ? 1.0 : 0.0;
  return a->toDouble();
}

std::string elementwiseUnsupported(const ir::Node &n, DType compute) {
  OpKind op = n.op();
  if (isActivation(op))
    return activationUnsupported(n, compute);
  if (floatOnly(op) && !isFloating(compute))
    return std::string(n.keyword()) + " takes floating operands only";
  if (rejectsBool(op) && compute == DType::Bool)
    return "bool operands are not supported by this op";
  if (op == OpKind::Round && n.attr("decimals") && !isFloating(compute))
    return "round(decimals=...) takes floating operands only";
  return {};
}

Val unaryBody(Ops &ops, const ir::Node &n, Val x, DType result) {
  OpKind op = n.op();
  if (isActivation(op))
    return activationBody(ops, n, x);
  switch (op) {
  case OpKind::Neg:
    return -x;
  case OpKind::Abs:
    return ops.abs(x);
  case OpKind::Exp:
    return ops.exp(x);
  case OpKind::Log:
    return ops.log(x);
  case OpKind::Sqrt:
    return ops.sqrt(x);
  case OpKind::Rsqrt:
    return ops.rsqrt(x);
  case OpKind::Tanh:
    return ops.tanh(x);
  case OpKind::Sigmoid:
    return ops.sigmoid(x);
  case OpKind::Erf:
    return ops.erf(x);
  case OpKind::Erfc:
    return ops.erfc(x);
  case OpKind::Sin:
    return ops.sin(x);
  case OpKind::Cos:
    return ops.cos(x);
  case OpKind::Tan:
    return ops.tan(x);
  case OpKind::Asin:
    return ops.asin(x);
  case OpKind::Acos:
    return ops.acos(x);
  case OpKind::Atan:
    return ops.atan(x);
  case OpKind::Sinh:
    return ops.sinh(x);
  case OpKind::Cosh:
    return ops.cosh(x);
  case OpKind::Asinh:
    return ops.asinh(x);
  case OpKind::Acosh:
    return ops.acosh(x);
  case OpKind::Atanh:
    return ops.atanh(x);
  case OpKind::Log1p:
    return ops.log1p(x);
  case OpKind::Expm1:
    return ops.expm1(x);
  case OpKind::Exp2:
    return ops.exp2(x);
  case OpKind::Log2:
    return ops.log2(x);
  case OpKind::Log10:
    return ops.log10(x);
  case OpKind::Reciprocal:
    return constantLike(ops, x, 1.0) / x;
  case OpKind::Floor:
    return isFloating(x.dtype()) ? ops.floor(x) : x;
  case OpKind::Ceil:
    return isFloating(x.dtype()) ? ops.ceil(x) : x;
  case OpKind::Trunc:
    return isFloating(x.dtype()) ? ops.trunc(x) : x;
  case OpKind::Round:
    return roundBody(ops, n, x);
  case OpKind::Frac:
    return x - ops.trunc(x);
  case OpKind::Sign: { // (0 < x) - (x < 0): 0 for NaN and both zeros
    if (x.dtype() == DType::Bool)
      return x;
    Val zero = constantLike(ops, x, 0.0);
    return ops.cast(ops.lt(zero, x), x.dtype()) - ops.cast(ops.lt(x, zero), x.dtype());
  }
  case OpKind::Isnan:
  case OpKind::Isinf:
  case OpKind::Isfinite:
  case OpKind::Isposinf:
  case OpKind::Isneginf:
  case OpKind::Signbit:
    return floatPredicate(ops, op, x);
  case OpKind::LogicalNot:
    return x.dtype() == DType::Bool ? ops.bitwiseNot(x) : ops.eq(x, constantLike(ops, x, 0.0));
  case OpKind::BitwiseNot:
    return ops.bitwiseNot(x);
  case OpKind::NanToNum:
    return nanToNum(ops, n, x, result);
  case OpKind::Clamp:
    return clampBody(ops, n, x, "min", "max");
  default:
    fail(ErrorKind::Runtime, "lowering: '{}' has no unary body", n.keyword());
  }
}

namespace {

/// a << b or a >> b as eager's kernel (runtime/ops/bitwise.cc) computes it: a count outside
/// [0, bits) (bits - 1 for a signed right shift; a uint8 count read as int8, as eager's cast)
/// gives 0, or the sign for a signed right shift. In int64: a times or floor-divided by 2^b,
/// which wraps and rounds as the shift does.
Val shiftBody(Ops &ops, Val a, Val b, bool left) {
  DType t = a.dtype();
  bool isSigned = t != DType::UInt8;
  int64_t bits = static_cast<int64_t>(itemsize(t)) * 8;
  int64_t limit = left || !isSigned ? bits : bits - 1;
  Val x = ops.cast(a, DType::Int64);
  Val y = ops.cast(t == DType::UInt8 ? ops.cast(b, DType::Int8) : b, DType::Int64);
  Val zero = ops.constant(int64_t{0}, DType::Int64);
  Val inRange = ops.bitwiseAnd(ops.ge(y, zero), ops.lt(y, ops.constant(limit, DType::Int64)));
  Val power = ops.pow(ops.constant(int64_t{2}, DType::Int64), ops.where(inRange, y, zero));
  Val shifted = left ? x * power : ops.floorDiv(x, power);
  Val outside = left || !isSigned
                    ? zero
                    : ops.where(ops.lt(x, zero), ops.constant(int64_t{-1}, DType::Int64), zero);
  return ops.cast(ops.where(inRange, shifted, outside), t);
}

} // namespace

Val binaryBody(Ops &ops, const ir::Node &n, Val a, Val b) {
  bool logical = a.dtype() == DType::Bool; // torch: add/mul/max/min of bools are or/and
  switch (n.op()) {
  case OpKind::Add:
    return logical ? ops.bitwiseOr(a, b) : a + b;
  case OpKind::Sub:
    return a - b;
  case OpKind::Mul:
    return logical ? ops.bitwiseAnd(a, b) : a * b;
  case OpKind::Div:
    return a / b;
  case OpKind::Pow:
    return ops.pow(a, b);
  case OpKind::Maximum:
    return ops.maximum(a, b);
  case OpKind::Minimum:
    return ops.minimum(a, b);
  case OpKind::Fmax:
    return nanIgnoring(ops, a, b, true);
  case OpKind::Fmin:
    return nanIgnoring(ops, a, b, false);
  case OpKind::FloorDivide:
    return ops.floorDiv(a, b);
  case OpKind::Remainder:
    return ops.mod(a, b);
  case OpKind::Fmod:
    return fmodBody(ops, a, b);
  case OpKind::Atan2:
    return ops.atan2(a, b);
  case OpKind::Hypot:
    return hypotBody(ops, a, b);
  case OpKind::Copysign:
    return ops.copySign(a, b);
  case OpKind::Eq:
    return ops.eq(a, b);
  case OpKind::Ne:
    return ops.ne(a, b);
  case OpKind::Lt:
    return ops.lt(a, b);
  case OpKind::Le:
    return ops.le(a, b);
  case OpKind::Gt:
    return ops.gt(a, b);
  case OpKind::Ge:
    return ops.ge(a, b);
  case OpKind::LogicalAnd:
    return ops.bitwiseAnd(ops.cast(a, DType::Bool), ops.cast(b, DType::Bool));
  case OpKind::LogicalOr:
    return ops.bitwiseOr(ops.cast(a, DType::Bool), ops.cast(b, DType::Bool));
  case OpKind::LogicalXor:
    return ops.bitwiseXor(ops.cast(a, DType::Bool), ops.cast(b, DType::Bool));
  case OpKind::BitwiseAnd:
    return ops.bitwiseAnd(a, b);
  case OpKind::BitwiseOr:
    return ops.bitwiseOr(a, b);
  case OpKind::BitwiseXor:
    return ops.bitwiseXor(a, b);
  case OpKind::BitwiseLeftShift:
  case OpKind::BitwiseRightShift:
    return shiftBody(ops, a, b, n.op() == OpKind::BitwiseLeftShift);
  default:
    fail(ErrorKind::Runtime, "lowering: '{}' has no binary body", n.keyword());
  }
}

Val lerpBody(Ops &ops, Val start, Val end, Val weight) {
  Val half = constantLike(ops, weight, 0.5), one = constantLike(ops, weight, 1.0);
  Val diff = end - start;
  return ops.where(ops.lt(ops.abs(weight), half), start + weight * diff,
                   end - diff * (one - weight));
}

} // namespace kiln::passes::lower

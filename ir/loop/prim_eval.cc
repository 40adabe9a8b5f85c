// The scalar semantics of prims and casts (see prim_eval.h), written after the eager kernels of
// runtime/ops (elementwise.cc, minmax.cc, pow.cc, unary_math.cc) and runtime/copy.h.

#include "ir/loop/prim_eval.h"

#include "runtime/error.h"
#include "runtime/fast_math.h"
#include "runtime/half.h"
#include "runtime/philox.h"

#include <cmath>
#include <limits>

namespace kiln::ir::loop {

namespace {

/// torch's div_floor for floating types, in the compute type T.
template <typename T> T floorDivFloat(T a, T b) {
  if (b == 0)
    return a / b;
  T m = std::fmod(a, b);
  T d = (a - m) / b;
  if (m != 0 && (b < 0) != (m < 0))
    d -= T(1);
  if (d == 0)
    return std::copysign(T(0), a / b);
  T f = std::floor(d);
  return d - f > T(0.5) ? f + T(1) : f;
}

template <typename T> T modFloat(T a, T b) {
  T r = std::fmod(a, b);
  return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;
}

/// The math functions of the prims: std's, except where the eager float32 kernels use the
/// vectorizable ones of runtime/fast_math.h (folding and the interpreter give their results).
namespace primmath {
using namespace std; // NOLINT: the math functions without an override
inline float exp(float x) { return ::kiln::ops::detail::fastExp(x); }
inline double exp(double x) { return std::exp(x); }
inline float erf(float x) { return ::kiln::ops::detail::fastErf(x); }
inline double erf(double x) { return std::erf(x); }
inline float tanh(float x) { return std::copysign(::kiln::ops::detail::fastTanh(x), x); }
inline double tanh(double x) { return std::tanh(x); }
} // namespace primmath

/// A floating prim in compute type T (float or double), with the kernels' expressions.
template <typename T> T evalFloat(ExprKind kind, T a, T b) {
  switch (kind) {
  case ExprKind::Neg:
    return -a;
  case ExprKind::Abs:
    return std::fabs(a);
  case ExprKind::Rsqrt:
    return T(1) / std::sqrt(a);
  case ExprKind::Sigmoid:
    return T(1) / (T(1) + primmath::exp(-a));
#define KILN_MATH_CALL_1(C) primmath::C(a)
#define KILN_MATH_CALL_2(C) primmath::C(a, b)
#define KILN_LOOP_MATH(E, M, K, N, MLIR, C, COST)                                                  \
  case ExprKind::E:                                                                                \
    return KILN_MATH_CALL_##N(C);
#include "ir/loop/loop.def"
#undef KILN_MATH_CALL_1
#undef KILN_MATH_CALL_2
  case ExprKind::Add:
    return a + b;
  case ExprKind::Sub:
    return a - b;
  case ExprKind::Mul:
    return a * b;
  case ExprKind::Div:
    return a / b;
  case ExprKind::FloorDiv:
    return floorDivFloat(a, b);
  case ExprKind::Mod:
    return modFloat(a, b);
  case ExprKind::Pow:
    return std::pow(a, b);
  case ExprKind::Max: // NaN-propagating; on ties (0.0 and -0.0) the second operand
    return a > b || a != a ? a : b;
  case ExprKind::Min:
    return a < b || a != a ? a : b;
  default:
    fail(ErrorKind::Runtime, "{} has no floating semantics", exprKeyword(kind));
  }
}

uint64_t bits(int64_t v) { return static_cast<uint64_t>(v); }
int64_t fromBits(uint64_t v) { return static_cast<int64_t>(v); }

/// Integer a ** b by squaring, wrapping; a negative exponent gives 1/a truncated (torch's powi).
int64_t powInt(int64_t a, int64_t b) {
  if (b < 0)
    return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t result = 1, base = bits(a);
  for (uint64_t e = bits(b); e != 0; e >>= 1, base *= base)
    if (e & 1)
      result *= base;
  return fromBits(result);
}

/// An integer prim on int64 values, wrapping (the caller narrows to the dtype's width, which
/// commutes with the ring operations and is exact for the rest on in-range operands).
int64_t evalInt(ExprKind kind, int64_t a, int64_t b, DType t) {
  switch (kind) {
  case ExprKind::Neg:
    return fromBits(0 - bits(a));
  case ExprKind::Abs:
    return a < 0 ? fromBits(0 - bits(a)) : a;
  case ExprKind::Add:
    return fromBits(bits(a) + bits(b));
  case ExprKind::Sub:
    return fromBits(bits(a) - bits(b));
  case ExprKind::Mul:
    return fromBits(bits(a) * bits(b));
  case ExprKind::FloorDiv:
  case ExprKind::Mod: {
    if (b == -1) // no overflow trap for INT64_MIN / -1: it wraps
      return kind == ExprKind::FloorDiv ? fromBits(0 - bits(a)) : 0;
    int64_t q = a / b, r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) {
      q -= 1;
      r += b;
    }
    return kind == ExprKind::FloorDiv ? q : r;
  }
  case ExprKind::Pow:
    return powInt(a, b);
  case ExprKind::Max:
    return a > b ? a : b;
  case ExprKind::Min:
    return a < b ? a : b;
  case ExprKind::Not:
    return t == DType::Bool ? !a : ~a;
  case ExprKind::And:
    return a & b;
  case ExprKind::Or:
    return a | b;
  case ExprKind::Xor:
    return a ^ b;
  default:
    fail(ErrorKind::Runtime, "{} has no integer semantics", exprKeyword(kind));
  }
}

template <typename T> bool compare(ExprKind kind, T a, T b) {
  switch (kind) {
  case ExprKind::Eq:
    return a == b;
  case ExprKind::Ne:
    return a != b;
  case ExprKind::Lt:
    return a < b;
  case ExprKind::Le:
    return a <= b;
  case ExprKind::Gt:
    return a > b;
  default:
    return a >= b;
  }
}

} // namespace

std::pair<int64_t, int64_t> intLimits(DType t) {
  switch (t) {
  case DType::Bool:
    return {0, 1};
  case DType::UInt8:
    return {0, 255};
  case DType::Int8:
    return {-128, 127};
  case DType::Int16:
    return {-32768, 32767};
  case DType::Int32:
    return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  default:
    return {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  }
}

double roundFloat(double v, DType t) {
  switch (t) {
  case DType::Float32:
    return static_cast<float>(v);
  case DType::Float16:
    return static_cast<float>(Half(static_cast<float>(v)));
  case DType::BFloat16:
    return static_cast<float>(BFloat16(static_cast<float>(v)));
  default:
    return v;
  }
}

int64_t wrapInt(int64_t v, DType t) {
  switch (t) {
  case DType::Bool:
    return v != 0;
  case DType::UInt8:
    return static_cast<uint8_t>(v);
  case DType::Int8:
    return static_cast<int8_t>(v);
  case DType::Int16:
    return static_cast<int16_t>(v);
  case DType::Int32:
    return static_cast<int32_t>(v);
  default:
    return v;
  }
}

bool convertDefined(Elem v, DType from, DType to) {
  if (!isFloating(from) || isFloating(to) || to == DType::Bool)
    return true;
  auto [lo, hi] = intLimits(to);
  double t = std::trunc(v.f); // NaN fails both tests; hi + 1 is 2^63 for int64
  return t >= static_cast<double>(lo) && t < static_cast<double>(hi) + 1.0;
}

Elem convert(Elem v, DType from, DType to) {
  if (isFloating(from)) {
    if (isFloating(to))
      return {roundFloat(v.f, to), 0};
    if (to == DType::Bool)
      return {0, v.f != 0};
    // Truncation toward zero; NaN and values outside int64 have no C++ meaning: lowest int64.
    bool fits = v.f > -9.3e18 && v.f < 9.2e18;
    return {0, wrapInt(fits ? static_cast<int64_t>(v.f) : std::numeric_limits<int64_t>::min(), to)};
  }
  if (to == DType::Float64)
    return {static_cast<double>(v.i), 0};
  if (isFloating(to)) // int64 -> float directly: through double would round twice
    return {roundFloat(static_cast<float>(v.i), to), 0};
  return {0, wrapInt(v.i, to)};
}

std::string primUndefined(ExprKind kind, DType operandType, std::span<const Elem> args) {
  if ((kind == ExprKind::FloorDiv || kind == ExprKind::Mod) && !isFloating(operandType) &&
      args[1].i == 0)
    return fmt::format("integer {} by zero", exprKeyword(kind));
  return {};
}

Elem evalPrim(ExprKind kind, DType operandType, DType resultType, std::span<const Elem> args) {
  if (kind == ExprKind::Where)
    return args[0].i ? args[1] : args[2];
  if (kind == ExprKind::Philox)
    return {0, philoxWord(args[0].i, args[1].i, args[2].i)};
  if (std::string why = primUndefined(kind, operandType, args); !why.empty())
    fail(ErrorKind::Value, "{}", why);
  Elem a = args[0], b = args.size() > 1 ? args[1] : Elem{};
  bool floating = isFloating(operandType);
  if (exprTypeRule(kind) == TypeRule::Compare)
    return {0, floating ? compare(kind, a.f, b.f) : compare(kind, a.i, b.i)};
  if (operandType == DType::Float64)
    return {roundFloat(evalFloat<double>(kind, a.f, b.f), resultType), 0};
  if (floating) // f32, f16 and bf16 values are exact floats; the kernels compute in float
    return {roundFloat(evalFloat<float>(kind, static_cast<float>(a.f), static_cast<float>(b.f)),
                       resultType),
            0};
  return {0, wrapInt(evalInt(kind, a.i, b.i, operandType), resultType)};
}

} // namespace kiln::ir::loop

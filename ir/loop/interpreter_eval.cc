// The interpreter's scalar semantics: one function per family of prims, casts, and element I/O.

#include "ir/loop/interpreter_impl.h"

#include "runtime/error.h"

#include <cmath>
#include <limits>

namespace kiln::ir::loop::detail {

namespace {

double floorDivFloat(double a, double b) { // torch's div_floor for floating types
  if (b == 0)
    return a / b;
  double m = std::fmod(a, b);
  double d = (a - m) / b;
  if (m != 0 && (b < 0) != (m < 0))
    d -= 1;
  if (d == 0)
    return std::copysign(0.0, a / b);
  double f = std::floor(d);
  return d - f > 0.5 ? f + 1 : f;
}

double modFloat(double a, double b) {
  double r = std::fmod(a, b);
  return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;
}

double evalFloat(ExprKind kind, double a, double b) {
  switch (kind) {
  case ExprKind::Neg:
    return -a;
  case ExprKind::Abs:
    return std::fabs(a);
  case ExprKind::Exp:
    return std::exp(a);
  case ExprKind::Log:
    return std::log(a);
  case ExprKind::Sqrt:
    return std::sqrt(a);
  case ExprKind::Rsqrt:
    return 1.0 / std::sqrt(a);
  case ExprKind::Tanh:
    return std::tanh(a);
  case ExprKind::Sigmoid:
    return 1.0 / (1.0 + std::exp(-a));
  case ExprKind::Erf:
    return std::erf(a);
  case ExprKind::Floor:
    return std::floor(a);
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
  case ExprKind::Max:
    return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN()
                                          : std::max(a, b);
  case ExprKind::Min:
    return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN()
                                          : std::min(a, b);
  default:
    fail(ErrorKind::Runtime, "loop interpreter: {} has no floating semantics", exprKeyword(kind));
  }
}

uint64_t bits(int64_t v) { return static_cast<uint64_t>(v); }
int64_t fromBits(uint64_t v) { return static_cast<int64_t>(v); }

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
    KILN_CHECK_KIND(Value, b != 0, "loop interpreter: integer {} by zero", exprKeyword(kind));
    if (b == -1) // no overflow trap for INT64_MIN / -1: it wraps
      return kind == ExprKind::FloorDiv ? fromBits(0 - bits(a)) : 0;
    int64_t q = a / b, r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) {
      q -= 1;
      r += b;
    }
    return kind == ExprKind::FloorDiv ? q : r;
  }
  case ExprKind::Pow: {
    KILN_CHECK_KIND(Value, b >= 0, "loop interpreter: integer pow with negative exponent {}", b);
    uint64_t result = 1, base = bits(a);
    for (uint64_t e = bits(b); e != 0; e >>= 1, base *= base)
      if (e & 1)
        result *= base;
    return fromBits(result);
  }
  case ExprKind::Max:
    return std::max(a, b);
  case ExprKind::Min:
    return std::min(a, b);
  case ExprKind::Not:
    return t == DType::Bool ? !a : ~a;
  case ExprKind::And:
    return a & b;
  case ExprKind::Or:
    return a | b;
  case ExprKind::Xor:
    return a ^ b;
  default:
    fail(ErrorKind::Runtime, "loop interpreter: {} has no integer semantics", exprKeyword(kind));
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
  if (isFloating(to))
    return {roundFloat(static_cast<double>(v.i), to), 0};
  return {0, wrapInt(v.i, to)};
}

Elem evalPrim(ExprKind kind, DType operandType, DType resultType, std::span<const Elem> args) {
  if (kind == ExprKind::Where)
    return args[0].i ? args[1] : args[2];
  Elem a = args[0], b = args.size() > 1 ? args[1] : Elem{};
  bool floating = isFloating(operandType);
  if (exprTypeRule(kind) == TypeRule::Compare)
    return {0, floating ? compare(kind, a.f, b.f) : compare(kind, a.i, b.i)};
  if (floating)
    return {roundFloat(evalFloat(kind, a.f, b.f), resultType), 0};
  return {0, wrapInt(evalInt(kind, a.i, b.i, operandType), resultType)};
}

Elem readElem(const Tensor &t, int64_t offset) {
  return dispatchAll(t.dtype(), [&]<typename T>() -> Elem {
    T v = t.data<T>()[offset];
    if constexpr (std::is_integral_v<T>)
      return {0, static_cast<int64_t>(v)};
    else if constexpr (std::is_same_v<T, double>)
      return {v, 0};
    else
      return {static_cast<double>(static_cast<float>(v)), 0};
  });
}

void writeElem(const Tensor &t, int64_t offset, Elem v) {
  dispatchAll(t.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>)
      t.data<T>()[offset] = v.i != 0;
    else if constexpr (std::is_integral_v<T>)
      t.data<T>()[offset] = static_cast<T>(v.i);
    else if constexpr (std::is_same_v<T, double>)
      t.data<T>()[offset] = v.f;
    else
      t.data<T>()[offset] = T(static_cast<float>(v.f));
  });
}

} // namespace kiln::ir::loop::detail

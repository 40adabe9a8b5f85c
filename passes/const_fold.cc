#include "passes/const_fold.h"

#include "ir/shape_rules.h"

#include <cmath>
#include <limits>

namespace kiln::passes {

namespace {

using ir::Node;
using ir::OpKind;
using ir::ScalarType;

/// A value being folded: a bool, an int64 or a double (which kind says).
struct Num {
  ScalarType kind;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  static Num ofBool(bool v) { return {ScalarType::Bool, v, 0, 0}; }
  static Num ofInt(int64_t v) { return {ScalarType::Int, false, v, 0}; }
  static Num ofFloat(double v) { return {ScalarType::Float, false, 0, v}; }
  double asDouble() const {
    return kind == ScalarType::Float ? f : kind == ScalarType::Int ? i : b;
  }
  int64_t asInt() const { return kind == ScalarType::Int ? i : b; }
  bool asBool() const {
    return kind == ScalarType::Float ? f != 0 : kind == ScalarType::Int ? i != 0 : b;
  }
};
using MaybeNum = std::optional<Num>;

constexpr int64_t kExactInDouble = int64_t{1} << 53;

/// `x` rounded to floating dtype `t` (f16/bf16 through float, as the kernels round).
double roundTo(DType t, double x) {
  switch (t) {
  case DType::Float64:
    return x;
  case DType::Float32:
    return static_cast<float>(x);
  case DType::Float16:
    return static_cast<float>(Half(static_cast<float>(x)));
  default:
    return static_cast<float>(BFloat16(static_cast<float>(x)));
  }
}

/// `v` wrapped to the width of integer dtype `t` (two's complement, like the kernels).
int64_t wrapTo(DType t, int64_t v) {
  switch (t) {
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

/// torch's cast of `v` to dtype `t`; nullopt where C++ leaves it undefined (NaN, infinities and
/// out-of-range floats to integers).
MaybeNum castTo(const Num &v, DType t) {
  if (t == DType::Bool)
    return Num::ofBool(v.asBool());
  if (isFloating(t)) {
    if (v.kind == ScalarType::Int && t == DType::Float32) // one rounding, not two
      return Num::ofFloat(static_cast<float>(v.i));
    return Num::ofFloat(roundTo(t, v.asDouble()));
  }
  if (v.kind != ScalarType::Float)
    return Num::ofInt(wrapTo(t, v.asInt()));
  double lo = t == DType::UInt8 ? 0 : -std::ldexp(1.0, 8 * static_cast<int>(itemsize(t)) - 1);
  double hi = t == DType::UInt8 ? 256 : std::ldexp(1.0, 8 * static_cast<int>(itemsize(t)) - 1);
  if (!(v.f > lo - 1 && v.f < hi))
    return std::nullopt;
  return Num::ofInt(static_cast<int64_t>(v.f)); // truncates toward zero, like torch
}

/// The value of a `constant` node, in its own type.
MaybeNum constantValue(const ir::Value *v) {
  const Node *def = v->definingNode();
  if (def->op() != OpKind::Constant)
    return std::nullopt;
  const ir::Attribute &a = *def->attr("value");
  Num raw = a.is<double>() ? Num::ofFloat(a.toDouble())
            : a.is<bool>() ? Num::ofBool(a.toBool())
                           : Num::ofInt(a.toInt());
  if (v->isTensor())
    return castTo(raw, v->meta().dtype);
  switch (v->type().scalar()) {
  case ScalarType::Float:
    return Num::ofFloat(raw.asDouble());
  case ScalarType::Int:
    return raw.kind == ScalarType::Float ? std::nullopt : MaybeNum(Num::ofInt(raw.asInt()));
  default:
    return raw.kind == ScalarType::Bool ? MaybeNum(raw) : std::nullopt;
  }
}

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

/// A binary or unary op on floats (double arithmetic is exact enough: the result rounds to the
/// dtype once, as float arithmetic would).
MaybeNum floatOp(OpKind op, double x, double y) {
  switch (op) {
  case OpKind::Neg:
    return Num::ofFloat(-x);
  case OpKind::Abs:
    return Num::ofFloat(std::fabs(x));
  case OpKind::Relu:
    return Num::ofFloat(x > 0 || std::isnan(x) ? x : 0.0);
  case OpKind::Sqrt:
    return Num::ofFloat(std::sqrt(x));
  case OpKind::Add:
    return Num::ofFloat(x + y);
  case OpKind::Sub:
    return Num::ofFloat(x - y);
  case OpKind::Mul:
    return Num::ofFloat(x * y);
  case OpKind::Div:
    return Num::ofFloat(x / y);
  case OpKind::Maximum: // NaN-propagating, and the same zero as the kernel
    return Num::ofFloat(x > y || x != x ? x : y);
  case OpKind::Minimum:
    return Num::ofFloat(x < y || x != x ? x : y);
  default:
    return std::nullopt;
  }
}

/// The op on int64s wrapping around (the caller narrows to the dtype's width).
MaybeNum intOp(OpKind op, int64_t x, int64_t y) {
  switch (op) {
  case OpKind::Neg:
    return Num::ofInt(static_cast<int64_t>(0 - u(x)));
  case OpKind::Abs:
    return Num::ofInt(x < 0 ? static_cast<int64_t>(0 - u(x)) : x);
  case OpKind::Relu:
    return Num::ofInt(x > 0 ? x : 0);
  case OpKind::Add:
    return Num::ofInt(static_cast<int64_t>(u(x) + u(y)));
  case OpKind::Sub:
    return Num::ofInt(static_cast<int64_t>(u(x) - u(y)));
  case OpKind::Mul:
    return Num::ofInt(static_cast<int64_t>(u(x) * u(y)));
  case OpKind::Maximum:
    return Num::ofInt(std::max(x, y));
  case OpKind::Minimum:
    return Num::ofInt(std::min(x, y));
  default:
    return std::nullopt;
  }
}

MaybeNum boolOp(OpKind op, bool x, bool y) {
  switch (op) {
  case OpKind::Add:
  case OpKind::Maximum:
    return Num::ofBool(x || y);
  case OpKind::Mul:
  case OpKind::Minimum:
    return Num::ofBool(x && y);
  default:
    return std::nullopt;
  }
}

MaybeNum compare(OpKind op, const Num &x, const Num &y) {
  auto cmp = [op](auto a, auto b) {
    switch (op) {
    case OpKind::Eq:
      return a == b;
    case OpKind::Ne:
      return a != b;
    case OpKind::Lt:
      return a < b;
    case OpKind::Le:
      return a <= b;
    case OpKind::Gt:
      return a > b;
    default:
      return a >= b;
    }
  };
  if (x.kind == ScalarType::Float || y.kind == ScalarType::Float)
    return Num::ofBool(cmp(x.asDouble(), y.asDouble()));
  return Num::ofBool(cmp(x.asInt(), y.asInt()));
}

/// The op computed in tensor dtype `t` on operands already cast to it.
MaybeNum computeIn(DType t, OpKind op, const Num &x, const Num &y) {
  if (isFloating(t)) {
    MaybeNum r = floatOp(op, x.asDouble(), y.asDouble());
    return r ? MaybeNum(Num::ofFloat(roundTo(t, r->f))) : std::nullopt;
  }
  if (t == DType::Bool)
    return boolOp(op, x.b, y.b);
  MaybeNum r = intOp(op, x.i, y.i);
  return r ? MaybeNum(Num::ofInt(wrapTo(t, r->i))) : std::nullopt;
}

/// Python number arithmetic: ints stay exact (no fold on overflow), floats are doubles.
MaybeNum computePython(ScalarType result, OpKind op, const Num &x, const Num &y) {
  bool anyFloat = x.kind == ScalarType::Float || y.kind == ScalarType::Float;
  bool bigInt = std::llabs(x.asInt()) > kExactInDouble || std::llabs(y.asInt()) > kExactInDouble;
  if (anyFloat && bigInt)
    return std::nullopt;
  if (ir::hasTrait(op, ir::trait::Comparison))
    return compare(op, x, y);
  if (op == OpKind::Div)
    return y.asDouble() == 0 || bigInt ? std::nullopt
                                       : MaybeNum(Num::ofFloat(x.asDouble() / y.asDouble()));
  if (op != OpKind::Add && op != OpKind::Sub && op != OpKind::Mul && op != OpKind::Neg &&
      op != OpKind::Abs && !((op == OpKind::Maximum || op == OpKind::Minimum) && !anyFloat))
    return std::nullopt;
  if (result == ScalarType::Float)
    return floatOp(op, x.asDouble(), y.asDouble());
  int64_t a = x.asInt(), b = y.asInt(), r = 0;
  bool overflow = false;
  switch (op) {
  case OpKind::Add:
    overflow = __builtin_add_overflow(a, b, &r);
    break;
  case OpKind::Sub:
    overflow = __builtin_sub_overflow(a, b, &r);
    break;
  case OpKind::Mul:
    overflow = __builtin_mul_overflow(a, b, &r);
    break;
  case OpKind::Neg:
  case OpKind::Abs:
    overflow = a == std::numeric_limits<int64_t>::min();
    r = op == OpKind::Neg || a < 0 ? -a : a;
    break;
  default:
    r = op == OpKind::Maximum ? std::max(a, b) : std::min(a, b);
  }
  if (overflow)
    return std::nullopt;
  return result == ScalarType::Bool ? Num::ofBool(r != 0) : Num::ofInt(r);
}

/// The folded value of elementwise node `n` whose operands are constants, if it folds.
MaybeNum fold(const Node &n, const std::vector<Num> &in) {
  const ir::Value *out = n.result();
  if (n.op() == OpKind::Where) {
    const Num &picked = in[0].asBool() ? in[1] : in[2];
    return out->isTensor() ? castTo(picked, out->meta().dtype) : MaybeNum(picked);
  }
  Num x = in[0], y = in.size() > 1 ? in[1] : in[0];
  if (!out->isTensor()) {
    if (n.op() == OpKind::Cast || n.op() == OpKind::Relu || n.op() == OpKind::Sqrt)
      return std::nullopt;
    return computePython(out->type().scalar(), n.op(), x, y);
  }
  DType t = out->meta().dtype;
  if (n.op() == OpKind::Cast)
    return castTo(x, t);
  if (n.hasTrait(ir::trait::Comparison)) {
    DType p = ir::promotedDType(n);
    MaybeNum cx = castTo(x, p), cy = castTo(y, p);
    return cx && cy ? compare(n.op(), *cx, *cy) : std::nullopt;
  }
  // Reduced floats compute in float32 and round once, like the kernels.
  DType compute = t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t;
  MaybeNum cx = castTo(x, compute), cy = castTo(y, compute);
  if (!cx || !cy)
    return std::nullopt;
  MaybeNum r = computeIn(compute, n.op(), *cx, *cy);
  return r ? castTo(*r, t) : std::nullopt;
}

ir::Attribute toAttribute(const Num &v) {
  switch (v.kind) {
  case ScalarType::Float:
    return v.f;
  case ScalarType::Int:
    return v.i;
  default:
    return v.b;
  }
}

class ConstFoldPass final : public Pass {
public:
  std::string_view name() const override { return "const-fold"; }
  bool run(ir::Graph &graph) override { return foldConstants(graph); }
};

} // namespace

bool foldConstants(ir::Graph &graph) {
  bool changed = false;
  for (Node *n : graph.nodes()) {
    if (!n->hasTrait(ir::trait::Elementwise | ir::trait::Pure) || n->numResults() != 1)
      continue;
    std::vector<Num> in;
    for (const ir::Value *v : n->operands()) {
      MaybeNum c = constantValue(v);
      if (!c)
        break;
      in.push_back(*c);
    }
    if (in.size() != static_cast<size_t>(n->numOperands()))
      continue;
    MaybeNum value = fold(*n, in);
    if (!value)
      continue;
    Node *c = graph.createBefore(n, OpKind::Constant, {}, {{"value", toAttribute(*value)}},
                                 {n->result()->type()}, n->loc());
    n->result()->replaceAllUsesWith(c->result());
    graph.erase(n);
    changed = true;
  }
  return changed;
}

std::unique_ptr<Pass> createConstFoldPass() { return std::make_unique<ConstFoldPass>(); }

} // namespace kiln::passes

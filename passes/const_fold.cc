// The graph ops fold through the loop IR's scalar evaluator (ir/loop/prim_eval.h), mapped onto
// prims where the semantics are the same; Python-number arithmetic adds Python's rules on top.

#include "passes/const_fold.h"

#include "ir/loop/prim_eval.h"
#include "ir/shape_rules.h"

#include <cstdlib>
#include <limits>

namespace kiln::passes {

namespace {

using ir::Node;
using ir::OpKind;
using ir::ScalarType;
using ir::loop::Elem;
using ir::loop::ExprKind;

/// A value being folded: an element of `dtype`. Python numbers are f64, i64 or b8.
struct Num {
  DType dtype = DType::Bool;
  Elem v;
  bool isFloat() const { return isFloating(dtype); }
  bool truth() const { return isFloat() ? v.f != 0 : v.i != 0; }
};
using MaybeNum = std::optional<Num>;

constexpr int64_t kExactInDouble = int64_t{1} << 53;

/// torch's cast of `x` to dtype `t`; nullopt where C++ leaves it undefined (NaN, infinities and
/// out-of-range floats to integers).
MaybeNum castTo(const Num &x, DType t) {
  if (!ir::loop::convertDefined(x.v, x.dtype, t))
    return std::nullopt;
  return Num{t, ir::loop::convert(x.v, x.dtype, t)};
}

/// The value of a `constant` node, in its own type.
MaybeNum constantValue(const ir::Value *v) {
  const Node *def = v->definingNode();
  if (def->op() != OpKind::Constant)
    return std::nullopt;
  const ir::Attribute &a = *def->attr("value");
  Num raw = a.is<double>() ? Num{DType::Float64, {a.toDouble(), 0}}
            : a.is<bool>() ? Num{DType::Bool, {0, a.toBool()}}
                           : Num{DType::Int64, {0, a.toInt()}};
  if (v->isTensor())
    return castTo(raw, v->meta().dtype);
  switch (v->type().scalar()) {
  case ScalarType::Float:
    return castTo(raw, DType::Float64);
  case ScalarType::Int:
    return raw.isFloat() ? std::nullopt : castTo(raw, DType::Int64);
  default:
    return raw.dtype == DType::Bool ? MaybeNum(raw) : std::nullopt;
  }
}

/// The loop prim computing graph op `op` on operands of dtype `t`, where the two agree (bool
/// `add`/`mul` are or/and; `relu` is max with 0, NaN-propagating like the kernel); nullopt for
/// the ops const-fold leaves alone (see const_fold.h) and for dtypes their kernels reject.
std::optional<ExprKind> primOf(OpKind op, DType t) {
  bool isBool = t == DType::Bool, floating = isFloating(t);
  switch (op) {
  case OpKind::Neg:
    return isBool ? std::nullopt : std::optional(ExprKind::Neg);
  case OpKind::Abs:
    return isBool ? std::nullopt : std::optional(ExprKind::Abs);
  case OpKind::Relu:
    return isBool ? std::nullopt : std::optional(ExprKind::Max);
  case OpKind::Sqrt:
    return floating ? std::optional(ExprKind::Sqrt) : std::nullopt;
  case OpKind::Add:
    return isBool ? ExprKind::Or : ExprKind::Add;
  case OpKind::Sub:
    return isBool ? std::nullopt : std::optional(ExprKind::Sub);
  case OpKind::Mul:
    return isBool ? ExprKind::And : ExprKind::Mul;
  case OpKind::Div:
    return floating ? std::optional(ExprKind::Div) : std::nullopt;
  case OpKind::Maximum:
    return ExprKind::Max;
  case OpKind::Minimum:
    return ExprKind::Min;
  case OpKind::Eq:
    return ExprKind::Eq;
  case OpKind::Ne:
    return ExprKind::Ne;
  case OpKind::Lt:
    return ExprKind::Lt;
  case OpKind::Le:
    return ExprKind::Le;
  case OpKind::Gt:
    return ExprKind::Gt;
  case OpKind::Ge:
    return ExprKind::Ge;
  default:
    return std::nullopt;
  }
}

/// `kind` evaluated on operands of dtype `operands`, giving a value of dtype `result`.
Num evalIn(ExprKind kind, DType operands, DType result, const Num &x, const Num &y) {
  Elem args[2] = {x.v, y.v};
  return Num{result, ir::loop::evalPrim(kind, operands, result, args)};
}

/// Whether Python int arithmetic leaves int64 (Python ints do not wrap: such a result is not
/// folded).
bool pythonIntOverflows(OpKind op, int64_t a, int64_t b) {
  int64_t r = 0;
  switch (op) {
  case OpKind::Add:
    return __builtin_add_overflow(a, b, &r);
  case OpKind::Sub:
    return __builtin_sub_overflow(a, b, &r);
  case OpKind::Mul:
    return __builtin_mul_overflow(a, b, &r);
  case OpKind::Neg:
  case OpKind::Abs:
    return a == std::numeric_limits<int64_t>::min();
  default:
    return false;
  }
}

/// Python number arithmetic: ints stay exact (no fold on overflow), floats are doubles.
MaybeNum computePython(ScalarType result, OpKind op, const Num &x, const Num &y) {
  bool anyFloat = x.isFloat() || y.isFloat();
  auto big = [](const Num &n) { return !n.isFloat() && std::llabs(n.v.i) > kExactInDouble; };
  bool bigInt = big(x) || big(y);
  if (anyFloat && bigInt)
    return std::nullopt;
  DType p = anyFloat ? DType::Float64 : DType::Int64;
  if (ir::hasTrait(op, ir::trait::Comparison))
    return evalIn(*primOf(op, p), p, DType::Bool, *castTo(x, p), *castTo(y, p));
  if (op == OpKind::Div) {
    if (!y.truth() || bigInt)
      return std::nullopt;
    return evalIn(ExprKind::Div, DType::Float64, DType::Float64, *castTo(x, DType::Float64),
                  *castTo(y, DType::Float64));
  }
  if (op != OpKind::Add && op != OpKind::Sub && op != OpKind::Mul && op != OpKind::Neg &&
      op != OpKind::Abs && !((op == OpKind::Maximum || op == OpKind::Minimum) && !anyFloat))
    return std::nullopt;
  ExprKind kind = *primOf(op, p);
  if (result == ScalarType::Float)
    return evalIn(kind, DType::Float64, DType::Float64, *castTo(x, DType::Float64),
                  *castTo(y, DType::Float64));
  Num a = *castTo(x, DType::Int64), b = *castTo(y, DType::Int64);
  if (pythonIntOverflows(op, a.v.i, b.v.i))
    return std::nullopt;
  Num r = evalIn(kind, DType::Int64, DType::Int64, a, b);
  return result == ScalarType::Bool ? *castTo(r, DType::Bool) : r;
}

/// The folded value of elementwise node `n` whose operands are constants, if it folds.
MaybeNum fold(const Node &n, const std::vector<Num> &in) {
  const ir::Value *out = n.result();
  if (n.op() == OpKind::Where) {
    const Num &picked = in[0].truth() ? in[1] : in[2];
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
  bool comparison = n.hasTrait(ir::trait::Comparison);
  DType common = comparison ? ir::promotedDType(n) : t; // the dtype operands promote to
  std::optional<ExprKind> kind = primOf(n.op(), common);
  if (!kind)
    return std::nullopt;
  if (n.op() == OpKind::Relu)
    y = Num{t, {}}; // max(x, 0)
  // Reduced floats compute in float32 like the kernels: a Python number goes to float32
  // directly, a tensor of another dtype through the common dtype first (torch's rule).
  // Comparisons cast every operand to the common dtype, Python numbers too (torch's rule).
  DType compute = !comparison && isReducedFloat(common) ? DType::Float32 : common;
  auto operand = [&](const Num &v, int k) -> MaybeNum {
    bool viaCommon = compute != common && v.dtype != common && n.operand(k)->isTensor();
    MaybeNum r = viaCommon ? castTo(v, common) : MaybeNum(v);
    return r ? castTo(*r, compute) : std::nullopt;
  };
  MaybeNum cx = operand(x, 0), cy = operand(y, n.numOperands() > 1 ? 1 : 0);
  if (!cx || !cy)
    return std::nullopt;
  return evalIn(*kind, compute, comparison ? DType::Bool : t, *cx, *cy);
}

ir::Attribute toAttribute(const Num &n) {
  if (n.isFloat())
    return n.v.f;
  if (n.dtype == DType::Bool)
    return n.v.i != 0;
  return n.v.i;
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

// Lowerings of elementwise ops (unary, binary, compare, where, cast, activations), constants,
// sym_size, arange, contiguous, and arithmetic on compile-time Python numbers.
//
// Every tensor op becomes one pointwise node over the result shape: operands are read with
// broadcasting (LowerContext::read), converted to the compute dtype (the result dtype, float32
// for float16/bfloat16; the promoted operand dtype for comparisons), and the value is cast back
// to the result dtype once.

#include "passes/lower/lower_context.h"

#include <cmath>
#include <type_traits>

namespace kiln::passes::lower {

namespace {

using ir::OpKind;

constexpr double kSqrtHalf = 0.70710678118654752440;      // 1/sqrt(2), gelu's erf form
constexpr double kSqrtTwoOverPi = 0.79788456080286535588; // sqrt(2/pi), gelu's tanh form
constexpr double kGeluCubic = 0.044715;

Val gelu(Ops &ops, Val x, const std::string &approximate) {
  DType t = x.dtype();
  Val half = ops.constant(0.5, t), one = ops.constant(1.0, t);
  if (approximate == "tanh") {
    Val cube = x * x * x;
    Val inner = ops.constant(kSqrtTwoOverPi, t) * (x + ops.constant(kGeluCubic, t) * cube);
    return half * x * (one + ops.tanh(inner));
  }
  return half * x * (one + ops.erf(x * ops.constant(kSqrtHalf, t)));
}

/// The body of a unary op on `x`, already in the compute dtype.
Val unary(Ops &ops, const ir::Node &n, Val x) {
  switch (n.op()) {
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
  case OpKind::Relu:
    return ops.maximum(x, ops.constant(0.0, x.dtype()));
  case OpKind::Silu:
    return x * ops.sigmoid(x);
  default: { // gelu
    const ir::Attribute *a = n.attr("approximate");
    return gelu(ops, x, a ? a->toString() : "none");
  }
  }
}

/// The body of a binary op (or comparison) on operands in one dtype.
Val binary(Ops &ops, OpKind op, Val a, Val b) {
  bool logical = a.dtype() == DType::Bool; // torch: add/mul/max/min of bools are or/and
  switch (op) {
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
  default:
    return ops.ge(a, b);
  }
}

/// Ops whose loop prims need a numeric (non-bool) dtype.
bool needsNumeric(OpKind op) {
  switch (op) {
  case OpKind::Neg:
  case OpKind::Abs:
  case OpKind::Sub:
  case OpKind::Div:
  case OpKind::Pow:
    return true;
  default:
    return false;
  }
}

/// `op` applied to compile-time numbers: SymInts (ints and sizes) or doubles (float literals).
template <typename T> std::optional<T> fold(OpKind op, const std::vector<T> &v) {
  switch (op) {
  case OpKind::Neg:
    return -v[0];
  case OpKind::Add:
    return v[0] + v[1];
  case OpKind::Sub:
    return v[0] - v[1];
  case OpKind::Mul:
    return v[0] * v[1];
  default:
    break;
  }
  if constexpr (std::is_same_v<T, SymInt>) {
    if (op == OpKind::Maximum)
      return max(v[0], v[1]);
    if (op == OpKind::Minimum)
      return min(v[0], v[1]);
  } else {
    if (op == OpKind::Div)
      return v[0] / v[1];
    if (op == OpKind::Sqrt)
      return std::sqrt(v[0]);
  }
  return std::nullopt;
}

std::optional<SymInt> symbolicInt(const ScalarRef &s) {
  if (const SymInt *sym = std::get_if<SymInt>(&s.value))
    return *sym;
  if (const int64_t *i = std::get_if<int64_t>(&s.value); i && s.type != ir::ScalarType::Float)
    return SymInt(*i);
  return std::nullopt;
}

/// Arithmetic whose operands and result are Python numbers: folded when they are known at
/// compile time (int sizes fold symbolically: `sym_size(%x) * 2` is `s0*2`).
void lowerScalarArith(LowerContext &ctx, const ir::Node &n) {
  std::vector<SymInt> ints;
  std::vector<double> floats;
  for (const ir::Value *v : n.operands()) {
    const ScalarRef &s = ctx.scalar(v);
    if (std::optional<SymInt> i = symbolicInt(s))
      ints.push_back(*i);
    if (std::optional<double> d = s.literal())
      floats.push_back(*d);
  }
  ir::ScalarType type = n.result(0)->type().scalar();
  size_t arity = n.operands().size();
  if (type == ir::ScalarType::Int && ints.size() == arity) {
    if (std::optional<SymInt> r = fold(n.op(), ints)) {
      ScalarRef out{type, *r};
      if (r->constant())
        out.value = *r->constant();
      return ctx.define(n.result(0), out);
    }
  }
  if (type == ir::ScalarType::Float && floats.size() == arity)
    if (std::optional<double> r = fold(n.op(), floats))
      return ctx.define(n.result(0), ScalarRef{type, *r});
  ctx.decline(n, "arithmetic on Python numbers is only folded when they are known at compile "
                 "time (literals and sizes)");
}

void lowerElementwise(LowerContext &ctx, const ir::Node &n) {
  if (!n.result(0)->isTensor())
    return lowerScalarArith(ctx, n);
  const ir::TensorMeta &out = n.result(0)->meta();
  DType result = out.dtype;
  std::vector<SymInt> sizes = out.sizes;
  const ir::Node *node = &n;
  OpKind op = n.op();
  if (op == OpKind::Cast) {
    const ir::Value *x = n.operand(0);
    DType from = x->isTensor() ? x->meta().dtype : ctx.scalar(x).dtype();
    return ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
      return ops.cast(ctx.read(ops, x, i, sizes, from), result);
    }));
  }
  if (op == OpKind::Where) {
    return ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
      return ops.where(ctx.read(ops, node->operand(0), i, sizes, DType::Bool),
                       ctx.read(ops, node->operand(1), i, sizes, result),
                       ctx.read(ops, node->operand(2), i, sizes, result));
    }));
  }
  if (const ir::Attribute *a = n.attr("approximate");
      a && a->toString() != "none" && a->toString() != "tanh")
    ctx.decline(n, "gelu's 'approximate' must be \"none\" or \"tanh\"");
  bool compare = n.hasTrait(ir::trait::Comparison);
  DType compute = computeDType(compare ? promotedOperandDType(n) : result);
  if (compute == DType::Bool && needsNumeric(op))
    ctx.decline(n, "bool operands are not supported by this op");
  return ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
    Val a = ctx.read(ops, node->operand(0), i, sizes, compute);
    Val v = node->numOperands() == 1
                ? unary(ops, *node, a)
                : binary(ops, op, a, ctx.read(ops, node->operand(1), i, sizes, compute));
    return ops.cast(v, result);
  }));
}

void lowerConstant(LowerContext &ctx, const ir::Node &n) {
  const ir::Attribute &value = *n.attr("value");
  double d = value.is<double>() ? value.toDouble()
             : value.is<bool>() ? (value.toBool() ? 1.0 : 0.0)
                                : static_cast<double>(value.toInt());
  const ir::Value *r = n.result(0);
  if (r->isTensor()) {
    TensorRef t;
    t.dtype = r->meta().dtype;
    t.sizes = r->meta().sizes;
    t.fill = d;
    return ctx.define(r, t);
  }
  ScalarRef s{r->type().scalar(), d};
  if (s.type != ir::ScalarType::Float)
    s.value = value.is<double>() ? static_cast<int64_t>(d)
              : value.is<bool>() ? int64_t{value.toBool()}
                                 : value.toInt();
  ctx.define(r, s);
}

void lowerSymSize(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &m = n.operand(0)->meta();
  SymInt size = m.sizes[wrapDim(n.attr("dim")->toInt(), m.rank())];
  ScalarRef s{ir::ScalarType::Int, size};
  if (size.constant())
    s.value = *size.constant();
  ctx.define(n.result(0), s);
}

/// arange: start + i * step, computed as an i64 index and converted once (torch computes the
/// values of an integer range exactly).
void lowerArange(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  const ir::Attribute *start = n.attr("start"), *step = n.attr("step");
  SymInt first = start ? start->toInt() : 0, stride = step ? step->toInt() : 1;
  DType result = out.dtype;
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    return ops.cast(ops.indexValue(first + i[0] * stride), result);
  }));
}

/// contiguous: the same values; layout is the business of whoever realizes the value (an
/// extern's operand, a graph output), so the operand's ref is the result.
void lowerContiguous(LowerContext &ctx, const ir::Node &n) {
  ctx.define(n.result(0), ctx.tensor(n.operand(0)));
}

} // namespace

void registerElementwise(Registry &r) {
  for (OpKind op :
       {OpKind::Neg,     OpKind::Abs,     OpKind::Exp,  OpKind::Log,  OpKind::Sqrt, OpKind::Rsqrt,
        OpKind::Tanh,    OpKind::Sigmoid, OpKind::Erf,  OpKind::Relu, OpKind::Gelu, OpKind::Silu,
        OpKind::Cast,    OpKind::Add,     OpKind::Sub,  OpKind::Mul,  OpKind::Div,  OpKind::Pow,
        OpKind::Maximum, OpKind::Minimum, OpKind::Eq,   OpKind::Ne,   OpKind::Lt,   OpKind::Le,
        OpKind::Gt,      OpKind::Ge,      OpKind::Where})
    r.add(op, lowerElementwise);
  r.add(OpKind::Constant, lowerConstant);
  r.add(OpKind::SymSize, lowerSymSize);
  r.add(OpKind::Arange, lowerArange);
  r.add(OpKind::Contiguous, lowerContiguous);
}

} // namespace kiln::passes::lower

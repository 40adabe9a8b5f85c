// Lowerings of elementwise ops (every op with the Elementwise trait; their bodies are in
// lower_math.cc and lower_activation.cc), constants, sym_size, arange, contiguous, and
// arithmetic on compile-time Python numbers.
//
// Every tensor op becomes one pointwise node over the result shape: operands are read with
// broadcasting (LowerContext::read), converted to the compute dtype (the result dtype, float32
// for float16/bfloat16; the promoted operand dtype for comparisons), and the value is cast back
// to the result dtype once.

#include "passes/lower/elementwise_bodies.h"
#include "passes/lower/lower_context.h"

#include <cmath>
#include <type_traits>

namespace kiln::passes::lower {

namespace {

using ir::OpKind;

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
    // Python's // and % of ints (a literal zero divisor is left to eager, which raises).
    if ((op == OpKind::FloorDivide || op == OpKind::Remainder) && v[1] != SymInt(0))
      return op == OpKind::FloorDivide ? floorDiv(v[0], v[1]) : mod(v[0], v[1]);
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
  // Python's ints raise on a zero divisor and grow past 64 bits under pow: those stay
  // folded-only. A product of run-time ints (a loop index times a stride, `k * step`) is
  // computed in int64, as the index arithmetic it is.
  const bool pythonInt =
      type == ir::ScalarType::Int &&
      (n.op() == OpKind::FloorDivide || n.op() == OpKind::Remainder || n.op() == OpKind::Pow);
  if (type == ir::ScalarType::Bool || arity > 2 || pythonInt)
    ctx.decline(n, "arithmetic on Python numbers is only folded when they are known at compile "
                   "time (literals and sizes)");
  // Run-time numbers (a learning rate a scheduler changes, 1 - lr * wd): a 0-d value the
  // program computes once, which later reads take as the number.
  DType compute = ScalarRef{type, 0.0}.dtype();
  if (std::string why = elementwiseUnsupported(n, compute); !why.empty())
    ctx.decline(n, why);
  const ir::Node *node = &n;
  TensorRef value = ctx.pointwise({}, [&](Ops &ops, Idx i) {
    auto operand = [&](int k) { return ctx.read(ops, node->operand(k), i, {}, compute); };
    Val v = arity == 1 ? unaryBody(ops, *node, operand(0), compute)
                       : binaryBody(ops, *node, operand(0), operand(1));
    return ops.cast(v, compute);
  });
  ctx.define(n.result(0), ScalarRef{type, ctx.realize(value)});
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
  bool compare = n.hasTrait(ir::trait::Comparison);
  DType compute = computeDType(compare ? promotedOperandDType(n) : result);
  if (std::string why = elementwiseUnsupported(n, compute); !why.empty())
    ctx.decline(n, why);
  return ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
    auto operand = [&](int k) { return ctx.read(ops, node->operand(k), i, sizes, compute); };
    Val v = node->numOperands() == 1   ? unaryBody(ops, *node, operand(0), result)
            : node->numOperands() == 2 ? binaryBody(ops, *node, operand(0), operand(1))
                                       : lerpBody(ops, operand(0), operand(1), operand(2));
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

/// full: a constant body (fusion inlines it into its consumers). The value converts to the
/// dtype as eager's fill_ does: through f64, truncating toward zero for integers.
void lowerFull(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  const ir::Attribute *value = n.attr("value");
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx) {
    if (isFloating(out.dtype) && value->kind() != ir::AttrKind::Bool)
      return ops.constant(value->toDouble(), out.dtype); // rounded to the dtype once
    switch (value->kind()) {
    case ir::AttrKind::Bool:
      return ops.cast(ops.constant(value->toBool()), out.dtype);
    case ir::AttrKind::Int:
      return ops.cast(ops.constant(value->toInt(), DType::Int64), out.dtype);
    default:
      return ops.cast(ops.constant(value->toDouble(), DType::Float64), out.dtype);
    }
  }));
}

/// contiguous: the same values; layout is the business of whoever realizes the value (an
/// extern's operand, a graph output), so the operand's ref is the result.
void lowerContiguous(LowerContext &ctx, const ir::Node &n) {
  ctx.define(n.result(0), ctx.tensor(n.operand(0)));
}

} // namespace

void registerElementwise(Registry &r) {
  for (int k = 0; k < ir::kNumOpKinds; ++k) {
    auto op = static_cast<OpKind>(k);
    if (ir::hasTrait(op, ir::trait::Elementwise))
      r.add(op, lowerElementwise);
  }
  r.add(OpKind::Constant, lowerConstant);
  r.add(OpKind::SymSize, lowerSymSize);
  r.add(OpKind::Arange, lowerArange);
  r.add(OpKind::Full, lowerFull);
  r.add(OpKind::Contiguous, lowerContiguous);
}

} // namespace kiln::passes::lower

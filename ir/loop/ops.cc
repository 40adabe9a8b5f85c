// Recording a body: hash-consing, dtype inference and the checks on loads and indices.

#include "ir/loop/ops.h"

#include "ir/loop/prim_eval.h"

#include "runtime/error.h"

#include <atomic>
#include <bit>
#include <cmath>
#include <set>

namespace kiln::ir::loop {

namespace {

using detail::hashCombine;

size_t hashExpr(const Expr &e) {
  size_t h = hashCombine(static_cast<size_t>(e.kind), static_cast<size_t>(e.dtype));
  for (const Expr *o : e.operands())
    h = hashCombine(h, o->hash);
  h = hashCombine(h, static_cast<size_t>(e.buffer.index + 1));
  h = hashCombine(h, e.index.hash());
  h = hashCombine(h, e.indirectStride.hash());
  h = hashCombine(h, e.indirectExtent.hash());
  h = hashCombine(h, std::bit_cast<uint64_t>(e.floatValue));
  return hashCombine(h, static_cast<size_t>(e.intValue));
}

bool sameExpr(const Expr &a, const Expr &b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.operandSlots == b.operandSlots &&
         a.numOperands == b.numOperands && a.buffer == b.buffer && a.index == b.index &&
         a.indirectStride == b.indirectStride && a.indirectExtent == b.indirectExtent &&
         std::bit_cast<uint64_t>(a.floatValue) == std::bit_cast<uint64_t>(b.floatValue) &&
         a.intValue == b.intValue;
}

std::atomic<uint64_t> recordings{0};

Expr blankExpr(ExprKind kind, DType dtype) {
  Expr e;
  e.kind = kind;
  e.dtype = dtype;
  return e;
}

std::string_view shortName(DType t) { return dtypeShortName(t); }

} // namespace

DType Val::dtype() const {
  KILN_CHECK_KIND(Value, expr_ != nullptr, "loop body: use of an empty Val");
  return expr_->dtype;
}

Ops &Val::ops() const {
  KILN_CHECK_KIND(Value, ops_ != nullptr, "loop body: use of an empty Val");
  return *ops_;
}

Ops::Ops(std::span<const Buffer> buffers, VarRanges ranges, std::string context)
    : serial_(++recordings), buffers_(buffers), ranges_(std::move(ranges)),
      context_(std::move(context)), body_(std::make_unique<Body>()) {}

std::shared_ptr<const Body> Ops::record(const BodyFn &fn, std::span<const Buffer> buffers,
                                        VarRanges ranges, std::string context) {
  Ops ops(buffers, std::move(ranges), std::move(context));
  Val result = fn(ops, ops.ranges_.vars());
  const Expr *root = ops.check(result, "the yielded value");
  // Keep what the result depends on, in post-order from the result with operands left to right:
  // a canonical order, unlike build order, which follows C++'s unspecified evaluation order of
  // arguments (`load(a) + load(b)` may build load(b) first).
  Body &body = *ops.body_;
  std::set<const Expr *> done;
  std::vector<std::pair<const Expr *, int>> stack{{root, 0}}; // node, next operand to visit
  while (!stack.empty()) {
    auto &[e, next] = stack.back();
    if (next < e->numOperands) {
      const Expr *o = e->operand(next++);
      if (!done.count(o))
        stack.push_back({o, 0});
    } else {
      if (done.insert(e).second)
        body.order_.push_back(e);
      stack.pop_back();
    }
  }
  body.result_ = root;
  return std::shared_ptr<const Body>(std::move(ops.body_));
}

Val Ops::intern(Expr proto) {
  proto.hash = hashExpr(proto);
  std::vector<const Expr *> &bucket = interned_[proto.hash];
  for (const Expr *e : bucket)
    if (sameExpr(*e, proto))
      return Val(this, e, serial_);
  body_->storage_.push_back(std::make_unique<const Expr>(std::move(proto)));
  const Expr *e = body_->storage_.back().get();
  bucket.push_back(e);
  return Val(this, e, serial_);
}

const Expr *Ops::check(Val v, std::string_view what) const {
  KILN_CHECK_KIND(Value, v.expr_ != nullptr, "{}: {} is an empty Val", context_, what);
  KILN_CHECK_KIND(Value, v.ops_ == this && v.serial_ == serial_,
                  "{}: {} belongs to another loop body", context_, what);
  return v.expr_;
}

void Ops::checkVars(const IndexExpr &index, std::string_view what) const {
  std::set<std::string, std::less<>> symbols;
  index.collectSymbols(symbols);
  for (const std::string &s : symbols)
    KILN_CHECK_KIND(Index, !isLoopVarName(s) || ranges_.extent(s) != nullptr,
                    "{}: {} [{}] uses '{}', which is not a loop variable of this node (it has {})",
                    context_, what, index.str(), s, ranges_.names());
}

const Buffer &Ops::checkedBuffer(BufferId buffer) const {
  KILN_CHECK_KIND(Index, buffer.valid() && buffer.index < static_cast<int32_t>(buffers_.size()),
                  "{}: load of {}, which is not defined before this node ({} buffers are)",
                  context_, bufferName(buffer), buffers_.size());
  return buffers_[buffer.index];
}

Val Ops::load(BufferId buffer, std::span<const IndexExpr> index) {
  const Buffer &b = checkedBuffer(buffer);
  KILN_CHECK_KIND(Index, static_cast<int64_t>(index.size()) == b.rank(),
                  "{}: load of {} ({}) with {} index expressions; it has rank {}", context_,
                  b.name(), printType(b.meta), index.size(), b.rank());
  Expr e = blankExpr(ExprKind::Load, b.meta.dtype);
  e.buffer = buffer;
  // A position a view decoded by dims and the strides flatten again: (x floordiv k)*k*u +
  // (x mod k)*u is x*u, an affine load.
  e.index = recombineDivMod(flatIndex(index, b.meta.strides));
  checkVars(e.index, "load of " + b.name());
  return intern(std::move(e));
}

Val Ops::loadIndirect(BufferId buffer, std::span<const IndexExpr> index, size_t dim, Val position,
                      bool wrapNegative) {
  const Buffer &b = checkedBuffer(buffer);
  KILN_CHECK_KIND(Index, static_cast<int64_t>(index.size()) == b.rank() && dim < index.size(),
                  "{}: indirect load of {} ({}) along dim {} with {} index expressions", context_,
                  b.name(), printType(b.meta), dim, index.size());
  std::vector<IndexExpr> rest(index.begin(), index.end());
  rest[dim] = 0;
  return loadIndirectFlat(buffer, flatIndex(rest, b.meta.strides), b.meta.strides[dim],
                          b.meta.sizes[dim], position, wrapNegative);
}

Val Ops::loadIndirectFlat(BufferId buffer, IndexExpr flat, IndexExpr stride, IndexExpr extent,
                          Val position, bool wrapNegative) {
  const Buffer &b = checkedBuffer(buffer);
  const Expr *p = check(position, "the position of an indirect load");
  KILN_CHECK_KIND(Type, p->dtype == DType::Int64,
                  "{}: indirect load of {}: the position is {}, not i64 (insert a cast)", context_,
                  b.name(), shortName(p->dtype));
  Expr e = blankExpr(ExprKind::IndirectLoad, b.meta.dtype);
  e.operandSlots[0] = p;
  e.numOperands = 1;
  e.buffer = buffer;
  e.index = std::move(flat);
  e.indirectStride = std::move(stride);
  e.indirectExtent = std::move(extent);
  e.intValue = wrapNegative;
  checkVars(e.index, "load of " + b.name());
  return intern(std::move(e));
}

Val Ops::constant(double value, DType dtype) {
  Expr e = blankExpr(ExprKind::Constant, dtype);
  if (isFloating(dtype)) {
    e.floatValue = roundFloat(value, dtype);
    return intern(std::move(e));
  }
  auto [lo, hi] = intLimits(dtype);
  KILN_CHECK_KIND(Type,
                  std::isfinite(value) && std::trunc(value) == value && value >= double(lo) &&
                      value <= double(hi),
                  "{}: constant {} is not a value of {}", context_, value, shortName(dtype));
  return constant(static_cast<int64_t>(value), dtype);
}

Val Ops::constant(int64_t value, DType dtype) {
  if (isFloating(dtype)) { // one rounding, as a cast of the int64 would (not through double)
    Expr e = blankExpr(ExprKind::Constant, dtype);
    e.floatValue = convert({0, value}, DType::Int64, dtype).f;
    return intern(std::move(e));
  }
  auto [lo, hi] = intLimits(dtype);
  KILN_CHECK_KIND(Type, value >= lo && value <= hi, "{}: constant {} does not fit {}", context_,
                  value, shortName(dtype));
  Expr e = blankExpr(ExprKind::Constant, dtype);
  e.intValue = value;
  return intern(std::move(e));
}

Val Ops::indexValue(const IndexExpr &index) {
  checkVars(index, "index value");
  Expr e = blankExpr(ExprKind::Index, DType::Int64);
  e.index = index;
  return intern(std::move(e));
}

Val Ops::cast(Val value, DType dtype) {
  const Expr *v = check(value, "the operand of cast");
  if (v->dtype == dtype)
    return value;
  Expr e = blankExpr(ExprKind::Cast, dtype);
  e.operandSlots[0] = v;
  e.numOperands = 1;
  return intern(std::move(e));
}

void Ops::failType(ExprKind kind, std::span<const Expr *const> operands,
                   std::string_view rule) const {
  std::string types;
  for (const Expr *o : operands)
    types += (types.empty() ? "" : ", ") + std::string(shortName(o->dtype));
  fail(ErrorKind::Type, "{}: {} of ({}): {}", context_, exprKeyword(kind), types, rule);
}

Val Ops::prim(ExprKind kind, std::initializer_list<Val> operands) {
  Expr e = blankExpr(kind, DType::Bool);
  for (Val v : operands)
    e.operandSlots[e.numOperands++] =
        check(v, std::string("an operand of ") + std::string(exprKeyword(kind)));
  std::span<const Expr *const> ops = e.operands();
  TypeRule rule = exprTypeRule(kind);
  // Select checks the condition, then types like the other rules over the two values.
  std::span<const Expr *const> values = ops;
  if (rule == TypeRule::Select) {
    if (ops[0]->dtype != DType::Bool)
      failType(kind, ops, "the condition must be b8");
    values = ops.subspan(1);
  }
  DType t = values[0]->dtype;
  for (const Expr *o : values)
    if (o->dtype != t)
      failType(kind, ops, "operand dtypes differ (the loop IR does not promote: insert a cast)");
  switch (rule) {
  case TypeRule::Numeric:
    if (t == DType::Bool)
      failType(kind, ops, "needs a numeric dtype, not b8");
    break;
  case TypeRule::Float:
    if (!isFloating(t))
      failType(kind, ops, "needs a floating dtype");
    break;
  case TypeRule::Bits:
    if (!isIntegral(t, true))
      failType(kind, ops, "needs an integer or b8 dtype");
    break;
  case TypeRule::Int64:
    if (t != DType::Int64)
      failType(kind, ops, "needs i64 operands");
    break;
  default:
    break;
  }
  e.dtype = rule == TypeRule::Compare ? DType::Bool : t;
  return intern(std::move(e));
}

IndexExpr Ops::indexFloorDiv(const IndexExpr &a, const SymInt &c) const {
  return floorDivInRange(a, c, ranges_);
}

IndexExpr Ops::indexMod(const IndexExpr &a, const SymInt &c) const {
  return modInRange(a, c, ranges_);
}

Val operator+(Val a, Val b) { return a.ops().add(a, b); }
Val operator-(Val a, Val b) { return a.ops().sub(a, b); }
Val operator*(Val a, Val b) { return a.ops().mul(a, b); }
Val operator/(Val a, Val b) { return a.ops().div(a, b); }
Val operator-(Val a) { return a.ops().neg(a); }

} // namespace kiln::ir::loop

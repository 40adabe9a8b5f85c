// Lowerings of the layout copies and masks (ops.def): flip, roll, repeat and pad in the reflect,
// replicate and circular modes only remap the index, so they are views of their operand (no
// node; whatever reads them reads the operand at the new index, and fusion sees the producer
// directly). masked_fill, tril/triu, constant pad, stack and one_hot are one pointwise node
// each, selecting per element between an operand and a fill value.

#include "passes/lower/lower_context.h"

namespace kiln::passes::lower {

namespace {

using ir::OpKind;

std::vector<int64_t> intsAttrOr(const ir::Node &n, const char *name) {
  const ir::Attribute *a = n.attr(name);
  return a ? a->toInts() : std::vector<int64_t>{};
}

Val zeroOf(Ops &ops, DType dtype) {
  return dtype == DType::Bool ? ops.constant(false) : ops.constant(int64_t{0}, dtype);
}

Val indexConst(Ops &ops, const SymInt &s) {
  if (std::optional<int64_t> c = s.constant())
    return ops.constant(*c, DType::Int64);
  return ops.indexValue(s);
}

/// `e` rotated by `shift` within [0, size): the index of the element that lands at `e`. The
/// dividend stays non-negative (e + size - shift mod size), so floor and truncating mod agree.
IndexExpr rotated(const IndexExpr &e, int64_t shift, const SymInt &size) {
  return mod(e + (size - mod(SymInt(shift), size)), size);
}

/// masked_fill: where(mask, value, input), the value converted to the input's dtype the way
/// eager's `value.to(dtype)` does (a cast, so 2.5 fills an int tensor with 2).
void lowerMaskedFill(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  DType result = out.dtype;
  const ir::Node *node = &n;
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    const ir::Value *value = node->operand(2);
    Val fill = value->isTensor()
                   ? ctx.read(ops, value, i, out.sizes, result)
                   : ops.cast(LowerContext::scalarVal(ops, ctx.scalar(value),
                                                      ctx.scalar(value).dtype()),
                              result);
    Val mask = ctx.read(ops, node->operand(1), i, out.sizes, DType::Bool);
    return ops.where(mask, fill, ctx.read(ops, node->operand(0), i, out.sizes, result));
  }));
}

/// tril / triu: an element stays when its column minus its row is <= (tril) or >= (triu) the
/// diagonal, else it is zero.
void lowerTriangle(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::Attribute *diagAttr = n.attr("diagonal");
  int64_t k = diagAttr ? diagAttr->toInt() : 0;
  bool lower = n.op() == OpKind::Tril;
  int64_t r = x.rank();
  ctx.define(n.result(0), ctx.pointwise(x.sizes, [&](Ops &ops, Idx i) {
    Val offset = ops.indexValue(i[r - 1] - i[r - 2]), diag = ops.constant(k, DType::Int64);
    Val keep = lower ? ops.le(offset, diag) : ops.ge(offset, diag);
    return ops.where(keep, LowerContext::load(ops, x, i), zeroOf(ops, x.dtype));
  }));
}

void lowerFlip(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  std::vector<IndexExpr> map = loopVars(x.sizes.size());
  for (int64_t d : intsAttrOr(n, "dims")) {
    if (x.rank() == 0)
      continue;
    d = wrapDim(d, x.rank());
    map[d] = x.sizes[d] - 1 - map[d];
  }
  ctx.define(n.result(0), x.view(x.sizes, map));
}

/// roll along dims: each dim's index rotates; without dims the flat (row-major) position
/// rotates and is decoded back into the dims.
void lowerRoll(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  std::vector<int64_t> shifts = n.attr("shifts")->toInts(), dims = intsAttrOr(n, "dims");
  std::vector<IndexExpr> vars = loopVars(x.sizes.size()), map = vars;
  for (const SymInt &s : x.sizes)
    if (s == SymInt(0))
      return ctx.define(n.result(0), x); // no elements
  if (dims.empty()) {
    if (x.rank() == 0)
      return ctx.define(n.result(0), x);
    IndexExpr flat = 0;
    for (int64_t d = 0; d < x.rank(); ++d)
      flat = flat * x.sizes[d] + vars[d];
    IndexExpr pos = rotated(flat, shifts[0], numel(x.sizes));
    SymInt stride = 1;
    for (int64_t d = x.rank(); d-- > 0;) {
      IndexExpr q = floorDiv(pos, stride);
      map[d] = d == 0 ? q : mod(q, x.sizes[d]);
      stride = stride * x.sizes[d];
    }
  } else {
    for (size_t k = 0; k < dims.size(); ++k) {
      int64_t d = wrapDim(dims[k], x.rank());
      map[d] = rotated(map[d], shifts[k], x.sizes[d]);
    }
  }
  ctx.define(n.result(0), x.view(x.sizes, map));
}

/// repeat: result dim `d + lead` reads input dim d modulo its size.
void lowerRepeat(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  std::vector<int64_t> repeats = n.attr("repeats")->toInts();
  const ir::TensorMeta &out = n.result(0)->meta();
  size_t lead = out.sizes.size() - x.sizes.size();
  std::vector<IndexExpr> vars = loopVars(out.sizes.size()), map(x.sizes.size(), IndexExpr(0));
  for (size_t d = 0; d < x.sizes.size(); ++d) {
    const IndexExpr &v = vars[d + lead];
    if (x.sizes[d] == SymInt(1))
      continue;
    map[d] = repeats[d + lead] == 1 || x.sizes[d] == SymInt(0) ? v : mod(v, x.sizes[d]);
  }
  ctx.define(n.result(0), x.view(out.sizes, map));
}

/// stack: each element reads the operand its index along `dim` names (a chain of wheres, as
/// cat's), at the index without that dim.
void lowerStack(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  int64_t dim = wrapDim(n.attr("dim") ? n.attr("dim")->toInt() : 0, out.rank());
  DType result = out.dtype;
  const ir::Node *node = &n;
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> point(i.begin(), i.end());
    point.erase(point.begin() + dim);
    auto read = [&](int k) {
      return ops.cast(LowerContext::load(ops, ctx.tensor(node->operand(k)), point), result);
    };
    int last = node->numOperands() - 1;
    Val acc = read(last);
    for (int k = last; k-- > 0;)
      acc = ops.where(ops.lt(ops.indexValue(i[dim]), ops.constant(k + 1, DType::Int64)), read(k),
                      acc);
    return acc;
  }));
}

/// The fill of constant padding as eager writes it: the float value for floating dtypes, value
/// != 0 for bool, else the value truncated to int64 and converted.
Val padFill(Ops &ops, double value, DType dtype) {
  if (isFloating(dtype))
    return ops.constant(value, dtype);
  if (dtype == DType::Bool)
    return ops.constant(value != 0.0);
  return ops.cast(ops.constant(static_cast<int64_t>(value), DType::Int64), dtype);
}

void lowerPad(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  std::vector<int64_t> pad = intsAttrOr(n, "pad");
  const ir::Attribute *modeAttr = n.attr("mode"), *valueAttr = n.attr("value");
  std::string mode = modeAttr ? modeAttr->toString() : "constant";
  double value = valueAttr ? valueAttr->toDouble() : 0.0;
  int64_t k = static_cast<int64_t>(pad.size()) / 2, rank = x.rank();
  std::vector<IndexExpr> vars = loopVars(out.sizes.size()), map = vars;
  for (int64_t p = 0; p < k; ++p) {
    int64_t d = rank - 1 - p, l = pad[2 * p];
    const SymInt &size = x.sizes[d];
    IndexExpr s = vars[d] - l;
    if (mode == "constant") {
      if (size == SymInt(0)) // nothing to read: the fill everywhere
        return ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx) {
          return padFill(ops, value, out.dtype);
        }));
      map[d] = max(min(s, size - 1), SymInt(0));
    } else if (mode == "replicate") {
      map[d] = max(min(s, size - 1), SymInt(0));
    } else if (mode == "reflect") {
      IndexExpr a = max(s, -s);
      map[d] = (size - 1) - max((size - 1) - a, a - (size - 1));
    } else { // circular, pads at most the size
      map[d] = mod(s + size, size);
    }
  }
  TensorRef src = x.view(out.sizes, map);
  if (mode != "constant")
    return ctx.define(n.result(0), src);
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    std::optional<Val> inside;
    auto both = [&](Val c) { inside = inside ? ops.bitwiseAnd(*inside, c) : c; };
    for (int64_t p = 0; p < k; ++p) {
      int64_t d = rank - 1 - p;
      Val s = ops.indexValue(i[d] - pad[2 * p]);
      both(ops.ge(s, ops.constant(int64_t{0}, DType::Int64)));
      both(ops.lt(s, indexConst(ops, x.sizes[d])));
    }
    if (!inside) // no padded dim
      return LowerContext::load(ops, src, i);
    return ops.where(*inside, LowerContext::load(ops, src, i), padFill(ops, value, out.dtype));
  }));
}

/// one_hot: element [..., c] is 1 where the index at [...] equals c.
void lowerOneHot(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &idx = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  size_t r = idx.sizes.size();
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    Val v = ops.cast(LowerContext::load(ops, idx, i.first(r)), DType::Int64);
    return ops.cast(ops.eq(v, ops.indexValue(i[r])), DType::Int64);
  }));
}

} // namespace

void registerShapeOps(Registry &r) {
  r.add(OpKind::MaskedFill, lowerMaskedFill);
  r.add(OpKind::Tril, lowerTriangle);
  r.add(OpKind::Triu, lowerTriangle);
  r.add(OpKind::Flip, lowerFlip);
  r.add(OpKind::Roll, lowerRoll);
  r.add(OpKind::Repeat, lowerRepeat);
  r.add(OpKind::Stack, lowerStack);
  r.add(OpKind::Pad, lowerPad);
  r.add(OpKind::OneHot, lowerOneHot);
}

} // namespace kiln::passes::lower

// Replaying recorded bodies into a new program (see [Note: replaying a body] in rebuild.h).

#include "passes/schedule/rebuild.h"

#include "runtime/error.h"

#include <algorithm>
#include <map>
#include <set>
#include <span>
#include <unordered_map>

namespace kiln::passes::schedule {

namespace {

using ir::loop::Body;
using ir::loop::Expr;
using ir::loop::ExprKind;
using ir::loop::LoopNodeKind;
using ir::loop::Ops;
using ir::loop::ReductionKind;
using ir::loop::Val;
using Substitution = std::map<std::string, SymInt, std::less<>>;

Val applyPrim(Ops &ops, ExprKind kind, const std::vector<Val> &a) {
  switch (kind) {
#define KILN_CALL_1(M) ops.M(a[0])
#define KILN_CALL_2(M) ops.M(a[0], a[1])
#define KILN_CALL_3(M) ops.M(a[0], a[1], a[2])
#define KILN_LOOP_PRIM(E, M, K, N, R)                                                              \
  case ExprKind::E:                                                                                \
    return KILN_CALL_##N(M);
#include "ir/loop/loop.def"
#undef KILN_CALL_1
#undef KILN_CALL_2
#undef KILN_CALL_3
  default:
    fail(ErrorKind::Runtime, "rebuild: {} is not a prim", ir::loop::exprKeyword(kind));
  }
}

/// A load of `id` at flat offset `flat`: Ops::load takes one index per dim, so the offset goes
/// on a dim whose stride divides it (a unit stride, for every buffer lowering makes).
Val loadFlat(Ops &ops, BufferId id, const ir::TensorMeta &meta, const IndexExpr &flat) {
  std::vector<IndexExpr> index(meta.sizes.size(), IndexExpr(0));
  if (index.empty())
    return ops.load(id, index);
  for (size_t k = 0; k < index.size(); ++k) {
    if (meta.strides[k] == SymInt(1)) {
      index[k] = flat;
      return ops.load(id, index);
    }
  }
  for (size_t k = 0; k < index.size(); ++k) {
    const SymInt &s = meta.strides[k];
    if (s == SymInt(0))
      continue;
    IndexExpr q = floorDiv(flat, s);
    if (q * s == flat) {
      index[k] = q;
      return ops.load(id, index);
    }
  }
  fail(ErrorKind::Runtime, "rebuild: cannot express offset {} in {}", flat.str(),
       ir::printType(meta));
}

/// Re-issues bodies of `source` on a new Ops (see rebuild.h).
class Replayer {
public:
  Replayer(const LoopProgram &source, const std::vector<BufferId> &renamed,
           const std::vector<bool> &inlined, const LoopProgram &target)
      : source_(source), renamed_(renamed), inlined_(inlined), target_(target),
        producers_(producers(source)) {}

  Val replay(Ops &ops, const Body &body, const Substitution &subst) {
    std::unordered_map<const Expr *, Val> memo;
    auto sub = [&](const IndexExpr &e) {
      return subst.empty() ? e : ir::loop::recombineDivMod(e.substitute(subst));
    };
    for (const Expr *e : body.exprs()) {
      std::vector<Val> args;
      for (const Expr *o : e->operands())
        args.push_back(memo.at(o));
      Val v;
      switch (e->kind) {
      case ExprKind::Load:
        v = load(ops, e->buffer, sub(e->index));
        break;
      case ExprKind::IndirectLoad: // never inlined (fusion pins what is read indirectly)
        v = ops.loadIndirectFlat(renamed_[e->buffer.index], sub(e->index), e->indirectStride,
                                 e->indirectExtent, args[0], e->wrapsNegative());
        break;
      case ExprKind::Constant:
        v = isFloating(e->dtype) ? ops.constant(e->floatValue, e->dtype)
                                 : ops.constant(e->intValue, e->dtype);
        break;
      case ExprKind::Index:
        v = ops.indexValue(sub(e->index));
        break;
      case ExprKind::Cast:
        v = ops.cast(args[0], e->dtype);
        break;
      default:
        v = applyPrim(ops, e->kind, args);
      }
      memo.emplace(e, v);
    }
    return memo.at(body.result());
  }

private:
  Val load(Ops &ops, BufferId id, const IndexExpr &flat) {
    if (!inlined_[id.index])
      return loadFlat(ops, renamed_[id.index], target_.buffer(renamed_[id.index]).meta, flat);
    const LoopNode &producer = source_.nodes()[producers_[id.index]];
    std::optional<std::vector<IndexExpr>> point =
        decodeIndex(flat, source_.buffer(id).meta, ops.ranges());
    KILN_CHECK(point, "rebuild: inlined {} is not contiguous", ir::loop::bufferName(id));
    Substitution bind;
    for (size_t k = 0; k < point->size(); ++k)
      bind.emplace(ir::loop::loopVarName(k), (*point)[k]);
    return replay(ops, *producer.body, bind);
  }

  const LoopProgram &source_;
  const std::vector<BufferId> &renamed_;
  const std::vector<bool> &inlined_;
  const LoopProgram &target_;
  std::vector<int> producers_;
};

/// Adds a copy of `node` to `target`, bodies replayed by `r`; returns the buffers it writes.
std::vector<BufferId> emitNode(LoopProgram &target, const LoopProgram &source, const LoopNode &n,
                               Replayer &r, const std::vector<BufferId> &renamed) {
  auto body = [&](Ops &ops, std::span<const IndexExpr>) { return r.replay(ops, *n.body, {}); };
  LoopProgram::Strides strides = source.buffer(n.outputs[0]).meta.strides;
  switch (n.kind) {
  case LoopNodeKind::Pointwise:
    return {target.pointwise(n.ranges, body, strides)};
  case LoopNodeKind::Reduction:
    if (n.reduction == ReductionKind::Welford) {
      ir::loop::WelfordBuffers w = target.welford(n.ranges, n.reductionRanges, body);
      return {w.mean, w.m2, w.count};
    }
    return {target.reduction(n.reduction, n.ranges, n.reductionRanges, body, strides)};
  case LoopNodeKind::Extern: {
    std::vector<BufferId> inputs;
    for (BufferId id : n.externInputs)
      inputs.push_back(renamed[id.index]);
    std::vector<ir::TensorMeta> outs;
    for (BufferId id : n.outputs)
      outs.push_back(source.buffer(id).meta);
    return target.external(n.externOp, inputs, outs, n.attributes);
  }
  }
  return {};
}

} // namespace

namespace {

/// Decoding by matching coefficients: when `flat` is `base + sum(c_v * v)`, base a sum of
/// constant multiples of the strides (a view's offset) and each c_v a constant multiple k_v of one
/// dim's stride, that dim's index is its part of base plus `sum(k_v * v)`, provided the sum
/// stays below the dim's size. This needs no bounds on symbolic coefficients (which range-aware
/// floordiv cannot use), so `i0*s0*s0*4 + i1*s0*s0 + i2*s0 + r0` decodes to [i0, i1, i2, r0].
/// `base` as `sum(c_d * strides[d])` with constants c_d >= 0 (the offset of a view: a slice's
/// starts times the strides, `s4*s8 + s8*3` of strides [s4*s8 + s8*2, s8, 1]), or nullopt. The
/// constants come from dividing at one large value of every symbol, outermost stride first; the
/// sum is then checked symbolically, so it holds for every value.
std::optional<std::vector<int64_t>> splitOffset(const SymInt &base,
                                                std::span<const SymInt> strides) {
  std::vector<int64_t> out(strides.size(), 0);
  if (base == SymInt(0))
    return out;
  std::set<std::string, std::less<>> names;
  base.collectSymbols(names);
  for (const SymInt &s : strides)
    s.collectSymbols(names);
  ir::SymbolValues at;
  int64_t value = 1009;
  for (const std::string &n : names)
    at.emplace(n, value += 101);
  int64_t rest = 0;
  SymInt sum = 0;
  try {
    rest = base.evaluate(at);
    for (size_t d = 0; d < strides.size(); ++d) {
      int64_t stride = strides[d].evaluate(at);
      if (stride <= 0)
        continue;
      out[d] = rest / stride;
      rest -= out[d] * stride;
      sum = sum + SymInt(out[d]) * strides[d];
    }
  } catch (const Error &) { // an overflow at these values: not decoded this way
    return std::nullopt;
  }
  if (rest != 0 || !(sum == base))
    return std::nullopt;
  return out;
}

std::optional<std::vector<IndexExpr>> decodeByStrides(const IndexExpr &flat,
                                                      const ir::TensorMeta &meta,
                                                      const ir::loop::VarRanges &ranges) {
  std::optional<ir::loop::AffineForm> form = ir::loop::affineForm(flat, ranges);
  if (!form)
    return std::nullopt;
  std::optional<std::vector<int64_t>> offset = splitOffset(form->base, meta.strides);
  if (!offset || std::any_of(offset->begin(), offset->end(), [](int64_t c) { return c < 0; }))
    return std::nullopt;
  size_t rank = meta.sizes.size();
  std::vector<IndexExpr> point(rank, IndexExpr(0));
  std::vector<SymInt> reach(rank, SymInt(0)); // the largest value each dim's index takes
  for (size_t d = 0; d < rank; ++d) {
    point[d] = SymInt((*offset)[d]);
    reach[d] = SymInt((*offset)[d]);
  }
  for (const auto &[var, coeff] : form->coeffs) {
    bool placed = false;
    for (size_t d = 0; d < rank && !placed; ++d) {
      if (meta.sizes[d] == SymInt(1) || meta.strides[d] == SymInt(0))
        continue;
      std::optional<int64_t> k = floorDiv(coeff, meta.strides[d]).constant();
      if (!k || *k < 1 || !(SymInt(*k) * meta.strides[d] == coeff))
        continue;
      point[d] = point[d] + SymInt(*k) * SymInt::symbol(var);
      reach[d] = reach[d] + SymInt(*k) * (*ranges.extent(var) - 1);
      placed = true;
    }
    if (!placed)
      return std::nullopt;
  }
  for (size_t d = 0; d < rank; ++d) {
    std::optional<int64_t> slack = (meta.sizes[d] - 1 - reach[d]).constant();
    if (!slack || *slack < 0)
      return std::nullopt;
  }
  return point;
}

} // namespace

std::optional<std::vector<IndexExpr>>
decodeIndex(const IndexExpr &given, const ir::TensorMeta &meta, const ir::loop::VarRanges &ranges) {
  if (meta.strides != ir::contiguousStrides(meta.sizes))
    return std::nullopt;
  // A loop of extent 1 is always at 0: `i0*768 + i1*64 + i2` of a [1, 12, 64] buffer read in
  // a [1, 12, 64] loop nest is the point (0, i1, i2), not a row i0*12 + i1 of dim 1.
  std::map<std::string, SymInt, std::less<>> unit;
  for (const IndexExpr &v : ranges.vars())
    if (const SymInt *e = ranges.extent(v.symbolName()); e && *e == SymInt(1))
      unit.emplace(v.symbolName(), SymInt(0));
  const IndexExpr flat = unit.empty() ? given : given.substitute(unit);
  if (std::optional<std::vector<IndexExpr>> point = decodeByStrides(flat, meta, ranges))
    return point;
  std::vector<IndexExpr> point;
  bool first = true;
  for (size_t k = 0; k < meta.sizes.size(); ++k) {
    if (meta.sizes[k] == SymInt(1)) {
      point.push_back(0);
      continue;
    }
    IndexExpr q = ir::loop::floorDivInRange(flat, meta.strides[k], ranges);
    point.push_back(first ? q : ir::loop::modInRange(q, meta.sizes[k], ranges));
    first = false;
  }
  return point;
}

std::vector<int> producers(const LoopProgram &program) {
  std::vector<int> out(program.buffers().size(), -1);
  for (size_t n = 0; n < program.nodes().size(); ++n)
    for (BufferId id : program.nodes()[n].outputs)
      out[id.index] = static_cast<int>(n);
  return out;
}

std::vector<size_t> liveNodes(const LoopProgram &source, const std::vector<bool> &inlined) {
  std::vector<bool> needed(source.buffers().size(), false);
  for (BufferId id : source.outputs())
    needed[id.index] = true;
  std::vector<size_t> live;
  for (size_t n = source.nodes().size(); n-- > 0;) {
    const LoopNode &node = source.nodes()[n];
    bool isNeeded = false;
    for (BufferId id : node.outputs)
      isNeeded |= needed[id.index];
    if (!isNeeded)
      continue;
    for (BufferId id : node.reads())
      needed[id.index] = true;
    if (!inlined[node.outputs[0].index])
      live.push_back(n);
  }
  return {live.rbegin(), live.rend()};
}

LoopProgram rebuild(const LoopProgram &source, const RebuildPlan &plan) {
  LoopProgram target;
  std::vector<BufferId> renamed(source.buffers().size());
  for (BufferId id : source.inputs()) {
    const ir::TensorMeta &m = source.buffer(id).meta;
    renamed[id.index] = target.addInput(m.dtype, m.sizes, m.strides);
  }
  Replayer r(source, renamed, plan.inlined, target);
  for (size_t n : plan.order) {
    const LoopNode &node = source.nodes()[n];
    KILN_CHECK(!plan.inlined[node.outputs[0].index], "rebuild: node {} is inlined", n);
    std::vector<BufferId> written = emitNode(target, source, node, r, renamed);
    for (size_t k = 0; k < written.size(); ++k)
      renamed[node.outputs[k].index] = written[k];
  }
  for (BufferId id : source.outputs())
    target.markOutput(renamed[id.index]);
  return target;
}

std::shared_ptr<const Body> substituteVars(const LoopProgram &program, const LoopNode &node,
                                           const Substitution &subst,
                                           const ir::loop::VarRanges &ranges) {
  std::vector<BufferId> same;
  for (const ir::loop::Buffer &b : program.buffers())
    same.push_back(b.id);
  std::vector<bool> inlined(program.buffers().size(), false);
  Replayer r(program, same, inlined, program);
  return Ops::record(
      [&](Ops &ops, std::span<const IndexExpr>) { return r.replay(ops, *node.body, subst); },
      program.buffers(), ranges, "scheduled node");
}

LoopProgram extractNode(const LoopProgram &source, size_t node, std::vector<BufferId> &reads) {
  const LoopNode &n = source.nodes()[node];
  reads = n.reads();
  LoopProgram target;
  std::vector<BufferId> renamed(source.buffers().size());
  for (BufferId id : reads) {
    const ir::TensorMeta &m = source.buffer(id).meta;
    renamed[id.index] = target.addInput(m.dtype, m.sizes, m.strides);
  }
  std::vector<bool> inlined(source.buffers().size(), false);
  Replayer r(source, renamed, inlined, target);
  for (BufferId id : emitNode(target, source, n, r, renamed))
    target.markOutput(id);
  return target;
}

} // namespace kiln::passes::schedule

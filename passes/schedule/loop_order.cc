// Phase 2 and 4 of scheduling: each node's loop nest and vector lane, then what sharing a kernel
// changes (see [Note: scheduling] in schedule.h).

#include "passes/schedule/schedule_impl.h"

#include "ir/loop/index.h"
#include "ir/loop/lanes.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

namespace kiln::passes::schedule::detail {

namespace {

using ir::loop::Expr;
using ir::loop::ExprKind;
using ir::loop::LoopNode;
using ir::loop::LoopNodeKind;
using ir::loop::ReductionKind;

/// How the accesses of a body behave along a candidate lane variable.
struct LaneAccesses {
  bool affine = true;      ///< every load offset and index value is affine in the variable
  bool contiguous = false; ///< some load has coefficient 1
  bool strided = false;    ///< some load has a coefficient other than 0 and 1 (a gather, or a
                           ///< span and a shuffle up to kMaxShuffledStride in the CPU code)
};

/// Whether the value of `e` changes along `var` (some index below it mentions var).
bool varies(const Expr *e, const std::string &var, std::map<const Expr *, bool> &memo) {
  if (auto it = memo.find(e); it != memo.end())
    return it->second;
  bool v = false;
  if (e->kind == ExprKind::Load || e->kind == ExprKind::Index ||
      e->kind == ExprKind::IndirectLoad) {
    std::set<std::string, std::less<>> symbols;
    e->index.collectSymbols(symbols);
    v = symbols.count(var) > 0;
  }
  for (const Expr *o : e->operands())
    v = v || varies(o, var, memo);
  return memo[e] = v;
}

LaneAccesses accessesAlong(const ir::loop::Body &body, const std::string &var) {
  LaneAccesses a;
  std::map<const Expr *, bool> memo;
  for (const Expr *e : body.exprs()) {
    if (!e->isLoad() && e->kind != ExprKind::Index)
      continue;
    std::optional<SymInt> c = ir::loop::laneCoefficient(e->index, var);
    if (!c && e->kind == ExprKind::Load && ir::loop::clampedAlong(e->index, var)) {
      a.contiguous = true; // contiguous inside the clamp range
    } else if (!c) {
      a.affine = false;
    } else if (e->kind == ExprKind::IndirectLoad && varies(e->operand(0), var, memo)) {
      a.strided = true; // one position per lane: a gather
    } else if (e->isLoad()) {
      std::optional<int64_t> k = c->constant();
      a.contiguous |= k == 1;
      a.strided |= k != 0 && k != 1;
    }
  }
  return a;
}

/// Whether every output is stored along the innermost range loop contiguously or a few elements
/// apart (kMaxShuffledStride: a masked store of the span).
bool storesAlongLane(const LoopProgram &p, const LoopNode &node) {
  size_t k = node.ranges.size();
  for (BufferId out : node.outputs) {
    std::optional<int64_t> stride = p.buffer(out).meta.strides[k - 1].constant();
    if (!stride || *stride < 1 || *stride > kMaxShuffledStride)
      return false;
  }
  return true;
}

/// A reduction loop shorter than this leaves most of a vector empty: a reduction over a few
/// points (a 2x2 or 3x3 pooling window) vectorizes across its outputs instead (see chooseLane).
constexpr int64_t kShortReduceLane = 8;

/// Whether every load of `body` moves along `var` by a constant of at most `limit` elements.
bool loadStridesAtMost(const ir::loop::Body &body, const std::string &var, int64_t limit) {
  for (const Expr *e : body.exprs()) {
    if (!e->isLoad())
      continue;
    std::optional<SymInt> c = ir::loop::laneCoefficient(e->index, var);
    std::optional<int64_t> k = c ? c->constant() : std::nullopt;
    if (e->kind == ExprKind::IndirectLoad || !k || *k < 0 || *k > limit)
      return false;
  }
  return true;
}

/// Whether `node` reduces a window: two or more reduction loops of constant extents, at most
/// kShortReduceLane^2 points in all and its innermost loop shorter than kShortReduceLane (a 2x2
/// or 3x3 pool). A row of 2-4 (softmax over a last dim of 2) stays a reduce lane: a range lane
/// would take the shared loop its kernel's other nodes run in.
bool reducesAFewPoints(const LoopNode &node) {
  int64_t points = 1;
  for (const SymInt &r : node.reductionRanges) {
    std::optional<int64_t> e = r.constant();
    if (!e)
      return false;
    points *= *e;
  }
  return node.reductionRanges.size() >= 2 && points <= kShortReduceLane * kShortReduceLane &&
         *node.reductionRanges.back().constant() < kShortReduceLane;
}

/// The lane: the innermost reduction loop of a reduction that folds lanes (sum, prod, max, min,
/// Welford) when its loads are contiguous along it; else the innermost range loop when the
/// stores are unit-stride (or a few elements apart) along it and every access is affine in it
/// (gathers pay off against the contiguous stores of a pointwise node; a reduction would gather on
/// every reduced point, which pays only when it reduces a few points: a pooling window's max or
/// sum, one output per lane, beats a vector of 2 or 3 lanes over the window's row).
void chooseLane(const LoopProgram &p, const LoopNode &node, LoopOrder &order) {
  size_t k = node.ranges.size(), m = node.reductionRanges.size();
  bool isReduction = node.kind == LoopNodeKind::Reduction;
  ReductionKind kind = node.reduction;
  bool foldable = kind == ReductionKind::Sum || kind == ReductionKind::Prod ||
                  kind == ReductionKind::Max || kind == ReductionKind::Min ||
                  kind == ReductionKind::Welford;
  // (outputs in rows of at least 8, or of a symbolic width: a vector across them fills)
  std::optional<int64_t> width = k > 0 ? node.ranges[k - 1].constant() : std::nullopt;
  bool window = isReduction && kind != ReductionKind::Welford && foldable &&
                reducesAFewPoints(node) && k > 0 && (!width || *width >= 8);
  if (window && storesAlongLane(p, node)) {
    std::string var = ir::loop::loopVarName(k - 1);
    if (accessesAlong(*node.body, var).affine &&
        loadStridesAtMost(*node.body, var, kMaxShuffledStride)) {
      order.lane = LaneKind::Range;
      order.laneVar = var;
      return;
    }
  }
  if (isReduction && foldable && m > 0) {
    std::string var = ir::loop::reductionVarName(m - 1);
    LaneAccesses a = accessesAlong(*node.body, var);
    if (a.affine && a.contiguous && !a.strided) {
      order.lane = LaneKind::Reduce;
      order.laneVar = var;
      return;
    }
  }
  if (k > 0 && storesAlongLane(p, node)) {
    std::string var = ir::loop::loopVarName(k - 1);
    LaneAccesses a = accessesAlong(*node.body, var);
    if (a.affine && (!a.strided || !isReduction)) {
      order.lane = LaneKind::Range;
      order.laneVar = var;
    }
  }
}

/// The range variable walked in blocks with the lane of a pointwise node: a load strided along
/// the lane and unit-stride along another range variable (a transpose) reads each cache line
/// for one lane only; blocks of both variables use every line while it is in cache. The
/// variable with the most such loads wins, ties to the inner one.
std::string tileVarOf(const LoopNode &node, const LoopOrder &order) {
  size_t k = node.ranges.size();
  if (node.kind != LoopNodeKind::Pointwise || order.lane != LaneKind::Range || k < 2)
    return "";
  std::vector<int> votes(k - 1, 0);
  for (const Expr *e : node.body->exprs()) {
    if (e->kind != ExprKind::Load)
      continue;
    std::optional<SymInt> lane = ir::loop::laneCoefficient(e->index, order.laneVar);
    if (!lane)
      continue;
    std::optional<int64_t> c = lane->constant();
    if (c == 0 || c == 1) // a symbolic stride counts as strided
      continue;
    for (size_t j = 0; j + 1 < k; ++j) {
      std::optional<SymInt> cj = ir::loop::laneCoefficient(e->index, ir::loop::loopVarName(j));
      if (cj && cj->constant() == 1 && !(node.ranges[j] == SymInt(1)))
        ++votes[j];
    }
  }
  std::optional<size_t> best;
  for (size_t j = 0; j + 1 < k; ++j)
    if (votes[j] > 0 && (!best || votes[j] >= votes[*best]))
      best = j;
  return best ? ir::loop::loopVarName(*best) : "";
}

} // namespace

std::string laneLoopName(const LoopOrder &order, size_t d) {
  return order.lane == LaneKind::Reduce ? ir::loop::reductionVarName(d) : ir::loop::loopVarName(d);
}

namespace {

/// Whether loop `outer` and loop `inner` (of extent `innerExtent`: the next loop inside it that
/// is not of extent 1) of `node` walk its memory as one loop: every index of the body is affine
/// in both, with the outer coefficient the inner one times innerExtent ([Note: merged lane
/// loops]).
bool walksAsOneLoop(const LoopNode &node, const std::string &outer, const std::string &inner,
                    const SymInt &innerExtent) {
  ir::loop::VarRanges ranges = node.varRanges();
  for (const Expr *e : node.body->exprs()) {
    if (!e->isLoad() && e->kind != ExprKind::Index)
      continue;
    std::optional<ir::loop::AffineForm> form = ir::loop::affineForm(e->index, ranges);
    if (!form)
      return false;
    auto coeff = [&](const std::string &var) {
      auto it = form->coeffs.find(var);
      return it == form->coeffs.end() ? SymInt(0) : it->second;
    };
    if (!(coeff(outer) == coeff(inner) * innerExtent))
      return false;
  }
  return true;
}

/// How many loops outside the lane of `node`, alone in its kernel, run as part of the lane
/// ([Note: merged lane loops]).
size_t loopsToMerge(const LoopProgram &p, const LoopNode &node, const LoopOrder &order) {
  bool reduce = order.lane == LaneKind::Reduce;
  if (order.lane == LaneKind::None || !order.tileVar.empty() ||
      (!reduce && node.kind != LoopNodeKind::Pointwise) ||
      (reduce &&
       (node.reduction == ReductionKind::ArgMax || node.reduction == ReductionKind::ArgMin)))
    return 0;
  const std::vector<SymInt> &ranges = reduce ? node.reductionRanges : node.ranges;
  auto var = [&](size_t d) { return laneLoopName(order, d); };
  // A symbolic extent counts as 1 where a lower bound is needed (the rows left to the threads)
  // and as wide enough where an upper one is (the lane: nothing merges into it).
  auto atLeast = [](const SymInt &e) { return e.constant().value_or(1); };
  size_t lane = ranges.size() - 1, merged = 0;
  std::optional<int64_t> extent = ranges[lane].constant();
  // The outermost loop of extent other than 1 merged so far: the next one pairs with it (loops
  // of extent 1 stay at 0, whatever their coefficients).
  std::optional<size_t> inner;
  if (extent != 1)
    inner = lane;
  // Range loops keep i0 and enough rows outside the lane for the threads.
  for (size_t d = lane; d-- > (reduce ? 0 : 1);) {
    if (!extent || *extent >= kMergedLaneTarget)
      break;
    if (!reduce) {
      int64_t rows = 1;
      for (size_t j = 0; j < d; ++j)
        rows *= atLeast(ranges[j]);
      if (rows < kMinRowsOutsideLane)
        break;
    }
    std::optional<int64_t> outer = ranges[d].constant();
    // A loop of extent 1 merges as is; the first other one takes the lane's place (only loops
    // of extent 1 are inside it); each later one must walk memory as one loop with `inner`.
    bool oneLoop =
        outer == 1 || !inner || walksAsOneLoop(node, var(d), var(*inner), ranges[*inner]);
    for (BufferId out : reduce || outer == 1 ? std::vector<BufferId>{} : node.outputs) {
      // The store runs at the lane variable's stride (asScheduled renames the body only).
      const std::vector<SymInt> &strides = p.buffer(out).meta.strides;
      oneLoop = oneLoop && (inner ? strides[d] == strides[*inner] * ranges[*inner]
                                  : strides[d] == strides[lane]);
    }
    if (!oneLoop)
      break;
    if (outer != 1)
      inner = d;
    extent = outer ? std::optional<int64_t>(*extent * *outer) : std::nullopt;
    ++merged;
  }
  return merged;
}

} // namespace

std::vector<LoopOrder> chooseLoopOrders(const LoopProgram &p) {
  std::vector<LoopOrder> loops(p.nodes().size());
  for (size_t n = 0; n < p.nodes().size(); ++n) {
    const LoopNode &node = p.nodes()[n];
    if (!node.body)
      continue;
    for (size_t k = 0; k < node.ranges.size(); ++k)
      loops[n].vars.push_back(ir::loop::loopVarName(k));
    for (size_t k = 0; k < node.reductionRanges.size(); ++k)
      loops[n].vars.push_back(ir::loop::reductionVarName(k));
    chooseLane(p, node, loops[n]);
  }
  return loops;
}

size_t laneLimit(const LoopNode &node, const LoopOrder &order) {
  return order.lane == LaneKind::Range ? node.ranges.size() - 1 : SIZE_MAX;
}

void settleKernels(const LoopProgram &p, std::vector<Kernel> &kernels,
                   std::vector<LoopOrder> &loops) {
  for (Kernel &k : kernels) {
    // Nodes of a loop kernel run one after another inside its shared outer loops, so a node
    // with no loop of its own beyond them (one value per shared point: a row's statistic) runs
    // scalar.
    // The other nodes of an extern kernel (its epilogues) run one by one after the call.
    bool shared = k.kind == KernelKind::Loop && k.nodes.size() > 1;
    // A shared kernel of pointwise nodes of one shape (a chain with a value read twice, kept in
    // memory): each node runs its own loops inside the shared ones, so each merges them too.
    bool alike = shared && std::all_of(k.nodes.begin(), k.nodes.end(), [&](size_t j) {
                   const LoopNode &m = p.nodes()[j];
                   return m.body && m.kind == LoopNodeKind::Pointwise &&
                          m.ranges == p.nodes()[k.nodes[0]].ranges;
                 });
    k.parallel.clear();
    for (size_t n : k.nodes) {
      const LoopNode &node = p.nodes()[n];
      if (!node.body)
        continue;
      LoopOrder &order = loops[n];
      if (shared && order.lane == LaneKind::Range && onePointPerShared(node, k.outer.size())) {
        order.lane = LaneKind::None;
        order.laneVar.clear();
      }
      if (!shared) {
        order.tileVar = tileVarOf(node, order);
        order.mergedIntoLane = loopsToMerge(p, node, order);
      } else if (alike && order.lane == LaneKind::Range &&
                 node.ranges.size() > k.outer.size() + 1) {
        // Inside the shared loops a node still merges its own contiguous loops into the lane
        // (rows of 12 under shared [32, 16] vectorize as 144 points, not as scalar tails).
        // All of its loops inside the shared ones join the lane, or none does.
        size_t inner = node.ranges.size() - 1 - k.outer.size();
        if (loopsToMerge(p, node, order) >= inner)
          order.mergedIntoLane = inner;
      }
      size_t loops = node.ranges.size();
      if (shared)
        order.parallelLoops = k.outer.size();
      else if (!order.tileVar.empty())
        order.parallelLoops = 1;
      else // the innermost range loop stays a loop, unless a reduction loop is inside it
        order.parallelLoops =
            order.lane == LaneKind::Reduce ? loops : std::max<size_t>(1, loops - 1);
      if (order.lane == LaneKind::Range && order.mergedIntoLane > 0 && !shared)
        order.parallelLoops = loops - 1 - order.mergedIntoLane;
      order.parallelLoops = std::min(order.parallelLoops, loops);
      if (k.parallel.empty())
        for (size_t d = 0; d < order.parallelLoops; ++d)
          k.parallel += (d ? "*" : "") + ir::loop::loopVarName(d);
    }
  }
}

} // namespace kiln::passes::schedule::detail

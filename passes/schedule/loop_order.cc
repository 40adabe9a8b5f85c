// Phase 3 of scheduling: loop order (unit stride innermost) and the parallel loop.

#include "passes/schedule/schedule_impl.h"

#include <set>

namespace kiln::passes::schedule::detail {

namespace {

using ir::loop::Expr;
using ir::loop::ExprKind;
using ir::loop::IndexExpr;
using ir::loop::LoopNode;
using ir::loop::LoopNodeKind;
using ir::loop::VarRanges;

bool unitExtent(const VarRanges &ranges, std::string_view var) {
  return *ranges.extent(var) == SymInt(1);
}

/// Whether `e` mentions a reduction variable (`r<k>`).
bool usesReductionVar(const IndexExpr &e) {
  std::set<std::string, std::less<>> symbols;
  e.collectSymbols(symbols);
  for (const std::string &s : symbols)
    if (s[0] == 'r' && ir::loop::isLoopVarName(s))
      return true;
  return false;
}

/// The loop nest of `n`: the first `fixed` variables (the kernel's shared loops) stay in place;
/// of the others, the one with unit stride in the most accesses goes innermost, the rest keep
/// their order (ranges, then reduction ranges). The accesses that count are those of the
/// innermost loop body: every load and the store of a pointwise node; the loads that move with
/// a reduction variable of a reduction (its store and row-invariant loads are hoisted).
LoopOrder orderNode(const LoopProgram &p, const LoopNode &n, size_t fixed) {
  VarRanges ranges = n.varRanges();
  bool reduction = n.kind == LoopNodeKind::Reduction;
  std::vector<IndexExpr> accesses;
  for (const Expr *e : n.body->exprs())
    if (e->isLoad() && (!reduction || usesReductionVar(e->index)))
      accesses.push_back(e->index);
  std::span<const IndexExpr> vars = ranges.vars();
  if (!reduction)
    accesses.push_back(
        ir::loop::flatIndex(vars.first(n.ranges.size()), p.buffer(n.outputs[0]).meta.strides));
  std::vector<std::optional<ir::loop::AffineForm>> forms;
  for (const IndexExpr &a : accesses)
    forms.push_back(ir::loop::affineForm(a, ranges));
  int best = -1, bestScore = 0;
  for (size_t v = fixed; v < vars.size(); ++v) {
    std::string_view name = vars[v].symbolName();
    if (unitExtent(ranges, name))
      continue;
    int score = 0;
    for (const auto &f : forms) {
      if (!f)
        continue;
      auto it = f->coeffs.find(name);
      score += it != f->coeffs.end() && it->second == SymInt(1);
    }
    if (score >= bestScore && score > 0) {
      best = static_cast<int>(v);
      bestScore = score;
    }
  }
  // Already innermost when only loops of extent 1 follow it.
  bool onlyUnitAfter = true;
  for (size_t v = best + 1; best >= 0 && v < vars.size(); ++v)
    onlyUnitAfter = onlyUnitAfter && unitExtent(ranges, vars[v].symbolName());
  bool moves = best >= 0 && !onlyUnitAfter;
  LoopOrder order;
  for (size_t v = 0; v < vars.size(); ++v)
    if (!moves || static_cast<int>(v) != best)
      order.vars.emplace_back(vars[v].symbolName());
  if (moves)
    order.vars.emplace_back(vars[best].symbolName());
  return order;
}

/// The outermost loop of `order` that is not a reduction loop and not of extent 1.
std::string parallelVar(const LoopNode &n, const LoopOrder &order) {
  VarRanges ranges = n.varRanges();
  for (const std::string &v : order.vars)
    if (v[0] == 'i' && !unitExtent(ranges, v))
      return v;
  return "";
}

} // namespace

std::vector<LoopOrder> chooseLoopOrders(const LoopProgram &p, std::vector<Kernel> &kernels) {
  std::vector<LoopOrder> loops(p.nodes().size());
  for (Kernel &k : kernels) {
    bool shared = k.kind == KernelKind::Loop && k.nodes.size() > 1;
    size_t fixed = shared ? k.outer.size() : 0;
    k.parallel.clear();
    for (size_t n : k.nodes) {
      const LoopNode &node = p.nodes()[n];
      if (!node.body)
        continue;
      loops[n] = orderNode(p, node, fixed);
      if (k.parallel.empty())
        k.parallel = parallelVar(
            node,
            shared ? LoopOrder{{loops[n].vars.begin(), loops[n].vars.begin() + fixed}} : loops[n]);
    }
  }
  return loops;
}

} // namespace kiln::passes::schedule::detail

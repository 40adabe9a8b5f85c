// Phase 3 of scheduling: grouping nodes into kernels (see [Note: scheduling] in schedule.h).

#include "passes/schedule/rebuild.h"
#include "passes/schedule/schedule_impl.h"

#include <algorithm>
#include <limits>
#include <optional>

namespace kiln::passes::schedule::detail {

namespace {

using ir::loop::Expr;
using ir::loop::ExprKind;
using ir::loop::IndexExpr;
using ir::loop::LoopNode;
using ir::loop::LoopNodeKind;

/// Whether `n` computes one number: a pointwise node without loops (an optimizer's bias
/// correction, a step counter, arithmetic on run-time numbers).
bool isScalar(const LoopNode &n) {
  return n.kind == LoopNodeKind::Pointwise && n.ranges.empty() && n.reductionRanges.empty();
}

/// The loads in `n`'s body of buffers that kernel `k` writes.
std::vector<const Expr *> loadsFrom(const LoopNode &n, const std::vector<int> &kernelOf, int k) {
  std::vector<const Expr *> out;
  for (const Expr *e : n.body->exprs())
    if (e->isLoad() && kernelOf[e->buffer.index] == k)
      out.push_back(e);
  return out;
}

/// How many leading loop variables of `n` the load `e` reads at themselves (`i0, i1, ...`),
/// up to `limit`; 0 when the buffer's layout cannot be decoded.
size_t localPrefix(const LoopProgram &p, const LoopNode &n, const Expr *e, size_t limit) {
  if (e->kind == ExprKind::IndirectLoad)
    return 0; // the row it reads is data
  const ir::TensorMeta &meta = p.buffer(e->buffer).meta;
  std::optional<std::vector<IndexExpr>> point = decodeIndex(e->index, meta, n.varRanges());
  if (!point)
    return 0;
  size_t q = 0;
  auto same = [&](size_t d) { // a dim of size 1 matches a loop of extent 1
    return (*point)[d] == SymInt::symbol(ir::loop::loopVarName(d)) ||
           (meta.sizes[d] == SymInt(1) && d < n.ranges.size() && n.ranges[d] == SymInt(1));
  };
  while (q < limit && q < point->size() && same(q))
    ++q;
  return q;
}

/// Whether `n` reads a buffer that a node of `kernel` reads too (a horizontal fusion that loads
/// it once). An independent node that shares nothing joins only a kernel a few kernels back:
/// moved further, it would read its inputs cold, and a kernel of many unrelated reductions (a
/// backward's bias gradients, hoisted together) reads every one of them from memory.
bool sharesARead(const LoopProgram &p, const Kernel &kernel, const LoopNode &n) {
  std::vector<BufferId> mine = n.reads();
  for (size_t j : kernel.nodes)
    for (BufferId id : p.nodes()[j].reads())
      if (std::find(mine.begin(), mine.end(), id) != mine.end())
        return true;
  return false;
}

/// How many kernels an independent node may move past to join a kernel it shares no read with.
constexpr size_t kMaxIndependentHops = 2;

/// The points of `n` inside its first `shared` loops (a symbolic extent counts as many).
int64_t innerPoints(const LoopNode &n, size_t shared) {
  int64_t points = 1;
  for (size_t d = shared; d < n.ranges.size(); ++d) {
    std::optional<int64_t> extent = n.ranges[d].constant();
    if (!extent)
      return std::numeric_limits<int64_t>::max();
    points *= *extent;
  }
  return points;
}

/// The fewest points a pointwise node of a shared-loop kernel keeps inside the shared loops.
constexpr int64_t kMinVectorPoints = 128;

/// Whether loop node `n` can run inside loop kernel `k`, `hops` kernels before the latest;
/// shrinks its outer ranges if so. The shared loops stay outside the vector loop of every node
/// that does not read from the kernel (`limit`: how many loops that allows).
bool joinLoop(const LoopProgram &p, const LoopOrder &order, Kernel &kernel, size_t &limit,
              const LoopNode &n, const std::vector<int> &kernelOf, int k, size_t hops) {
  if (kernel.outer.empty()) // a kernel of numbers: others join it, one statement each
    return isScalar(n) && std::all_of(kernel.nodes.begin(), kernel.nodes.end(),
                                      [&](size_t j) { return isScalar(p.nodes()[j]); });
  size_t prefix = 0;
  while (prefix < kernel.outer.size() && prefix < n.ranges.size() &&
         kernel.outer[prefix] == n.ranges[prefix])
    ++prefix;
  std::vector<const Expr *> deps = loadsFrom(n, kernelOf, k);
  for (const Expr *e : deps)
    prefix = std::min(prefix, localPrefix(p, n, e, prefix));
  // A dependent node may narrow the shared loops to the rows it reads (softmax's pointwise
  // after its reductions); an independent one joins only loops of its own shape (up to trailing
  // loops of extent 1).
  bool onlyUnitDropped = true;
  for (size_t d = prefix; d < kernel.outer.size(); ++d)
    onlyUnitDropped = onlyUnitDropped && kernel.outer[d] == SymInt(1);
  if (prefix == 0 || (deps.empty() && !onlyUnitDropped))
    return false;
  if (deps.empty() && hops > kMaxIndependentHops && !sharesARead(p, kernel, n))
    return false; // nothing to share: joining would only move n far from its producers
  size_t shared = std::min(prefix, limit);
  if (deps.empty())
    shared = std::min(shared, laneLimit(n, order));
  if (shared == 0)
    return false; // a shared loop would take a node's vector loop
  // A kernel of pointwise nodes shares only the loops that leave each node a vector loop worth
  // the name: exp(x) stored and read back twice over [32, 16, 12, 12] shares [32, 16] and each
  // node runs 144 contiguous points per row, not 12 (scalar tails: 10x slower than unfused).
  // (Only for nodes of one shape: a broadcast producer, one value per shared point, stays a
  // register of the shared loops.)
  auto alike = [&](size_t j) {
    return p.nodes()[j].kind == LoopNodeKind::Pointwise && p.nodes()[j].ranges == n.ranges;
  };
  if (n.kind == LoopNodeKind::Pointwise &&
      std::all_of(kernel.nodes.begin(), kernel.nodes.end(), alike))
    while (shared > 1 && innerPoints(n, shared) < kMinVectorPoints)
      --shared;
  kernel.outer.resize(shared);
  if (deps.empty())
    limit = std::min(limit, laneLimit(n, order));
  return true;
}

/// Whether `n` is an epilogue of extern kernel `k`: same shape as the extern's result,
/// reading what the kernel wrote only at the point it computes.
bool joinExtern(const LoopProgram &p, const Kernel &kernel, const LoopNode &n,
                const std::vector<int> &kernelOf, int k) {
  if (n.kind != LoopNodeKind::Pointwise || n.ranges != kernel.outer)
    return false;
  std::vector<const Expr *> deps = loadsFrom(n, kernelOf, k);
  for (const Expr *e : deps)
    if (localPrefix(p, n, e, n.ranges.size()) != n.ranges.size())
      return false;
  return !deps.empty();
}

/// The points a loop kernel with range loops computes (its nodes' range and reduction points)
/// when it may share a launch (constant sizes, at most kMaxLaunchMemberPoints); else nullopt.
std::optional<int64_t> launchMemberPoints(const LoopProgram &p, const Kernel &kernel) {
  if (kernel.kind != KernelKind::Loop || kernel.outer.empty())
    return std::nullopt;
  int64_t points = 0;
  for (size_t j : kernel.nodes) {
    const LoopNode &n = p.nodes()[j];
    std::optional<int64_t> range = numel(n.ranges).constant();
    std::optional<int64_t> reduced = numel(n.reductionRanges).constant();
    if (!range || !reduced)
      return std::nullopt;
    points += *range * std::max<int64_t>(1, *reduced);
  }
  if (points > kMaxLaunchMemberPoints)
    return std::nullopt;
  return points;
}

} // namespace

void orderForLaunches(const LoopProgram &p, std::vector<Kernel> &kernels) {
  // Per kernel, as grouped (a window is reordered only after it is scanned, and never again).
  std::vector<std::optional<int64_t>> points;
  for (const Kernel &k : kernels)
    points.push_back(launchMemberPoints(p, k));
  std::vector<int> kernelOf(p.buffers().size(), -1);
  for (size_t k = 0; k < kernels.size(); ++k)
    for (size_t j : kernels[k].nodes)
      for (BufferId id : p.nodes()[j].outputs)
        kernelOf[id.index] = static_cast<int>(k);
  size_t begin = 0;
  while (begin < kernels.size()) {
    // A window: consecutive small kernels of at most kMaxLaunchPoints points in all.
    size_t end = begin;
    int64_t total = 0;
    while (end < kernels.size() && points[end] && total + *points[end] <= kMaxLaunchPoints)
      total += *points[end++];
    if (end - begin < 2) {
      begin = std::max(end, begin + 1);
      continue;
    }
    // Each kernel's level: one more than the highest of the window's kernels it reads from.
    std::vector<int> level(end - begin, 0);
    for (size_t k = begin; k < end; ++k)
      for (size_t j : kernels[k].nodes)
        for (BufferId id : p.nodes()[j].reads()) {
          int from = kernelOf[id.index];
          if (from >= static_cast<int>(begin) && from < static_cast<int>(k))
            level[k - begin] = std::max(level[k - begin], level[from - begin] + 1);
        }
    std::vector<size_t> order(end - begin);
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return level[a] < level[b]; });
    std::vector<Kernel> sorted;
    for (size_t i : order)
      sorted.push_back(std::move(kernels[begin + i]));
    for (size_t i = 0; i < sorted.size(); ++i) {
      kernels[begin + i] = std::move(sorted[i]);
      for (size_t j : kernels[begin + i].nodes)
        for (BufferId id : p.nodes()[j].outputs)
          kernelOf[id.index] = static_cast<int>(begin + i);
    }
    begin = end;
  }
}

void groupLaunches(const LoopProgram &p, std::vector<Kernel> &kernels) {
  // Per buffer, the first kernel of the launch that wrote it (-1: none).
  std::vector<int> writtenIn(p.buffers().size(), -1);
  int launch = -1;
  int64_t launchPoints = 0;
  bool previousJoins = false;
  for (size_t k = 0; k < kernels.size(); ++k) {
    Kernel &kernel = kernels[k];
    std::optional<int64_t> points = launchMemberPoints(p, kernel);
    bool joins = points && !kernel.parallel.empty();
    bool independent = true;
    for (size_t j : kernel.nodes)
      for (BufferId id : p.nodes()[j].reads())
        independent = independent && writtenIn[id.index] != launch;
    kernel.withPrevious =
        joins && previousJoins && independent && launchPoints + *points <= kMaxLaunchPoints;
    if (!kernel.withPrevious) {
      launch = static_cast<int>(k);
      launchPoints = 0;
    }
    for (size_t j : kernel.nodes)
      for (BufferId id : p.nodes()[j].outputs)
        writtenIn[id.index] = launch;
    launchPoints += points.value_or(0);
    previousJoins = joins;
  }
}

std::vector<Kernel> groupKernels(const LoopProgram &p, const std::vector<LoopOrder> &loops,
                                 bool fuse) {
  std::vector<Kernel> kernels;
  std::vector<int> kernelOf(p.buffers().size(), -1);
  std::vector<size_t> limits; // per kernel: how many loops its nodes may share (joinLoop)
  for (size_t i = 0; i < p.nodes().size(); ++i) {
    const LoopNode &n = p.nodes()[i];
    int placed = -1;
    for (int k = static_cast<int>(kernels.size()) - 1; fuse && n.body && k >= 0; --k) {
      Kernel &kernel = kernels[k];
      size_t hops = kernels.size() - 1 - static_cast<size_t>(k);
      bool joins = kernel.kind == KernelKind::Loop
                       ? joinLoop(p, loops[i], kernel, limits[k], n, kernelOf, k, hops)
                       : joinExtern(p, kernel, n, kernelOf, k);
      if (joins) {
        placed = k;
        break;
      }
      bool readsFromK = false; // then n cannot move before kernel k
      for (BufferId id : n.reads())
        readsFromK |= kernelOf[id.index] == k;
      if (readsFromK)
        break;
    }
    if (placed < 0) {
      Kernel kernel;
      kernel.kind = n.kind == LoopNodeKind::Extern ? KernelKind::Extern : KernelKind::Loop;
      kernel.outer = n.kind == LoopNodeKind::Extern ? p.buffer(n.outputs[0]).meta.sizes : n.ranges;
      // A number runs right after what it reads, so the loops after it that read it can still
      // fuse with the loops before it (Adam's bias corrections between the moment updates and
      // the parameter update).
      size_t at = kernels.size();
      if (fuse && isScalar(n)) {
        at = 0;
        for (BufferId id : n.reads())
          if (kernelOf[id.index] >= 0)
            at = std::max(at, static_cast<size_t>(kernelOf[id.index]) + 1);
        for (int &k : kernelOf)
          k += k >= static_cast<int>(at) ? 1 : 0;
      }
      kernels.insert(kernels.begin() + static_cast<std::ptrdiff_t>(at), std::move(kernel));
      limits.insert(limits.begin() + static_cast<std::ptrdiff_t>(at),
                    n.body ? laneLimit(n, loops[i]) : 0);
      placed = static_cast<int>(at);
    }
    kernels[placed].nodes.push_back(i);
    for (BufferId id : n.outputs)
      kernelOf[id.index] = placed;
  }
  return kernels;
}

} // namespace kiln::passes::schedule::detail

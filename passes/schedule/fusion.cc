// Phase 1 of scheduling: which pointwise producers are inlined into their readers (the rule is
// in [Note: scheduling], schedule.h).

#include "ir/loop/index.h"
#include "passes/schedule/rebuild.h"
#include "passes/schedule/schedule_impl.h"

#include <algorithm>
#include <set>

namespace kiln::passes::schedule::detail {

namespace {

using ir::loop::Expr;
using ir::loop::ExprKind;
using ir::loop::IndexExpr;
using ir::loop::LoopNode;
using ir::loop::LoopNodeKind;

bool isArithmetic(ExprKind k) {
  return k != ExprKind::Load && k != ExprKind::IndirectLoad && k != ExprKind::Constant &&
         k != ExprKind::Index && k != ExprKind::Cast;
}

/// The loads of each buffer in one body (hash-consing makes equal loads one Expr).
std::vector<std::pair<BufferId, std::vector<const Expr *>>> loadsByBuffer(const LoopNode &n) {
  std::vector<std::pair<BufferId, std::vector<const Expr *>>> out;
  for (const Expr *e : n.body->exprs()) {
    if (!e->isLoad())
      continue;
    auto it = std::find_if(out.begin(), out.end(), [&](auto &p) { return p.first == e->buffer; });
    if (it == out.end())
      out.push_back({e->buffer, {e}});
    else
      it->second.push_back(e);
  }
  return out;
}

/// Whether `reader` reading a buffer of `meta` through `load` touches each element at most once
/// per element it computes: as many iterations as elements, and every non-trivial loop variable
/// in the index.
bool visitsOnce(const LoopNode &reader, const Expr *load, const ir::TensorMeta &meta) {
  SymInt iterations = numel(reader.ranges) * numel(reader.reductionRanges);
  if (!(numel(meta.sizes) == iterations))
    return false;
  std::set<std::string, std::less<>> used;
  load->index.collectSymbols(used);
  ir::loop::VarRanges ranges = reader.varRanges();
  for (const IndexExpr &v : ranges.vars())
    if (!(*ranges.extent(v.symbolName()) == SymInt(1)) && !used.count(v.symbolName()))
      return false;
  return true;
}

/// Whether `node`'s body computes with its loop indices beyond affine loads: an `index` value
/// (cat's choice of operand, masks) or a load at a clamped index (pad, cat's parts). Inlined
/// through a reshape that merged dims, such a body keeps a floordiv and a mod per element,
/// where an affine load of a contiguous buffer folds them away.
bool usesIndicesNonAffinely(const LoopNode &node) {
  ir::loop::VarRanges ranges = node.varRanges();
  return std::any_of(node.body->exprs().begin(), node.body->exprs().end(), [&](const Expr *e) {
    return e->kind == ExprKind::Index ||
           (e->kind == ExprKind::Load && !ir::loop::affineForm(e->index, ranges));
  });
}
/// Whether inlining the producer of a buffer of `meta` into `reader` keeps `load` cheap:
/// - a guarded read (a clamped index: a padded pool or pad) of a multi-dim buffer is not
///   inlined: the stored producer read back is faster (ResNet's stem pool over a relu: 0.70 ms
///   stored, 2.25 ms with the relu inlined into the 3x3 window);
/// - an affine read through merged dims of a producer that uses its indices
///   (`cat(...).reshape(...)`) would decode each position with a floordiv and a mod per
///   element, which costs more than storing the producer's result and reading it back.
bool decodesWithoutDivision(const LoopNode &reader, const Expr *load, const ir::TensorMeta &meta,
                            bool producerUsesIndices) {
  ir::loop::VarRanges ranges = reader.varRanges();
  if (load->index.hasDivision())
    return true; // a division already there is the reader's own
  if (!ir::loop::mentionsLoopVars(load->index))
    return true; // one element: its position decodes once, to constants or size symbols
  bool affine = ir::loop::affineForm(load->index, ranges).has_value();
  if (affine && !producerUsesIndices)
    return true; // views keep their decodes
  if (!affine && meta.rank() > 1)
    return false;
  std::optional<std::vector<IndexExpr>> point = decodeIndex(load->index, meta, ranges);
  return point && std::none_of(point->begin(), point->end(),
                               [](const IndexExpr &e) { return e.hasDivision(); });
}

} // namespace

SymInt numel(std::span<const SymInt> sizes) {
  SymInt n = 1;
  for (const SymInt &s : sizes)
    n = n * s;
  return n;
}

std::vector<bool> chooseInlined(const LoopProgram &p) {
  size_t numBuffers = p.buffers().size();
  std::vector<bool> inlined(numBuffers, false), pinned(numBuffers, false);
  for (BufferId id : p.outputs())
    pinned[id.index] = true;
  struct Reader {
    size_t node;
    std::vector<const Expr *> loads;
  };
  std::vector<std::vector<Reader>> readers(numBuffers);
  for (size_t n = 0; n < p.nodes().size(); ++n) {
    const LoopNode &node = p.nodes()[n];
    if (node.kind == LoopNodeKind::Extern) {
      for (BufferId id : node.externInputs)
        pinned[id.index] = true; // a library reads whole buffers
      continue;
    }
    for (auto &[id, loads] : loadsByBuffer(node)) {
      readers[id.index].push_back({n, loads});
      for (const Expr *e : loads) // its values are read at positions only the run knows
        pinned[id.index] = pinned[id.index] || e->kind == ExprKind::IndirectLoad;
    }
  }
  std::vector<int> producer = producers(p);
  std::vector<int> cost(p.nodes().size(), 0);
  std::vector<bool> expensive(p.nodes().size(), false);
  for (size_t n = 0; n < p.nodes().size(); ++n) {
    const LoopNode &node = p.nodes()[n];
    if (!node.body)
      continue;
    for (const Expr *e : node.body->exprs()) {
      cost[n] += isArithmetic(e->kind);
      expensive[n] = expensive[n] || isTranscendental(e->kind);
      if (e->kind == ExprKind::Load && inlined[e->buffer.index]) {
        cost[n] += cost[producer[e->buffer.index]];
        expensive[n] = expensive[n] || expensive[producer[e->buffer.index]];
      }
    }
    BufferId out = node.outputs[0];
    const std::vector<Reader> &rs = readers[out.index];
    const ir::TensorMeta &meta = p.buffer(out).meta;
    if (node.kind != LoopNodeKind::Pointwise || pinned[out.index] || rs.empty() ||
        meta.strides != ir::contiguousStrides(meta.sizes))
      continue;
    size_t loads = 0;
    bool divisionFree = true, usesIndices = usesIndicesNonAffinely(node);
    size_t varyingLoads = 0; // loads at a point that moves; the last one and its reader
    const Expr *varying = nullptr;
    const LoopNode *varyingReader = nullptr;
    for (const Reader &r : rs) {
      loads += r.loads.size();
      for (const Expr *e : r.loads) {
        divisionFree =
            divisionFree && decodesWithoutDivision(p.nodes()[r.node], e, meta, usesIndices);
        if (e->kind == ExprKind::Load && !ir::loop::mentionsLoopVars(e->index) && !expensive[n])
          continue;
        ++varyingLoads;
        varying = e;
        varyingReader = &p.nodes()[r.node];
      }
    }
    if (!divisionFree)
      continue;
    // Loads at a fixed element (`A[i, j] -= v; A[i, j] /= A[j, j]`: each write's value reads one
    // element of the array the last write made, at a constant or run-time position) recompute a
    // cheap producer at one point (its region tests fold); they do not count against reading it
    // once. An expensive producer's
    // value at the point is stored instead: the code generator recomputes it per row.
    bool once = varyingLoads == 1 && visitsOnce(*varyingReader, varying, meta);
    // Recomputing at each extra load must stay cheap too: a stencil reading a producer at
    // three offsets would otherwise redo it three times, and chains of stencils (time steps of
    // NumPy code) compound that.
    bool cheap = !expensive[n] && cost[n] <= kCheapOps && loads <= size_t(kMaxCheapLoads) &&
                 cost[n] * int(loads - 1) <= kCheapOps;
    inlined[out.index] = once || cheap;
  }
  return inlined;
}

} // namespace kiln::passes::schedule::detail

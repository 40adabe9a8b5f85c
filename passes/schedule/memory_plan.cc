// Phase 5 of scheduling: local buffers, and memory slots reused across kernels.

#include "passes/schedule/rebuild.h"
#include "passes/schedule/schedule_impl.h"

namespace kiln::passes::schedule::detail {

namespace {

using ir::loop::BufferKind;
using ir::loop::IndexExpr;
using ir::loop::LoopNode;
using ir::loop::LoopNodeKind;

/// Per node: the buffers it may overwrite in place, because it is a pointwise node, their only
/// reader, reads them only at the point it writes (an epilogue after a GEMM), and writes a
/// buffer of the same strides (so that point is the same address in both).
std::vector<std::vector<BufferId>> inPlaceCandidates(const LoopProgram &p) {
  std::vector<int> readers(p.buffers().size(), 0);
  for (const LoopNode &n : p.nodes())
    for (BufferId id : n.reads())
      ++readers[id.index];
  std::vector<std::vector<BufferId>> out(p.nodes().size());
  for (size_t i = 0; i < p.nodes().size(); ++i) {
    const LoopNode &n = p.nodes()[i];
    if (n.kind != LoopNodeKind::Pointwise)
      continue;
    std::vector<IndexExpr> self = n.varRanges().vars();
    for (BufferId id : n.reads()) {
      const ir::TensorMeta &meta = p.buffer(id).meta;
      const ir::TensorMeta &written = p.buffer(n.outputs[0]).meta;
      bool pointwise = readers[id.index] == 1 && meta.sizes == n.ranges &&
                       written.strides == meta.strides && n.outputs.size() == 1;
      for (const ir::loop::Expr *e : n.body->exprs())
        if (pointwise && e->isLoad() && e->buffer == id)
          pointwise = e->kind == ir::loop::ExprKind::Load &&
                      decodeIndex(e->index, meta, n.varRanges()) == self;
      if (pointwise)
        out[i].push_back(id);
    }
  }
  return out;
}

/// Whether a register holds exactly what memory would: bool is computed as i1 and stored as a
/// byte, float16 and bfloat16 are computed in float32 and rounded when stored, so a register
/// would skip the rounding that a load of the stored value sees.
bool registerExact(DType t) { return t != DType::Bool && !isReducedFloat(t); }

} // namespace

void planMemory(const LoopProgram &p, const std::vector<Kernel> &kernels,
                std::vector<BufferPlan> &plans, std::vector<MemorySlot> &slots) {
  size_t numBuffers = p.buffers().size();
  std::vector<int> kernelOfNode(p.nodes().size(), -1);
  for (size_t k = 0; k < kernels.size(); ++k)
    for (size_t n : kernels[k].nodes)
      kernelOfNode[n] = static_cast<int>(k);
  std::vector<int> producedIn(numBuffers, -1), lastUse(numBuffers, -1);
  std::vector<int> producer(numBuffers, -1);
  std::vector<bool> escapes(numBuffers, false), read(numBuffers, false);
  for (size_t n = 0; n < p.nodes().size(); ++n) {
    const LoopNode &node = p.nodes()[n];
    for (BufferId id : node.outputs) {
      producedIn[id.index] = kernelOfNode[n];
      producer[id.index] = static_cast<int>(n);
    }
  }
  for (size_t n = 0; n < p.nodes().size(); ++n) {
    for (BufferId id : p.nodes()[n].reads()) {
      lastUse[id.index] = std::max(lastUse[id.index], kernelOfNode[n]);
      escapes[id.index] = escapes[id.index] || kernelOfNode[n] != producedIn[id.index];
      read[id.index] = true;
    }
  }
  // A register holds one value per point of the shared loops: the producer has no loop of its
  // own, and its readers (later nodes: a kernel's nodes run in order) are all in its kernel.
  // A result nobody reads (Welford's count) is never stored.
  auto inRegister = [&](const ir::loop::Buffer &b) {
    int n = producer[b.id.index];
    if (n < 0 || p.nodes()[n].kind == LoopNodeKind::Extern)
      return false;
    if (!read[b.id.index])
      return true;
    if (escapes[b.id.index] || !registerExact(b.meta.dtype))
      return false;
    const Kernel &kernel = kernels[kernelOfNode[n]];
    const LoopNode &node = p.nodes()[n];
    return kernel.kind == KernelKind::Loop && kernel.nodes.size() > 1 &&
           onePointPerShared(node, kernel.outer.size());
  };
  plans.assign(numBuffers, BufferPlan{});
  for (const ir::loop::Buffer &b : p.buffers()) {
    BufferPlan &plan = plans[b.id.index];
    if (b.kind == BufferKind::Input)
      plan.kind = StorageKind::Input;
    else if (b.kind == BufferKind::Output)
      plan.kind = StorageKind::Output;
    else if (inRegister(b))
      plan.kind = StorageKind::Local;
  }
  // Greedy reuse in kernel order: a slot frees after the last kernel reading its buffer, or is
  // taken over in place by a pointwise node that reads its buffer last, point by point.
  std::vector<std::vector<BufferId>> inPlace = inPlaceCandidates(p);
  slots.clear();
  std::vector<bool> released(numBuffers, false), slotFree;
  for (int k = 0; k < static_cast<int>(kernels.size()); ++k) {
    for (size_t b = 0; b < numBuffers; ++b) {
      if (plans[b].kind != StorageKind::Allocated || released[b] || producedIn[b] >= k ||
          lastUse[b] >= k)
        continue;
      released[b] = true;
      slotFree[plans[b].slot] = true;
    }
    // A reduction may stash values where a later node of its kernel writes (the emitter does,
    // for softmax's exp): a node after one must not write over what it still reads.
    bool afterReduction = false;
    for (size_t n : kernels[k].nodes) {
      bool inPlaceAllowed = !afterReduction;
      afterReduction = afterReduction || p.nodes()[n].kind == LoopNodeKind::Reduction;
      for (BufferId id : p.nodes()[n].outputs) {
        BufferPlan &plan = plans[id.index];
        if (plan.kind != StorageKind::Allocated)
          continue;
        const ir::TensorMeta &m = p.buffer(id).meta;
        SymInt bytes = numel(m.sizes) * SymInt(itemsize(m.dtype));
        for (BufferId a : inPlace[n]) {
          const BufferPlan &old = plans[a.index];
          if (inPlaceAllowed && plan.slot < 0 && old.kind == StorageKind::Allocated &&
              !released[a.index] && slots[old.slot].bytes == bytes &&
              slots[old.slot].buffers.back() == a) {
            plan.slot = old.slot;
            released[a.index] = true; // handed over, not freed
          }
        }
        for (size_t s = 0; s < slots.size() && plan.slot < 0; ++s)
          if (slotFree[s] && slots[s].bytes == bytes)
            plan.slot = static_cast<int>(s);
        if (plan.slot < 0) {
          plan.slot = static_cast<int>(slots.size());
          slots.push_back(MemorySlot{bytes, {}});
          slotFree.push_back(false);
        }
        slotFree[plan.slot] = false;
        slots[plan.slot].buffers.push_back(id);
      }
    }
  }
}

} // namespace kiln::passes::schedule::detail

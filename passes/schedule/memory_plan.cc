// Phase 5 of scheduling: local buffers, memory slots and their lifetimes (see [Note: memory plan]
// in schedule.h).

#include "passes/schedule/schedule_impl.h"

#include "ir/loop/index.h"

#include <algorithm>

namespace kiln::passes::schedule::detail {

namespace {

using ir::loop::BufferKind;
using ir::loop::Expr;
using ir::loop::ExprKind;
using ir::loop::IndexExpr;
using ir::loop::LoopNode;
using ir::loop::LoopNodeKind;

/// Whether a register holds exactly what memory would: bool is computed as i1 and stored as a
/// byte, float16 and bfloat16 are computed in float32 and rounded when stored, so a register
/// would skip the rounding that a load of the stored value sees.
bool registerExact(DType t) { return t != DType::Bool && !isReducedFloat(t); }

/// Who produces and reads each buffer, by node and by kernel.
struct Uses {
  std::vector<int> kernelOfNode;
  std::vector<int> producer, producedIn, lastRead, readers;
  std::vector<bool> escapes; ///< read by a node of another kernel than its producer's

  Uses(const LoopProgram &p, const std::vector<Kernel> &kernels) {
    size_t numBuffers = p.buffers().size();
    kernelOfNode.assign(p.nodes().size(), -1);
    for (size_t k = 0; k < kernels.size(); ++k)
      for (size_t n : kernels[k].nodes)
        kernelOfNode[n] = static_cast<int>(k);
    producer.assign(numBuffers, -1);
    producedIn.assign(numBuffers, -1);
    lastRead.assign(numBuffers, -1);
    readers.assign(numBuffers, 0);
    escapes.assign(numBuffers, false);
    for (size_t n = 0; n < p.nodes().size(); ++n)
      for (BufferId id : p.nodes()[n].outputs) {
        producer[id.index] = static_cast<int>(n);
        producedIn[id.index] = kernelOfNode[n];
      }
    for (size_t n = 0; n < p.nodes().size(); ++n)
      for (BufferId id : p.nodes()[n].reads()) {
        ++readers[id.index];
        lastRead[id.index] = std::max(lastRead[id.index], kernelOfNode[n]);
        escapes[id.index] = escapes[id.index] || kernelOfNode[n] != producedIn[id.index];
      }
  }
};

/// Whether a buffer is never stored: a register (one value per point of its kernel's shared
/// loops, read only inside that kernel: the code keeps it in a register) or a result nobody
/// reads (Welford's count; an extern's extra result).
bool isLocal(const LoopProgram &p, const std::vector<Kernel> &kernels, const Uses &uses,
             const ir::loop::Buffer &b) {
  int n = uses.producer[b.id.index];
  if (n < 0)
    return false;
  if (uses.readers[b.id.index] == 0)
    return true;
  const LoopNode &node = p.nodes()[n];
  if (node.kind == LoopNodeKind::Extern || uses.escapes[b.id.index] || !registerExact(b.meta.dtype))
    return false;
  const Kernel &kernel = kernels[uses.kernelOfNode[n]];
  return kernel.kind == KernelKind::Loop && kernel.nodes.size() > 1 &&
         onePointPerShared(node, kernel.outer.size());
}

/// Whether pointwise node `k` may write `out` over `read`: it is `read`'s only reader, loads it
/// only at the point it writes, both have the same sizes and strides (so that point is the same
/// address in both), and no reduction runs before it in its kernel (the code may stash a
/// reduction's values in a later node's output: softmax's exp).
bool overwritesInPlace(const LoopProgram &p, const Kernel &kernel, const Uses &uses, size_t k,
                       BufferId read, BufferId out) {
  const LoopNode &node = p.nodes()[k];
  const ir::TensorMeta &a = p.buffer(read).meta, &b = p.buffer(out).meta;
  if (node.kind != LoopNodeKind::Pointwise || uses.readers[read.index] != 1 ||
      a.sizes != node.ranges || a.sizes != b.sizes || a.strides != b.strides ||
      itemsize(a.dtype) != itemsize(b.dtype))
    return false;
  for (size_t n : kernel.nodes) {
    if (n == k)
      break;
    if (p.nodes()[n].kind == LoopNodeKind::Reduction)
      return false;
  }
  IndexExpr self = ir::loop::flatIndex(node.varRanges().vars(), a.strides);
  for (const Expr *e : node.body->exprs())
    if (e->isLoad() && e->buffer == read && (e->kind != ExprKind::Load || !(e->index == self)))
      return false;
  return true;
}

} // namespace

void planMemory(const LoopProgram &p, const std::vector<Kernel> &kernels,
                std::vector<BufferPlan> &plans, std::vector<MemorySlot> &slots) {
  size_t numBuffers = p.buffers().size();
  Uses uses(p, kernels);
  plans.assign(numBuffers, BufferPlan{});
  for (const ir::loop::Buffer &b : p.buffers()) {
    BufferPlan &plan = plans[b.id.index];
    if (b.kind == BufferKind::Input)
      plan.kind = StorageKind::Input;
    else if (b.kind == BufferKind::Output)
      plan.kind = StorageKind::Output;
    else if (isLocal(p, kernels, uses, b))
      plan.kind = StorageKind::Local;
  }
  // Greedy in kernel order: a slot frees after its tenant's last reader; a buffer takes the slot
  // it overwrites in place, else a free slot of its byte size (never an extern's: that memory
  // is the result the extern returned), else a new one.
  // Time is counted in kernels, but a launch's kernels may run at once: a buffer is in use from
  // the start of its producer's launch to the end of its last reader's.
  std::vector<size_t> start = launchStarts(kernels), end(kernels.size());
  for (size_t k = kernels.size(); k-- > 0;)
    end[k] = k + 1 < kernels.size() && kernels[k + 1].withPrevious ? end[k + 1] : k;
  slots.clear();
  std::vector<BufferId> tenant;
  std::vector<bool> slotFree;
  for (int k = 0; k < static_cast<int>(kernels.size()); ++k) {
    for (size_t s = 0; s < slots.size(); ++s)
      if (!slotFree[s] &&
          end[std::max(uses.lastRead[tenant[s].index], uses.producedIn[tenant[s].index])] <
              start[k])
        slotFree[s] = true;
    for (size_t n : kernels[k].nodes) {
      const LoopNode &node = p.nodes()[n];
      bool external = node.kind == LoopNodeKind::Extern;
      for (BufferId out : node.outputs) {
        BufferPlan &plan = plans[out.index];
        if (plan.kind != StorageKind::Allocated)
          continue;
        const ir::TensorMeta &m = p.buffer(out).meta;
        SymInt bytes = numel(m.sizes) * SymInt(itemsize(m.dtype));
        int slot = -1;
        for (BufferId a : node.reads()) {
          int s = plans[a.index].kind == StorageKind::Allocated ? plans[a.index].slot : -1;
          if (slot < 0 && s >= 0 && !slotFree[s] && tenant[s] == a && slots[s].bytes == bytes &&
              overwritesInPlace(p, kernels[k], uses, n, a, out))
            slot = s;
        }
        for (size_t s = 0; s < slots.size() && slot < 0 && !external; ++s)
          if (slotFree[s] && !slots[s].external && slots[s].bytes == bytes)
            slot = static_cast<int>(s);
        if (slot < 0) {
          slot = static_cast<int>(slots.size());
          slots.push_back(MemorySlot{bytes, {}, {}, external});
          tenant.push_back(out);
          slotFree.push_back(false);
        }
        MemorySlot &ms = slots[slot];
        int last = static_cast<int>(end[std::max(k, uses.lastRead[out.index])]);
        if (!slotFree[slot] && !ms.buffers.empty()) // in place: its predecessor's span goes on
          ms.lifetimes.back().second = std::max(ms.lifetimes.back().second, last);
        else
          ms.lifetimes.emplace_back(static_cast<int>(start[k]), last);
        slotFree[slot] = false;
        tenant[slot] = out;
        ms.buffers.push_back(out);
        plan.slot = slot;
      }
    }
  }
}

} // namespace kiln::passes::schedule::detail

namespace kiln::passes::schedule {

namespace {

/// Whether two slots are in use during a common kernel.
bool inUseTogether(const MemorySlot &a, const MemorySlot &b) {
  for (auto [af, al] : a.lifetimes)
    for (auto [bf, bl] : b.lifetimes)
      if (af <= bl && bf <= al)
        return true;
  return false;
}

} // namespace

std::vector<size_t> placeSlots(std::span<const MemorySlot> slots, std::span<const size_t> bytes,
                               bool withExternal, size_t &arenaBytes) {
  std::vector<size_t> order(slots.size());
  for (size_t k = 0; k < order.size(); ++k)
    order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<size_t> offsets(slots.size(), 0), placed;
  arenaBytes = 0;
  for (size_t sl : order) {
    if (slots[sl].external && !withExternal)
      continue;
    std::vector<size_t> clash;
    for (size_t o : placed)
      if (inUseTogether(slots[o], slots[sl]))
        clash.push_back(o);
    std::sort(clash.begin(), clash.end(),
              [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
    size_t at = 0;
    for (size_t o : clash) {
      if (offsets[o] >= at + bytes[sl])
        break;
      at = std::max(at, offsets[o] + bytes[o]);
    }
    offsets[sl] = at;
    placed.push_back(sl);
    arenaBytes = std::max(arenaBytes, at + bytes[sl]);
  }
  return offsets;
}

} // namespace kiln::passes::schedule

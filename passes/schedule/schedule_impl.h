#pragma once
// The phases of schedule(), one per file (see [Note: scheduling] in schedule.h).

#include "passes/schedule/schedule.h"

namespace kiln::passes::schedule::detail {

/// Inline a pointwise producer when it is read once at an index that visits each element once,
/// or when it is cheap: no transcendental prim, at most this many arithmetic ops (counting what
/// was inlined into it) and at most kMaxCheapLoads loads in all its readers.
inline constexpr int kCheapOps = 8;
inline constexpr int kMaxCheapLoads = 4;

/// The product of `sizes` (1 for none).
SymInt numel(std::span<const SymInt> sizes);

/// fusion.cc: per buffer of `program`, whether its pointwise producer is inlined.
std::vector<bool> chooseInlined(const LoopProgram &program);

/// loop_order.cc: each node's loop nest and lane, as if it ran alone.
std::vector<LoopOrder> chooseLoopOrders(const LoopProgram &program);

/// Loop `d` of the loops a merged lane walks (LoopOrder::mergedIntoLane): `i<d>` under a range
/// lane, `r<d>` under a reduce lane.
std::string laneLoopName(const LoopOrder &order, size_t d);

/// How many outer loops of `node` a kernel may share without taking its vector loop (its lane
/// is a range loop: the loops outside it; else all).
size_t laneLimit(const ir::loop::LoopNode &node, const LoopOrder &order);

/// kernels.cc: the kernels of `program`, in an order that respects every dependency; with
/// `fuse` false, one kernel per node in program order.
std::vector<Kernel> groupKernels(const LoopProgram &program, const std::vector<LoopOrder> &loops,
                                 bool fuse);

/// loop_order.cc: what sharing a kernel changes in its nodes' loops (lanes on the shared loop,
/// tiles) and each kernel's parallel loop. Kernels must list consecutive nodes of `program`.
void settleKernels(const LoopProgram &program, std::vector<Kernel> &kernels,
                   std::vector<LoopOrder> &loops);

/// kernels.cc: within each run of consecutive small loop kernels, moves the kernels that do not
/// read each other's results next to each other (by dependency level, program order otherwise),
/// so that they can share launches ([Note: launches]). `kernels` are those of groupKernels.
void orderForLaunches(const LoopProgram &program, std::vector<Kernel> &kernels);

/// kernels.cc: marks the kernels that run in the launch of the kernel before them
/// ([Note: launches]). Needs settled kernels (their parallel loops).
void groupLaunches(const LoopProgram &program, std::vector<Kernel> &kernels);

/// memory_plan.cc: each buffer's storage and the memory slots.
void planMemory(const LoopProgram &program, const std::vector<Kernel> &kernels,
                std::vector<BufferPlan> &buffers, std::vector<MemorySlot> &slots);

} // namespace kiln::passes::schedule::detail

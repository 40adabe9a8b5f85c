#pragma once
/// Scheduling: fusion, kernels, loop order and memory planning of a lowered loop program.
///
/// [Note: scheduling]
/// schedule() runs four phases, each in its own file:
/// 1. fusion.cc — which pointwise producers are inlined: their body is substituted into every
///    load of their buffer (rebuild.cc replays the consumer's DAG with the producer's DAG in
///    place of the load), so the buffer is never written. The rule (never duplicate expensive
///    work): a pointwise producer is inlined when it has exactly one reader that loads it at
///    one index which visits each element once (nothing is recomputed), or when its body is
///    cheap (no transcendental prim, at most kCheapOps arithmetic ops, at most kMaxCheapLoads
///    loads in all readers, and at most kCheapOps ops recomputed in all: cost x (loads - 1)): a
///    cast, a broadcast bias add or a scale costs less to recompute than to write out and read
///    back, a stencil's neighbour read three times does not. Reductions, externs, program outputs and buffers an
///    extern reads are always materialized.
/// 2. kernels.cc — nodes are grouped into kernels. A loop kernel runs its nodes inside one loop
///    nest over shared outer ranges (a common prefix of their ranges): a node joins a kernel when
///    every buffer it reads from that kernel is read at the same outer point it computes (so rows
///    are independent), which puts softmax's max, exp-sum and output, or layer_norm's Welford,
///    rstd and output, in one kernel; an independent node joins when it has the same outer
///    ranges (horizontal fusion) and shares a read with the kernel or is at most two kernels
///    from it (further, it would read its inputs cold). A node may join an earlier kernel than the last when it reads
///    nothing written after it. An extern kernel is a library call followed by pointwise
///    epilogues that read its result at the same point (linear -> bias + gelu).
/// 3. loop_order.cc — per node, the loop with the most unit-stride accesses (loads and the store)
///    goes innermost; the outer ranges a kernel shares stay outermost; the outermost loop that is
///    not a reduction and not of extent 1 is the parallel one.
/// 4. memory_plan.cc — buffers produced and consumed inside one kernel are local (a register or
///    a row of scratch: never allocated); other intermediates get a memory slot, reused from a
///    buffer whose last reader ran in an earlier kernel when the byte sizes are equal.
///
/// The interpreter runs Schedule::program as is (kernels are contiguous runs of its nodes, in
/// order), so every schedule can be checked against the unscheduled program and eager.

#include "ir/loop/program.h"

#include <string>
#include <vector>

namespace kiln::passes::schedule {

using ir::SymInt;
using ir::loop::BufferId;
using ir::loop::LoopProgram;

struct ScheduleOptions {
  /// Inline producers and group nodes into kernels; false leaves one kernel per node (loop
  /// order and memory planning still run).
  bool fuse = true;
};

enum class KernelKind : uint8_t { Loop, Extern };

/// Nodes that run as one unit: consecutive nodes of Schedule::program.
struct Kernel {
  KernelKind kind = KernelKind::Loop;
  std::vector<size_t> nodes;
  /// Loop kernels: the ranges every node has as its first (outermost) loops.
  std::vector<SymInt> outer;
  /// The loop variable split over threads (empty when none).
  std::string parallel;
};

/// A node's loop nest, outermost first: `i<k>` and `r<k>` names (empty for externs).
struct LoopOrder {
  std::vector<std::string> vars;
};

enum class StorageKind : uint8_t {
  Input,     ///< bound by the caller
  Output,    ///< returned to the caller
  Allocated, ///< an intermediate in a memory slot
  Local,     ///< produced and consumed inside one kernel (or never read): not allocated
};

struct BufferPlan {
  StorageKind kind = StorageKind::Allocated;
  int slot = -1; ///< Allocated: index into Schedule::slots
};

/// Memory shared by intermediates whose lifetimes do not overlap.
struct MemorySlot {
  SymInt bytes;
  std::vector<BufferId> buffers; ///< in the order they use it
};

struct Schedule {
  /// The fused program: inlined producers are gone, nodes are in kernel order.
  LoopProgram program;
  std::vector<Kernel> kernels;
  std::vector<LoopOrder> loops;    ///< per node of program
  std::vector<BufferPlan> buffers; ///< per buffer of program
  std::vector<MemorySlot> slots;

  /// The scheduled program's text: kernels around their nodes, each buffer's storage, each
  /// node's loop order, the memory slots (format in passes/schedule/README.md).
  std::string str() const;
};

/// Schedules `program` (as lowered: see passes/lower).
Schedule schedule(const LoopProgram &program, const ScheduleOptions &options = {});

} // namespace kiln::passes::schedule

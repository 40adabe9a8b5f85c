#pragma once
/// Scheduling: fusion, kernels, loop order and memory planning of a lowered loop program.
///
/// [Note: scheduling]
/// schedule() runs these phases:
/// 1. fusion.cc — which pointwise producers are inlined: their body is substituted into every
///    load of their buffer (rebuild.cc replays the consumer's DAG with the producer's DAG in
///    place of the load), so the buffer is never written. The rule (never duplicate expensive
///    work): a pointwise producer is inlined when it has exactly one reader that loads it at
///    one index which visits each element once (nothing is recomputed), or when its body is
///    cheap (no transcendental prim, at most kCheapOps arithmetic ops, at most kMaxCheapLoads
///    loads in all readers, and at most kCheapOps ops recomputed in all: cost x (loads - 1)): a
///    cast, a broadcast bias add or a scale costs less to recompute than to write out and read
///    back, a stencil's neighbour read three times does not. Reductions, externs, program
///    outputs and buffers an extern reads are always materialized.
/// 2. loop_order.cc — each node's loop nest as it runs: its ranges `i0..` in order, then its
///    reduction ranges `r0..`, and the lane, the loop that is vectorized: the innermost range
///    loop of a reduction over a small window (a 2x2 pool, loads at most kMaxShuffledStride
///    apart along it), else the innermost reduction loop of a sum/prod/max/min/Welford whose
///    loads are contiguous along it, else the innermost range loop when the stores are at most
///    kMaxShuffledStride apart along it and every access is affine in it, else none (scalar).
/// 3. kernels.cc — nodes are grouped into kernels. A loop kernel runs its nodes inside one loop
///    nest over shared outer ranges (a common prefix of their ranges): a node joins a kernel when
///    every buffer it reads from that kernel is read at the same outer point it computes (so rows
///    are independent), which puts softmax's max, exp-sum and output, or layer_norm's Welford,
///    rstd and output, in one kernel; an independent node joins when it has the same outer
///    ranges (horizontal fusion) and shares a read with the kernel or is at most two kernels
///    from it (further, it would read its inputs cold). A node may join an earlier kernel than
///    the last when it reads nothing written after it. The kernel's nodes run one after another
///    inside one loop over i0, so a node whose lane is i0 (its only loop) would run scalar there:
///    it joins only a kernel it reads from (a per-row value) and no node joins a kernel it heads.
///    An extern kernel is a library call followed by pointwise epilogues that read its result at
///    the same point (linear -> bias + gelu), each run on its own. Numbers (pointwise nodes
///    without loops: a step counter, bias corrections, arithmetic on run-time numbers) share
///    one kernel of statements, placed right after the last kernel they read, so the loops on
///    either side of them still fuse (an Adam update: one kernel of numbers, one loop kernel).
///    Runs of small loop kernels are then ordered by dependency level ([Note: launches]).
/// 4. loop_order.cc again — inside a kernel of several nodes, a node whose lane is the shared
///    loop runs scalar; a pointwise node alone in its kernel may walk its lane in tiles with a
///    second range loop (a transpose). The parallel range: a kernel of several nodes splits its
///    shared loops over threads, flattened into one range (a [2, 4, s0] attention softmax has
///    8*s0 rows to share out, not 2); a node alone splits its range loops but the innermost
///    (all of them when its lane is a reduction loop), a tiled node i0 only.
/// 5. kernels.cc again — small independent loop kernels share a launch ([Note: launches]).
/// 6. memory_plan.cc — where every intermediate lives ([Note: memory plan]).
///
/// The CPU code generator emits exactly this: one function per launch of loop kernels (per node
/// of an extern kernel after the call), each node's loops in this order with this lane and tile,
/// a register for each local buffer; its executor (CompiledProgram) runs the launches in order in
/// this memory plan. The CUDA code generator emits one kernel per launch too (a node alone in its
/// launch keeps its own strategies), the parallel range over blocks, registers for local buffers
/// and shared-memory tiles where a node is tiled; the lanes are the CPU's ([Note: CUDA launches]
/// in codegen/cuda/emit.h). Its
/// executor (CudaProgram) lays the same slots out in one device arena per call (placeSlots).
///
/// [Note: memory plan]
/// A buffer is `local` (never stored) when it holds one value per point of its kernel's shared
/// loops and only that kernel reads it (a register: a row's max and sum, layer_norm's
/// statistics, rms_norm's [rows, 1] statistic) or when nothing reads it (Welford's count).
/// Every other intermediate gets a memory slot, greedily in kernel order: the slot of the
/// buffer it overwrites in place (a pointwise node that is that buffer's only reader, reads it
/// at the point it writes, with the same sizes and strides, and no reduction before it in its
/// kernel: the code may stash such a reduction's values in a later node's output), else a free
/// slot of its byte size whose tenant's last reader ran in an earlier launch, else a new one.
/// An extern's result gets an `external` slot: the memory the extern returned, shared only with
/// the nodes that overwrite it in place and freed after its last reader. Each slot records when
/// it is in use (kernels, one span per tenant, each from the start of a launch to the end of one);
/// at run time the slots' byte sizes are evaluated and slots never in use together may share the
/// same bytes of one arena. The interpreter runs Schedule::program as is (kernels are contiguous
/// runs of its nodes, in order), so every schedule can be checked against the unscheduled program
/// and eager.

#include "ir/loop/program.h"

#include <span>
#include <string>
#include <utility>
#include <vector>

namespace kiln::passes::schedule {

using ir::SymInt;
using ir::loop::BufferId;
using ir::loop::LoopProgram;

struct ScheduleOptions {
  /// Inline producers and group nodes into kernels; false leaves one kernel per node (loop
  /// order and memory planning still run).
  bool fuse = true;
  /// With fuse: whether producers are inlined (false keeps every node, grouped into kernels).
  bool inlineProducers = true;
  /// With fuse: whether small independent loop kernels share one launch ([Note: launches]).
  bool horizontal = true;
};

enum class KernelKind : uint8_t { Loop, Extern };

/// Nodes that run as one unit: consecutive nodes of Schedule::program.
struct Kernel {
  KernelKind kind = KernelKind::Loop;
  std::vector<size_t> nodes;
  /// Loop kernels: the ranges every node has as its first (outermost) loops.
  std::vector<SymInt> outer;
  /// The leading loops split over threads, as one range (their product): `i0`, or `i0*i1*i2`
  /// when several loops are flattened (empty when no node has a range loop).
  std::string parallel;
  /// Whether this kernel runs in the launch of the kernel before it ([Note: launches]).
  bool withPrevious = false;
};

/// [Note: launches]
/// Consecutive loop kernels that do not read each other's results and each do little work (an
/// optimizer's update of each of many small parameters, a backward's bias gradients) share one
/// launch: their parallel ranges are laid end to end into one range that is split over threads,
/// and a chunk runs the part of each kernel that falls in it. One call and one split replace one
/// per kernel, and kernels too small to split alone fill the threads together. A kernel joins
/// the launch before it when both are loop kernels with range loops, it reads nothing the
/// launch writes, each kernel has at most kMaxLaunchMemberPoints points (constant sizes) and the
/// launch at most kMaxLaunchPoints. Its kernels may run at the same time, so every buffer the
/// memory plan gives them is in use for the whole launch.
inline constexpr int64_t kMaxLaunchMemberPoints = int64_t(1) << 16;
inline constexpr int64_t kMaxLaunchPoints = int64_t(1) << 20;

/// Per kernel, its launch: the index of the first kernel of the launch it runs in.
std::vector<size_t> launchStarts(std::span<const Kernel> kernels);

/// Which loop of a node is vectorized.
enum class LaneKind : uint8_t { None, Range, Reduce };

/// A node's loop nest as it runs, outermost first: `i<k>` then `r<k>` (empty for externs).
struct LoopOrder {
  std::vector<std::string> vars;
  LaneKind lane = LaneKind::None;
  std::string laneVar; ///< the vectorized loop (`i<k-1>` or `r<m-1>`); empty when scalar
  std::string tileVar; ///< the range loop walked in blocks with the lane; empty when none
  /// How many leading range loops make the launch range (flattened into one range of their
  /// product, split over threads); 0 for a node without range loops.
  size_t parallelLoops = 0;
  /// How many loops just outside the lane run as part of it ([Note: merged lane loops]): the
  /// lane walks the product of their extents and its own, and they stay at 0.
  size_t mergedIntoLane = 0;
};

/// Loads and stores this many elements apart along a vector lane, or fewer, are one contiguous
/// span and a shuffle in the CPU code (a masked load or store of the span); further apart, a
/// load is a gather and a store is not vectorized. A reduction over a few points (a pooling
/// window) vectorizes across its outputs only when its loads move along them at most this far.
inline constexpr int64_t kMaxShuffledStride = 4;

/// [Note: merged lane loops]
/// A lane of a few elements (the 3 of a [512, 512, 3, 3] weight, the 7 of a 7x7 feature map)
/// runs as a scalar tail: the vector never fills. When every access of a node is affine in the
/// lane and the loop outside it, with the outer loop's coefficient the lane's coefficient times
/// the lane's extent (a contiguous pair of dims, for every load, index value and store), the two
/// loops are one loop over the product: fix the outer variable at 0 and let the lane variable run
/// over the product, and every offset stays the same. A loop of extent 1 is always at 0, so it
/// merges whatever its coefficients, and the next loop pairs with the one outside it. A node alone
/// in its kernel merges loops into a range lane while the lane has fewer than kMergedLaneTarget
/// elements and at least kMinRowsOutsideLane rows stay outside it to split over threads (never i0;
/// a symbolic size counts as 1 row; a symbolic lane is wide enough, so a symbolic loop merges
/// last); a reduction merges its reduction loops into a reduce lane the same way (no rows needed).
/// asScheduled() is the node with those extents, what the code generator runs.
inline constexpr int64_t kMergedLaneTarget = 64;
inline constexpr int64_t kMinRowsOutsideLane = 64;

/// `node` (of `program`) with the extents its loops run with under `order`: the loops merged
/// into the lane at extent 1, the lane at the product; when the lane and the loops next to it are
/// of extent 1 (a [2048, 1024, 1, 1] weight), the body reads the lane variable where it read the
/// innermost merged loop of another extent ([Note: merged lane loops]). `node` itself otherwise.
ir::loop::LoopNode asScheduled(const LoopProgram &program, const ir::loop::LoopNode &node,
                               const LoopOrder &order);

enum class StorageKind : uint8_t {
  Input,     ///< bound by the caller
  Output,    ///< returned to the caller
  Allocated, ///< an intermediate in a memory slot
  Local,     ///< never stored: a register, or a result nobody reads ([Note: memory plan])
};

struct BufferPlan {
  StorageKind kind = StorageKind::Allocated;
  int slot = -1; ///< Allocated: index into Schedule::slots
};

/// Memory shared by intermediates whose lifetimes do not overlap ([Note: memory plan]).
struct MemorySlot {
  SymInt bytes;                  ///< numel * itemsize of each tenant
  std::vector<BufferId> buffers; ///< tenants, in the order they use it
  /// Kernels (inclusive) during which the slot is in use, one span per tenant; a tenant that
  /// overwrites its predecessor in place extends that span. Other slots may use the gaps.
  std::vector<std::pair<int, int>> lifetimes;
  /// The memory of an extern's result (not of the arena): its tenants are that result and the
  /// nodes that overwrite it in place.
  bool external = false;
};

/// Where each slot goes in one arena, given its byte size this call (`bytes`, per slot, already
/// rounded to the executor's alignment): largest first, each at the lowest offset clear of the
/// slots placed so far that are in use during a common kernel. External slots are placed only
/// `withExternal` (a device executor puts an extern's result in its arena; the CPU executor
/// keeps the tensor the extern returned); else their offset is 0 and they take no room.
/// Sets `arenaBytes` to the bytes the arena needs.
std::vector<size_t> placeSlots(std::span<const MemorySlot> slots, std::span<const size_t> bytes,
                               bool withExternal, size_t &arenaBytes);

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

/// Whether `node` computes one value per point of a kernel's `shared` outer loops: every loop of
/// its own has extent 1 (a kept dim: rms_norm's statistic of shape [rows, 1]).
bool onePointPerShared(const ir::loop::LoopNode &node, size_t shared);

/// Schedules `program` (as lowered: see passes/lower).
Schedule schedule(const LoopProgram &program, const ScheduleOptions &options = {});

} // namespace kiln::passes::schedule

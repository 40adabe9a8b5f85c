#pragma once
/// The loop-IR → CUDA C emitter: one translation unit of CUDA C per scheduled program
/// (passes/schedule), compiled by NVRTC (compile.h). It runs the schedule as given: one CUDA
/// kernel per launch of the schedule ([Note: CUDA launches]), except that a kernel of one node
/// alone in its launch keeps that node's own kernels (below). Like the CPU emitter
/// (codegen/cpu/emit.h) it walks each node's body DAG once and writes text, so it needs no CUDA
/// headers and runs on any machine.
///
/// [Note: CUDA launches]
/// A launch of several schedule kernels, or a kernel of several nodes (softmax's max, sum and
/// output; layer_norm's statistics and output; a kernel of numbers), is one `Fused` kernel. Each
/// schedule kernel in it is a member, and the member's work is cut into units laid end to end;
/// blocks grid-stride over the units of all members, so one launch fills the device however
/// small each member is. A member is run one of two ways:
/// - rows (a node reduces, or loops beyond the kernel's shared loops): a unit is one point of
///   the shared loops, run by the whole block. Each node in turn: a pointwise node's inner points
///   split over the threads; a reduction's points split over the threads and merge in
///   kiln::block_allreduce (a node with inner output points reduces them one after another).
///   A `local` buffer of the memory plan (one value per shared point) is a register every thread
///   holds; a buffer stored to memory and read by a later node of the member is followed by
///   `__syncthreads()`, since other threads of the block read it.
/// - points (pointwise nodes with no loops beyond the shared ones): a unit is blockDim.x
///   consecutive points of the shared loops, one per thread; each thread runs every node at its
///   point, so what a node reads from an earlier one it wrote itself.
/// The kernel's parallel range (Kernel::parallel) is thus what spreads over blocks. The CPU's
/// vector lane and merged lane loops (LoopOrder) are not used: threads, not vector lanes, are
/// the GPU's inner parallelism, and the loads of neighbouring threads coalesce. A node alone that
/// the schedule tiles (LoopOrder::tileVar) runs in tiles (PointwiseTiled below).
///
/// [Note: CUDA kernels]
/// - Arguments (KernelArg): the base pointer of every buffer the kernel reads or writes, in
///   buffer-id order (typed by the buffer's memory type: `float *`, `const unsigned short *`
///   for float16/bfloat16 bits, `unsigned char *` for bool), then every size symbol of the
///   program as `long long` (sorted: symbolic sizes are kernel arguments), then the index-error
///   record when the node has indirect loads (KernelArg::Kind::IndexError), then, for the two
///   passes of a split reduction, the partial-state workspace and the chunk count. No
///   `__restrict__`: the memory plan may let an epilogue overwrite its input in place.
/// - Indices are `long long` and follow the loop IR exactly: a load reads its buffer at the flat
///   offset of its IndexExpr (floordiv/mod round like Python, kiln::floordiv/kiln::mod).
/// - Values: each DAG node becomes one `const T vN = ...;` in canonical order (constants are
///   literals at their uses). float16/bfloat16 are loaded as their bits, computed in f32 and
///   rounded once on store or at an explicit cast (like the CPU backend); bool is a byte in
///   memory and `bool` in registers; integer arithmetic wraps (done in unsigned types, so no
///   signed overflow is undefined).
/// The kernels below are those of a node alone in its launch (the rest is [Note: CUDA launches]).
/// - Pointwise (KernelRole::Pointwise): a grid-stride loop over the node's points, flattened
///   row-major; each point decomposes into `i0, i1, ...`. When the output stores with stride 1
///   along the innermost range variable, a second kernel (PointwiseVector, `<name>_v<W>`) does W
///   consecutive points per iteration with 128-bit accesses: W = 16 bytes / the widest element
///   among the accesses along it. Loads with coefficient 1 along it become one vector load,
///   loads that do not depend on it are loaded once, others are per-lane loads. It is only
///   valid when VectorPlan's conditions hold (base pointers aligned, offsets and the innermost
///   extent divisible by W), which the launcher checks (launch_plan.h); otherwise the scalar
///   kernel runs.
/// - PointwiseTiled: when the schedule walks a range loop in tiles with the lane (LoopOrder::
///   tileVar: a load strided along the lane and contiguous along that loop, a transpose), each
///   block runs 32x32 tiles of the two loops: its threads first copy every such load's tile into
///   shared memory with neighbouring threads on neighbouring addresses (along the tile loop),
///   then compute the points with neighbouring threads along the lane, so both the loads and the
///   stores coalesce. It replaces the vector twin and always applies (edges are bounds-checked).
/// - Reductions accumulate in f32 for float16/bfloat16/float32 (f64 for float64; welford
///   too), in int64 for integer sums and products (wrapped to the dtype once), in the dtype
///   (at least int32) for max/min/argmax/argmin. The accumulators (kiln::Sum, Max, ArgMax,
///   Welford, ...) live in the prelude with their warp-shuffle and block merges. Strategies:
///     ReduceBlock   one block per output point (grid-stride over outputs), the block's threads
///                   stride over the reduced points (flattened row-major; the flat position is
///                   argmax's index), warp shuffles then shared memory combine them. Used when
///                   a load is contiguous along the innermost reduction variable (rows).
///     ReduceThread  one thread per output point, a sequential loop over the reduced points:
///                   when loads are contiguous along the innermost *range* variable instead
///                   (a column sum: neighbouring threads read neighbouring elements).
///     ReducePartial + ReduceFinal  for a constant number of outputs (at most
///                   CudaEmitOptions::splitMaxOutputs, e.g. a full reduction): pass 1 splits
///                   each output's points into `chunks` ranges, one block each, and writes a
///                   partial state per (output, chunk) to a workspace; pass 2 merges each
///                   output's partials in one block. The launcher uses them for long
///                   reductions (launch_plan.h).
///   Merges are exact for max/min/argmax (ties keep the first position, a NaN wins: the
///   interpreter's rules), reassociated for sum/prod (a tree, not a left fold), and Chan's
///   pairwise formula for welford.
/// - Math: expf, logf, tanhf, erff, sqrtf, rsqrtf, powf, floorf (and the double versions) from
///   CUDA's libdevice, all within 2 ulp; NVRTC runs with its defaults (`-fmad=true`,
///   `-prec-div=true`, `-prec-sqrt=true`, `-ftz=false`). No `--use_fast_math` and no `__expf`:
///   its error grows with |x| (2 + 1.16 * |x| ulp), which a softmax over logits of magnitude 50
///   or a GELU would notice, and the interpreter's f64 results are the reference.
/// - Integer floordiv/mod by zero give 0 (the interpreter raises an error); floordiv by -1
///   wraps like the interpreter; argmax over an empty range stores -1 (an error there).

#include "ir/loop/program.h"
#include "passes/schedule/schedule.h"

#include <cstddef>
#include <string>
#include <vector>

namespace kiln::codegen::cuda {

/// Every kernel is declared `__launch_bounds__(kMaxBlockThreads)`: launches use at most this
/// many threads per block (a multiple of the warp size).
inline constexpr int kMaxBlockThreads = 256;

/// What one emitted kernel does (see [Note: CUDA kernels]).
enum class KernelRole : uint8_t {
  Pointwise,
  PointwiseVector,
  PointwiseTiled, ///< the schedule tiles the node: transposed loads staged in shared memory
  ReduceBlock,
  ReduceThread,
  ReducePartial,
  ReduceFinal,
  Fused, ///< the kernels of one launch of the schedule ([Note: CUDA launches])
};
std::string_view kernelRoleName(KernelRole role);

/// One kernel argument, in order.
struct KernelArg {
  enum class Kind : uint8_t {
    Buffer,   ///< a buffer's base pointer
    Size,     ///< a size symbol's value (long long)
    Partials, ///< split reductions: the workspace of partial states
    Chunks,   ///< split reductions: chunks per output (long long)
    /// nodes with indirect loads: `long long[3]` the run zeroes, where a kernel that meets an
    /// out-of-range position stores {1, position, extent} (and reads element 0 instead)
    IndexError,
  };
  Kind kind = Kind::Buffer;
  ir::loop::BufferId buffer; ///< Buffer
  std::string symbol;        ///< Size
};

struct CudaKernel {
  std::string name; ///< the `extern "C"` symbol: `node<k>_buf<id>` plus a role suffix
  KernelRole role = KernelRole::Pointwise;
  std::vector<KernelArg> args;
  std::string code; ///< the kernel's text (also part of CudaModule::source)
};

/// When a PointwiseVector kernel may run instead of the scalar one.
struct VectorPlan {
  int width = 0; ///< points per thread iteration; 0: no vector kernel
  /// Every expression must be divisible by `width` (the innermost extent, and the parts of each
  /// vector access's offset that do not move with the vectorized variable).
  std::vector<ir::SymInt> divisible;
  /// Buffers accessed with vectors: each base pointer must be aligned to width * itemsize.
  std::vector<ir::loop::BufferId> aligned;
};

/// The kernels of one Pointwise or Reduction node.
struct NodeKernels {
  size_t node = 0; ///< index into LoopProgram::nodes()
  /// Pointwise: [Pointwise], [Pointwise, PointwiseVector] or [Pointwise, PointwiseTiled].
  /// Reduction: [ReduceBlock] or
  /// [ReduceThread], followed by [ReducePartial, ReduceFinal] when split kernels exist.
  std::vector<CudaKernel> kernels;
  /// Pointwise: the number of points; reduction: the number of output points.
  ir::SymInt points = 1;
  /// PointwiseTiled: the number of tiles (one block each, grid-strided).
  ir::SymInt tiles = 0;
  /// Reduction: the number of reduced points per output (product of reductionRanges).
  ir::SymInt reducedPoints = 1;
  VectorPlan vector;
  /// Split reductions: bytes of one partial state in the workspace (0: no split kernels).
  int partialStateBytes = 0;

  const CudaKernel *find(KernelRole role) const;
};

/// One schedule kernel inside a Fused kernel ([Note: CUDA launches]).
struct FusedMember {
  std::vector<size_t> nodes; ///< indices into LoopProgram::nodes(), in order
  /// Whether a unit is one point of the shared loops run by the block (else blockDim.x points,
  /// one per thread).
  bool rows = false;
  ir::SymInt points = 1; ///< points of the shared loops
  /// Rows: per node, its inner points or reduced points per unit (the largest sizes the block).
  std::vector<ir::SymInt> work;
};

/// The kernels of one launch of the schedule as one CUDA kernel.
struct FusedKernel {
  CudaKernel kernel;
  std::vector<FusedMember> members;
};

/// One step of the run, in the schedule's order.
struct CudaStep {
  enum class Kind : uint8_t {
    Extern, ///< an extern node, run by CudaProgram
    Node,   ///< a node alone in its launch: CudaModule::nodes[index]
    Fused,  ///< CudaModule::fused[index]
  };
  Kind kind = Kind::Node;
  size_t index = 0; ///< Extern: the node's index in LoopProgram::nodes()
};

struct CudaModule {
  /// The CUDA C translation unit: the scheduled program's text as a comment, the prelude (types,
  /// conversions, Python division, accumulators), then every kernel.
  std::string source;
  /// The nodes that run alone, in order.
  std::vector<NodeKernels> nodes;
  /// The launches of several schedule kernels or nodes, in order.
  std::vector<FusedKernel> fused;
  std::vector<CudaStep> steps;

  /// The kernel named `name`, or null.
  const CudaKernel *find(std::string_view name) const;
  /// Every kernel, in the order of steps.
  std::vector<const CudaKernel *> kernels() const;
};

struct CudaEmitOptions {
  /// Emit PointwiseVector kernels.
  bool vectorize = true;
  /// Emit PointwiseTiled kernels where the schedule tiles a node.
  bool tile = true;
  /// Emit ReducePartial/ReduceFinal for reductions with a constant number of outputs up to this
  /// (0: never).
  int splitMaxOutputs = 8;
};

/// Emits the CUDA C of `schedule` (its program, kernels, launches and memory plan). Throws
/// kiln::Error for what it cannot emit.
CudaModule emitCuda(const passes::schedule::Schedule &schedule,
                    const CudaEmitOptions &options = {});

/// The kiln::-namespace device helpers every module starts with (for tests and dumps).
std::string_view cudaPrelude();

} // namespace kiln::codegen::cuda

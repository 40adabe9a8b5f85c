#pragma once
/// The loop-IR → MLIR emitter for CPU kernels: one MLIR module per scheduled LoopProgram, one
/// `func.func` per launch of the schedule ([Note: fused runs]), written as MLIR text (no MLIR
/// headers: this layer compiles fast, and the text is what the kernel cache hashes).
///
/// [Note: emitted kernels]
/// - Calling convention (launch.h): `kernel(void **args, int64_t begin, int64_t end)`. args holds
///   the base pointer of every buffer the node reads or writes (KernelInfo::buffers, in buffer-id
///   order), then one packSize slot per size symbol of the program (KernelInfo::symbols, sorted).
///   [begin, end) is a range of the node's leading range loops flattened row-major
///   (KernelInfo::parallelLoops of them: i0 alone, or i0*i1*... as the schedule says); a node
///   without ranges has the single iteration [0, 1).
/// - Memory: every buffer is a flat `memref<?xT>` over its base pointer (descriptor built from
///   the pointer, size = the buffer's extent, stride 1); a load or store indexes it with the flat
///   element offset of the loop IR, computed by `arith` on `index` from the SymInt's canonical
///   form. bool is i8 in memory and i1 in registers; float16 is f16 in memory, bfloat16 is i16
///   (converted with integer ops, round to nearest even, as runtime/half.h does); both compute in
///   f32 and round once on store (or at an explicit cast).
/// - Vectorization: the schedule's lane variable (LoopOrder; passes/schedule/loop_order.cc has
///   the rule) is vectorized with W = vectorBits / the widest type of the body (emit_plan.cc;
///   f32: 16 lanes on AVX-512, f64/i64: 8). A range lane is the innermost range variable; a
///   reduction lane (sum/prod/max/min/welford) keeps a vector accumulator, one
///   `vector.reduction` at the end; welford merges per-lane statistics with Chan's formula.
///   A load whose offset has coefficient 0 along the lane variable is a scalar load (broadcast
///   where needed), coefficient 1 a `vector.load`, 2 to 4 (kMaxShuffledStride) a masked load of
///   the span and a `vector.shuffle`, any other a `vector.gather`; a store 2 to 4 apart is a
///   shuffle and a masked store of the span. An offset that is not affine in the lane variable
///   keeps the node scalar. The vector loop runs the largest multiple of W iterations, a scalar
///   loop the tail.
/// - Reductions accumulate in the compute type (welford in f64); argmax/argmin vectorize only
///   across independent outputs (innermost range variable), otherwise run scalar.
/// - f32 math (exp, log, tanh, erf, ...) is lowered to polynomial approximations by the JIT
///   (lowering.h), so it vectorizes; f64 tanh and erf call libm (those nodes stay scalar).
/// - Integer floordiv/mod by zero give an unspecified value (the interpreter raises an error);
///   floordiv by -1 wraps like the interpreter.
///
/// [Note: fused runs]
/// The emitter follows the schedule (passes/schedule): each loop kernel is one function whose
/// nodes run one after another inside one shared loop over i0 (the launch range, the kernel's
/// parallel loop): softmax's max, exp-sum and output, layer_norm's statistics, rstd and output
/// each touch a row once while it is in cache. The nodes of an extern kernel after its call (its
/// epilogues) are one function each. Every node's loops, lane and tile are its LoopOrder; its
/// local buffers live in registers and are never stored or allocated. The first node's
/// KernelInfo lists the buffers of the whole kernel; the other nodes keep a KernelInfo (node
/// order, `fusedInto` set) whose function does nothing. The kernels of one launch are one
/// function likewise: its range is their parallel ranges end to end, and each runs its part of
/// a chunk.

#include "ir/loop/program.h"
#include "passes/schedule/schedule.h"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::codegen::cpu {

struct EmitOptions {
  /// Vector register width in bits (512 with AVX-512, 256 with AVX2); 0 emits scalar loops only.
  int vectorBits = 512;
};

/// The vector width a target's features allow ("+avx512f,..." as in TargetDesc::features).
EmitOptions emitOptionsForFeatures(std::string_view features);

/// Which loop of a node the emitter vectorized.
enum class LaneMode : uint8_t {
  Scalar, ///< no vector loop
  Range,  ///< the innermost range variable: W independent outputs per iteration
  Reduce, ///< the innermost reduction variable: a vector accumulator
};
std::string_view laneModeName(LaneMode mode);

/// The int64 slots of an index-error record (KernelInfo::checksIndices).
inline constexpr int kIndexErrorSlots = 3;

/// What the runtime needs to call one generated kernel.
struct KernelInfo {
  size_t node = 0;                         ///< index into LoopProgram::nodes()
  std::string name;                        ///< the func.func symbol, `node<k>_buf<id>`
  std::vector<ir::loop::BufferId> buffers; ///< args[0..]: base pointers, in this order
  std::vector<std::string> symbols;        ///< then one packSize slot per size symbol
  LaneMode lanes = LaneMode::Scalar;
  int width = 1; ///< vector lanes (1 when scalar)
  /// How many leading range loops [begin, end) covers, flattened (row-major): this node's part
  /// of the launch range is the product of their extents (the schedule's
  /// LoopOrder::parallelLoops); a launch's range is its kernels' parts end to end.
  size_t parallelLoops = 0;
  /// Whether the kernel has indirect loads: then args holds one more slot after the symbols, a
  /// pointer to an int64_t[kIndexErrorSlots] record the caller zeroes. A kernel that meets an
  /// out-of-range position reads a clamped element instead and stores {1, position, extent}
  /// there (any one such position, when several threads find some); the caller then throws.
  bool checksIndices = false;
  /// Set when the node runs inside the function of an earlier node of its fused run or launch
  /// (that node's index): this function then does nothing and `buffers` is empty.
  std::optional<size_t> fusedInto;
  /// The first node of each later kernel of its launch ([Note: launches] in
  /// passes/schedule/schedule.h): their rows (each that node's parallelLoops) follow this
  /// node's in the launch range, in this order.
  std::vector<size_t> laterRuns;
};

/// An emitted module.
struct EmittedModule {
  /// The MLIR text: a header comment holding the loop program's text, then the module.
  std::string text;
  /// One per pointwise or reduction node, in node order (extern nodes have none).
  std::vector<KernelInfo> kernels;
};

/// Emits one MLIR module for the scheduled program, as scheduled. Throws kiln::Error for what it
/// cannot emit.
EmittedModule emitModule(const passes::schedule::Schedule &schedule,
                         const EmitOptions &options = {});

} // namespace kiln::codegen::cpu

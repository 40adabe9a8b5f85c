#pragma once
/// CompiledProgram: a whole LoopProgram as one executable for the host CPU.
///
/// Its kernels come from the JIT (compileProgram, compile_program.h) or from a library compiled
/// ahead of time (fromKernels: the AOT runtime links the same emitted module). No LLVM here:
/// the AOT runtime links this file without the compiler. run() binds the
/// inputs and size symbols, then runs the nodes in order: a generated kernel through `launch`
/// over the thread pool (split along the schedule's parallel loops, flattened), an Extern node
/// through kiln's eager ops.
///
/// [Note: run-time memory plan]
/// Intermediates live where the schedule put them ([Note: memory plan] in
/// passes/schedule/schedule.h): no buffer in a register, each other in its slot. Per call the
/// slots' sizes are evaluated from the bound symbols and packed into an arena: slots never in
/// use at the same time may share bytes, so the arena holds the plan's peak (arenaBytes) rather
/// than the sum of all slots.
///
/// Arenas are kept across calls in a small pool: a call takes one (or starts an empty one),
/// grows it when the bound sizes need more, and hands it back, so repeated calls fault no new
/// pages and concurrent calls on one program never share one. Program outputs are fresh
/// tensors, never arena memory.
///
/// An extern's result is not copied into the arena: the eager op has allocated it already, so
/// it is adopted (no copy) when it has the buffer's strides and nothing else holds it (not a
/// view of an input or of arena memory), else copied into a fresh tensor; its slot is
/// `external` and freed after its last reader, as eager code would. A pointwise epilogue may
/// still overwrite it in place (linear -> bias + gelu writes over the GEMM's result).
///
/// Symbols take their values from run()'s `symbols` and from inputs whose size is exactly a
/// symbol (as in the interpreter). Externs registered by default (inputs in order, optional
/// trailing ones in brackets, attributes in braces):
///   mm, bmm          (a, b)
///   matmul           (a, b) {transpose_a, transpose_b: the buffer holds the operand's mT}
///   linear           (x, w, [bias])
///   conv2d           (x, w, [bias]) {stride, padding, dilation, groups}
///   scaled_dot_product_attention / attention   (q, k, v, [mask]) {is_causal, scale}
///   embedding        (indices, weight) {padding_idx}

#include "codegen/cpu/compile_dumps.h"
#include "codegen/cpu/emit.h"
#include "codegen/cpu/launch.h"
#include "codegen/externs.h"
#include "ir/loop/program.h"
#include "runtime/tensor.h"

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace kiln::codegen::cpu {

class CompiledProgram {
public:
  /// Computes an extern node: its input tensors and attributes to one tensor per output buffer.
  using ExternFn = codegen::ExternFn;

  /// The scheduled program, its kernels already in memory: `kernels[k]` implements
  /// `module.kernels[k]`, emitted from `schedule`. `codeOwner` keeps the code alive (a JIT, a
  /// loaded library); `seconds` and `dumps` describe how the code was made.
  static CompiledProgram fromKernels(const passes::schedule::Schedule &schedule,
                                     EmittedModule module, std::vector<KernelFn> kernels,
                                     std::shared_ptr<const void> codeOwner, double seconds = 0,
                                     CompileDumps dumps = {});

  CompiledProgram(CompiledProgram &&) noexcept;
  CompiledProgram &operator=(CompiledProgram &&) noexcept;
  ~CompiledProgram();

  /// Runs the program on one tensor per input buffer (declaration order); returns one tensor
  /// per output buffer. Throws kiln::Error for bad inputs, a symbol without a value, an
  /// argmax/argmin over an empty range or an extern without an implementation.
  std::vector<Tensor> run(std::span<const Tensor> inputs,
                          const ir::SymbolValues &symbols = {}) const;
  /// Like run(), computing output k directly in `into[k]` where that tensor is defined and has
  /// the output's dtype, sizes and strides (fresh memory otherwise). A caller passes an input's
  /// tensor only where canComputeInPlace allows it and no other input overlaps its memory.
  std::vector<Tensor> run(std::span<const Tensor> inputs, const ir::SymbolValues &symbols,
                          std::span<const Tensor> into) const;
  /// Like run(inputs, symbols, into) for inputs the caller checked against the program, with
  /// every size symbol in `values` (driver::Runner): they are not checked again.
  std::vector<Tensor> runChecked(std::span<const Tensor> inputs, const ir::SymbolValues &values,
                                 std::span<const Tensor> into) const;
  /// Whether output `output` may be computed in the memory of input `input` (an argument the
  /// program mutates): every read of the input happens in an earlier run of kernels, or in the
  /// node computing the output at the very position it writes.
  bool canComputeInPlace(size_t output, size_t input) const;
  std::vector<Tensor> run(std::initializer_list<Tensor> inputs,
                          const ir::SymbolValues &symbols = {}) const {
    return run(std::span<const Tensor>(inputs.begin(), inputs.size()), symbols);
  }

  /// Registers (or replaces) the implementation of extern op `op`.
  CompiledProgram &registerExtern(const std::string &op, ExternFn fn);

  const ir::loop::LoopProgram &program() const;
  /// A memory slot of the plan ([Note: run-time memory plan]).
  using MemorySlot = passes::schedule::MemorySlot;
  const std::vector<MemorySlot> &memorySlots() const;
  /// Bytes of the arena a call with these symbol values needs: the slots packed by lifetime,
  /// each rounded up to 64 bytes. Throws kiln::Error for a symbol without a value.
  size_t arenaBytes(const ir::SymbolValues &values) const;
  /// The arenas kept for the next calls and the bytes they hold.
  struct ArenaStats {
    size_t arenas = 0;
    size_t bytes = 0;
  };
  ArenaStats arenaStats() const;

  /// The emitted module (MLIR text and one KernelInfo per kernel).
  const EmittedModule &module() const;
  /// Seconds spent in compileProgram (emit + compile or cache hit + link + lookups).
  double compileSeconds() const;
  /// Whether the JIT took the object from the kernel cache.
  bool fromCache() const;
  /// The lowered MLIR, LLVM IR and assembly when compiled with `jit.dumpStages`.
  CompileDumps dumps() const;

private:
  struct State;
  CompiledProgram();
  std::unique_ptr<State> state_;
};

} // namespace kiln::codegen::cpu

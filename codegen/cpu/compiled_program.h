#pragma once
/// CompiledProgram: a whole LoopProgram as one executable for the host CPU.
///
/// Its kernels come from the JIT (compileProgram, compile_program.h) or from a library compiled
/// ahead of time (fromKernels: the AOT runtime links the same emitted module). No LLVM here:
/// the AOT runtime links this file without the compiler. run() binds the
/// inputs and size symbols, then runs the nodes in order: a generated kernel through `launch`
/// over the thread pool (split along its outermost range), an Extern node through kiln's eager
/// ops (its result is adopted as the buffer when the layouts agree). Each intermediate is
/// allocated as a kiln Tensor just before the first node that uses it and released after the
/// last one, so a call's peak memory is what is live at one node (as in eager code), not the
/// sum of all its buffers.
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
#include "ir/loop/program.h"
#include "passes/lower/eager_externs.h"
#include "runtime/tensor.h"

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::codegen::cpu {

class CompiledProgram {
public:
  /// Computes an extern node: its input tensors and attributes to one tensor per output buffer.
  using ExternFn = passes::lower::ExternFn;

  /// A program whose kernels are already in memory: `kernels[k]` implements
  /// `module.kernels[k]`. `codeOwner` keeps the code alive (a JIT, a loaded library); `seconds`
  /// and `dumps` describe how the code was made.
  static CompiledProgram fromKernels(ir::loop::LoopProgram program, EmittedModule module,
                                     std::vector<KernelFn> kernels,
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
  std::vector<Tensor> run(std::initializer_list<Tensor> inputs,
                          const ir::SymbolValues &symbols = {}) const {
    return run(std::span<const Tensor>(inputs.begin(), inputs.size()), symbols);
  }

  /// Registers (or replaces) the implementation of extern op `op`.
  CompiledProgram &registerExtern(const std::string &op, ExternFn fn);

  const ir::loop::LoopProgram &program() const;
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

#pragma once
/// The reference interpreter of the loop IR: runs a LoopProgram on kiln::Tensors one element at
/// a time, walking each body's recorded DAG. Clarity over speed: it is the oracle that generated
/// kernels are tested against.
///
/// Semantics are those of expr.h and program.h. Each node's value is computed in double
/// (floating dtypes) or int64 (integers, b8), then rounded or wrapped to the node's dtype;
/// reductions accumulate in double/int64 and round once. Loads are bounds-checked against the
/// bound tensor. Symbols get their values from bind() and from inputs whose size is exactly a
/// symbol (`f32[s0, 128]` bound to a 4x128 tensor gives s0 = 4); every use must agree.
///
/// Errors (all kiln::Error): wrong number of inputs, an input of another dtype (Type), rank,
/// size or stride; a symbol without a value or with two; an out-of-bounds load (Index); an
/// integer division by zero; argmax/argmin over an empty range; an extern op without an
/// implementation (NotImplemented).

#include "ir/loop/binding.h"
#include "ir/loop/program.h"
#include "runtime/tensor.h"

#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace kiln::ir::loop {

class Interpreter {
public:
  using ExternFn = ir::loop::ExternFn;

  /// `mm`, `bmm` and `matmul` (kiln::ops) are registered.
  explicit Interpreter(const LoopProgram &program);

  /// Gives size symbol `symbol` a value.
  Interpreter &bind(const std::string &symbol, int64_t value);
  /// Registers (or replaces) the implementation of extern op `op`.
  Interpreter &registerExtern(const std::string &op, ExternFn fn);

  /// Runs the program on one tensor per input buffer, in declaration order, and returns one
  /// tensor per output buffer, in order.
  std::vector<Tensor> run(std::span<const Tensor> inputs);
  std::vector<Tensor> run(std::initializer_list<Tensor> inputs) {
    return run(std::span<const Tensor>(inputs.begin(), inputs.size()));
  }

  /// The tensor of any buffer, intermediates included, after run().
  const Tensor &tensor(BufferId id) const;
  /// The symbol values of the last run.
  const SymbolValues &symbols() const { return symbols_; }

private:
  void bindInputs(std::span<const Tensor> inputs);
  Tensor allocate(const Buffer &buffer) const;
  void runPointwise(const LoopNode &node);
  void runReduction(const LoopNode &node);
  void runExtern(const LoopNode &node);

  const LoopProgram &program_;
  SymbolValues bound_, symbols_;
  ExternTable externs_;
  std::vector<Tensor> tensors_;
};

/// Interpreter(program) with `symbols` bound, run on `inputs`.
std::vector<Tensor> interpret(const LoopProgram &program, std::span<const Tensor> inputs,
                              const SymbolValues &symbols = {});

} // namespace kiln::ir::loop

#pragma once
/// Runner: a prepared program (PreparedGraph) with its weights and its Executable — the one
/// call path of kiln.compile's backend (frontend/csrc/bind_compiler.cc) and the AOT runtime
/// (aot/model.cc). A call's inputs are checked once, here (PreparedGraph::bindSymbols: dtypes,
/// ranks, sizes, strides, the assumptions; SpecializationError), the weights follow them, an
/// output the program may compute in an argument's memory is computed there, and the arguments
/// the program mutates are written back once. Converting the caller's values (Python objects,
/// C buffers) to tensors and back is the caller's.

#include "codegen/executable.h"
#include "driver/prepared_graph.h"

#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace kiln::driver {

class Runner {
public:
  /// `weights` parallel to graph.weights; they are moved to the executable's device.
  Runner(PreparedGraph graph, std::vector<Tensor> weights,
         std::unique_ptr<codegen::Executable> executable);

  /// Checks a call's inputs (one tensor per graph input: a 0-d tensor for a scalar input,
  /// `ints` holding the value of int inputs) and binds every size symbol: the one input check
  /// of a call. Throws SpecializationError.
  ir::SymbolValues bind(std::span<const Tensor> inputs,
                        std::span<const std::optional<int64_t>> ints) const;
  /// Runs on inputs bind() accepted; returns one tensor per program result: the graph's
  /// outputs, then the new values of mutated arguments, which are also copied into those
  /// arguments when `writeBack` is set (a result already computed in the argument is not).
  /// `spare`: per program output, memory of its layout no one else holds (a loop's result two
  /// runs ago), which the output may be computed in instead of fresh memory.
  std::vector<Tensor> run(std::span<const Tensor> inputs, const ir::SymbolValues &values,
                          bool writeBack = true, std::span<const Tensor> spare = {}) const;

  const PreparedGraph &graph() const { return graph_; }
  const codegen::Executable &executable() const { return *executable_; }

private:
  /// Per program result: the argument to compute it in (undefined: fresh memory).
  std::vector<Tensor> computeInPlace(std::span<const Tensor> tensors) const;

  PreparedGraph graph_;
  std::vector<Tensor> weights_;
  std::unique_ptr<codegen::Executable> executable_;
  /// The write-backs the executable may compute in place, decided once.
  std::vector<WriteBack> inPlace_;
};

} // namespace kiln::driver

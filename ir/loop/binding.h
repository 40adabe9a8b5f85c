#pragma once
/// Binding a loop program to tensors: what every executor of loop programs does the same way —
/// the reference interpreter, the CPU CompiledProgram and the CUDA CudaProgram — including
/// running an extern node (runExtern).
///
/// bindInputs checks each input tensor against its buffer (defined, dtype, rank), takes the
/// size symbols that are a whole size of an input (first one wins), requires a value for every
/// size symbol of the program, then checks sizes and strides under those values (strides of
/// dims of size 0 or 1 do not matter). Errors are kiln::Error (Type for a dtype, Value for the
/// rest) whose message starts with the executor's name.

#include "ir/loop/program.h"
#include "runtime/tensor.h"

#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ir::loop {

/// Buffer `b` under bound symbols: its sizes, strides and the elements its storage spans.
struct BufferLayout {
  Shape sizes, strides;
  int64_t extent = 1;

  size_t bytes(DType dtype) const { return static_cast<size_t>(extent * itemsize(dtype)); }
  /// Whether `t` has these sizes and, on dims longer than 1, these strides (any strides when it
  /// has no element).
  bool matches(const Tensor &t) const;
};

/// Throws kiln::Error (`who: buf3 has sizes ... and strides ... here`) for a negative size or
/// stride.
BufferLayout layoutOf(const Buffer &b, const SymbolValues &values, std::string_view who);

/// A fresh tensor with `b`'s layout under `values` (uninitialized).
Tensor allocateBuffer(const Buffer &b, const SymbolValues &values, std::string_view who);

/// `attrs` with every SymInt and SymInt list evaluated under `values` (what an extern's
/// implementation sees: a count or size of the call's shapes as plain integers): `attrs`
/// itself when none is symbolic, else the bound copy made in `storage`.
const ir::Attributes &bindAttributes(const ir::Attributes &attrs, const SymbolValues &values,
                                     ir::Attributes &storage);

/// Computes an extern node: its input tensors and (bound) attributes to one tensor per output
/// buffer.
using ExternFn =
    std::function<std::vector<Tensor>(std::span<const Tensor> inputs, const ir::Attributes &attrs)>;
/// Extern implementations by op name (codegen/externs.h has kiln's).
using ExternTable = std::map<std::string, ExternFn, std::less<>>;

/// Runs extern node `node` of `program` on `inputs` with `table`'s implementation of its op:
/// binds its symbolic attributes under `values`, calls it, and checks what it returned: one
/// tensor per output buffer, each of that buffer's dtype and sizes under `values`. Throws
/// kiln::Error naming `who` (NotImplemented for an op `table` lacks, Value for a bad result).
std::vector<Tensor> runExtern(const ExternTable &table, const LoopProgram &program,
                              const LoopNode &node, std::span<const Tensor> inputs,
                              const SymbolValues &values, std::string_view who);

struct InputBinding {
  std::string_view who;            ///< "compiled program", "loop interpreter", ...
  std::string_view symbolHint;     ///< how to give a symbol a value ("pass it or an input")
  bool contiguousFallback = false; ///< copy an input contiguous when its buffer is
  /// The caller checked the inputs against the program and bound every symbol in `given`
  /// (driver::Runner, through PreparedGraph::bindSymbols): only place them (contiguous copies
  /// where allowed), without checking them a second time.
  bool checked = false;
};

/// Places inputs a caller already checked (InputBinding::checked) into `bound`, one slot per
/// buffer, copied contiguous where `contiguousFallback` allows and the buffer is.
void placeInputs(const LoopProgram &program, std::span<const Tensor> inputs,
                 bool contiguousFallback, std::vector<Tensor> &bound);

/// Binds `inputs` (one per input buffer, in order) on top of `given`; `bound` (one slot per
/// buffer of the program) receives each input tensor, made contiguous where allowed. Returns
/// every symbol value.
SymbolValues bindInputs(const LoopProgram &program, std::span<const Tensor> inputs,
                        const SymbolValues &given, const InputBinding &how,
                        std::vector<Tensor> &bound);

} // namespace kiln::ir::loop

#pragma once
/// CudaProgram: a whole LoopProgram run on a CUDA device, the GPU twin of the CPU executor
/// (codegen/cpu/compiled_program.h).
///
/// run() takes host tensors and returns host tensors:
///   bind       size symbols from the inputs' sizes (and `symbols`), with the CPU executor's
///              checks: count, dtype, rank, sizes under the bound symbols, strides
///   inputs     copied to device buffers laid out as the buffer's meta strides (an input whose
///              buffer is contiguous is made contiguous first)
///   per node   Pointwise/Reduction: its buffers allocated on first use, its kernels launched as
///              planLaunches says for this device's limits (a split reduction's workspace from
///              the device's allocator); Extern: run on the host through kiln's eager kernels
///              (codegen/externs.h): inputs copied device → host, results host →
///              device — except the GEMM externs when cuBLAS loads (device_externs.h), which
///              run on the device; a call cuBLAS declines (no unit stride, integer dtypes) and
///              every other extern (convolutions, attention) costs two transfers.
///              Every buffer is released after the last node that uses it, so device memory
///              peaks at what one node needs, as on the CPU.
///   outputs    copied back into fresh host tensors with the buffers' strides.
///
/// runOnDevice() is the same program on tensors that already live on the device (kiln's CUDA
/// tensors, runtime/device_memory.h): inputs are read where they are, results are allocated as
/// device tensors (or written into the caller's), and nothing crosses the bus but externs.
///
/// run() is const and keeps its state per call, so several threads may run one program at
/// once (the device serializes what it must).

#include "codegen/cuda/compile.h"
#include "codegen/cuda/device.h"
#include "codegen/cuda/emit.h"
#include "codegen/externs.h"
#include "ir/loop/program.h"
#include "runtime/tensor.h"

#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::codegen::cuda {

class CudaProgram {
public:
  /// `module` is emitCuda(program) and `device` has that module's code loaded.
  CudaProgram(ir::loop::LoopProgram program, CudaModule module, std::shared_ptr<CudaDevice> device);
  CudaProgram(CudaProgram &&) noexcept;
  CudaProgram &operator=(CudaProgram &&) noexcept;
  ~CudaProgram();

  /// Runs the program on one host tensor per input buffer (declaration order); returns one host
  /// tensor per output buffer. Throws kiln::Error for bad inputs (Type: a dtype; Value: the
  /// count, a rank, a size, strides; a symbol without a value), an argmax/argmin over an empty
  /// range, an extern without an implementation, or a device error.
  /// `checked`: the caller checked the inputs against the program and bound every size symbol in
  /// `symbols` (driver::Runner through the Executable); they are not checked again.
  std::vector<Tensor> run(std::span<const Tensor> hostInputs, const ir::SymbolValues &symbols = {},
                          bool checked = false) const;
  std::vector<Tensor> run(std::initializer_list<Tensor> hostInputs,
                          const ir::SymbolValues &symbols = {}) const {
    return run(std::span<const Tensor>(hostInputs.begin(), hostInputs.size()), symbols);
  }

  /// Runs the program on device tensors (one per input buffer; on `device`, whose memory is this
  /// program's device's: the same allocator, or host memory for the emulator). Results are
  /// tensors on `device` laid out as the output buffers; `into`, when not empty, holds one
  /// preallocated tensor per output with exactly that layout, and receives them instead. An
  /// output that is an input buffer is that input tensor. Throws as run() does.
  std::vector<Tensor> runOnDevice(std::span<const Tensor> inputs, Device device,
                                  const ir::SymbolValues &symbols = {},
                                  std::span<const Tensor> into = {}, bool checked = false) const;

  /// Registers (or replaces) the host implementation of extern op `op`.
  CudaProgram &registerExtern(const std::string &op, codegen::ExternFn fn);

  const ir::loop::LoopProgram &program() const;
  const CudaModule &module() const;
  CudaDevice &device() const;

private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Emits `program`'s CUDA C, compiles it with NVRTC for device `deviceIndex`'s architecture
/// (`options.arch` is replaced by the device's) and loads it on that device. Throws kiln::Error
/// when CUDA or NVRTC is unavailable or compilation fails.
CudaProgram compileCudaProgram(const ir::loop::LoopProgram &program, int deviceIndex = 0,
                               CudaCompileOptions options = {});

} // namespace kiln::codegen::cuda

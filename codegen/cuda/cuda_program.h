#pragma once
/// CudaProgram: a whole scheduled LoopProgram run on a CUDA device, the GPU twin of the CPU
/// executor (codegen/cpu/compiled_program.h).
///
/// run() takes host tensors and returns host tensors:
///   bind       size symbols from the inputs' sizes (and `symbols`), with the CPU executor's
///              checks: count, dtype, rank, sizes under the bound symbols, strides
///   inputs     copied to device buffers laid out as the buffer's meta strides (an input whose
///              buffer is contiguous is made contiguous first)
///   memory     outputs get their own device buffers; every intermediate goes where the
///              schedule's memory plan puts it: its slot in one arena per call, laid out by
///              passes::schedule::placeSlots for this call's sizes (slots never in use together
///              share bytes, as on the CPU); a `local` buffer has no memory at all
///   per step   in the module's order (emit.h, [Note: CUDA launches]): a node alone, its
///              kernels launched as planLaunches says for this device's limits (a split
///              reduction's workspace from the device's allocator); a fused launch, one kernel
///              as planFused says; an extern, on the device when cuBLAS loads and it is a GEMM
///              (device_externs.h), else on the host through kiln's eager kernels
///              (codegen/externs.h): inputs copied device → host, results host → device (a
///              call cuBLAS declines, and every other extern, costs two transfers).
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
#include "passes/schedule/schedule.h"
#include "runtime/tensor.h"

#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::codegen::cuda {

class CudaProgram {
public:
  /// `module` is emitCuda(schedule) and `device` has that module's code loaded.
  CudaProgram(passes::schedule::Schedule schedule, CudaModule module,
              std::shared_ptr<CudaDevice> device);
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

  /// The bytes of one call's arena for these sizes: the memory plan's peak of intermediates.
  size_t arenaBytes(const ir::SymbolValues &values) const;

  const ir::loop::LoopProgram &program() const;
  const CudaModule &module() const;
  CudaDevice &device() const;

private:
  struct State;
  std::unique_ptr<State> state_;
};

/// Emits `schedule`'s CUDA C, compiles it with NVRTC for device `deviceIndex`'s architecture
/// (`options.arch` is replaced by the device's) and loads it on that device. Throws kiln::Error
/// when CUDA or NVRTC is unavailable or compilation fails.
CudaProgram compileCudaProgram(const passes::schedule::Schedule &schedule, int deviceIndex = 0,
                               CudaCompileOptions options = {});

} // namespace kiln::codegen::cuda

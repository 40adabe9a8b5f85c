#pragma once
/// Executable: a scheduled program made code for one device — what every caller runs, whichever
/// code generator made it. kiln.compile's backend and the AOT runtime hold one through
/// driver::Runner (driver/runner.h), which checks a call's inputs once and handles weights and
/// write-backs; the implementations only run.
///
/// - CPU: a CompiledProgram (kernels from the JIT, or from a library compiled ahead of time) on
///   host tensors; outputs may be computed in argument memory (canComputeInPlace).
/// - CUDA: a CudaProgram on tensors of its device (runOnDevice), or on host tensors, copied
///   (a kilnc library for CUDA takes host buffers).
///
/// Neither links LLVM: the AOT runtime (libkiln_aot.so) uses this target.

#include "codegen/cpu/compiled_program.h"
#include "codegen/cuda/cuda_program.h"
#include "runtime/device.h"
#include "runtime/tensor.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::codegen {

class Executable {
public:
  virtual ~Executable() = default;

  /// Runs the program on one tensor per program input (the graph's inputs, then its weights)
  /// that the caller checked against the program (driver::Runner::bind; the CPU and CUDA
  /// programs do not check them again), with every size symbol bound in `values`. Output k is
  /// computed in `into[k]` where that tensor is defined (see canComputeInPlace).
  virtual std::vector<Tensor> run(std::span<const Tensor> inputs, const ir::SymbolValues &values,
                                  std::span<const Tensor> into = {}) const = 0;
  /// Whether output `output` may be computed in the memory of input `input`.
  virtual bool canComputeInPlace(size_t output, size_t input) const = 0;
  /// Where inputs live and results come back.
  virtual Device device() const = 0;
  /// The generated code: the MLIR module (CPU) or the CUDA C translation unit.
  virtual const std::string &code() const = 0;
  /// How many kernels the generated code has: CPU functions, or CUDA kernels (a node's 128-bit
  /// twin and split passes count).
  virtual size_t generatedKernels() const = 0;

  /// The CPU program behind this executable, or null (dumps, kernel counts).
  virtual const cpu::CompiledProgram *cpuProgram() const { return nullptr; }
};

/// A CompiledProgram as an Executable on host tensors.
std::unique_ptr<Executable> cpuExecutable(cpu::CompiledProgram program);

/// A CudaProgram as an Executable: on tensors of `device` (runOnDevice), or, for a host device,
/// on host tensors copied to and from its device.
std::unique_ptr<Executable> cudaExecutable(cuda::CudaProgram program, Device device);

} // namespace kiln::codegen

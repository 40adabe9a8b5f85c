#pragma once
/// AotModel: a model compiled ahead of time, brought back to life inside libkiln_aot.so.
///
/// kilnc links into libNAME.so the exported `.kir` text, the kernels it compiled (an object
/// from the same emitter and LLVM pipeline as the JIT) and a kiln_program_desc naming them.
/// Creating the model runs the same driver pipeline on the same text (driver/prepared_graph.h:
/// deterministic, no LLVM, a few milliseconds) and re-emits the kernel module to recover each
/// kernel's buffers and size arguments; the module's hash must equal the one kilnc recorded,
/// so a library never runs with a runtime that would schedule it differently. The kernels are
/// then the library's own functions (CompiledProgram::fromKernels), externs run on kiln's
/// eager kernels, and weights are tensors over the mapped safetensors file (or the embedded
/// bytes), checked against every `weight` node.
///
/// A library built with `--target cuda` embeds NVRTC's PTX and cubin instead of CPU kernels:
/// the runtime re-emits the CUDA C (its hash is the module hash), loads the code on device 0
/// through the driver (codegen/cuda/device.h) and runs a CudaProgram; inputs and outputs stay
/// host buffers. With no CUDA device, creating the model fails with KILN_ERROR_INCOMPATIBLE.

#include "aot/kiln_aot.h"
#include "aot/safetensors.h"
#include "codegen/executable.h"
#include "driver/prepared_graph.h"
#include "driver/runner.h"

namespace kiln::codegen::cuda {
class CudaProgram;
} // namespace kiln::codegen::cuda

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kiln::aot {

/// An error for the C API: the status it maps to and the message.
struct AotError : std::runtime_error {
  AotError(kiln_status status, const std::string &message)
      : std::runtime_error(message), status(status) {}
  kiln_status status;
};

/// FNV-1a 64 of `text`: the module hash kilnc records and the runtime checks.
uint64_t moduleHash(std::string_view text);

/// kiln's version string, compiled into both kilnc and libkiln_aot.so.
const char *kilnVersion();

/// The features of `features` ("+avx2,+fma,-sse4a,...") that the host CPU lacks, for the x86
/// features kernels can depend on; empty when the kernels can run here.
std::vector<std::string> missingHostFeatures(std::string_view features);

/// The tensor of `view` weight node `w` binds to; AotError (KILN_ERROR_WEIGHTS) naming `model`,
/// the tensor and the file when it is missing or has another dtype or shape.
const SafeTensorInfo &findWeight(const SafeTensorsView &view, const driver::WeightSpec &w,
                                 const std::string &model);

/// Pipeline options as kilnc records them ("fuse=0"), parsed.
driver::PipelineOptions parsePipelineOptions(std::string_view options, std::string filename);

class AotModel {
public:
  /// Throws AotError.
  AotModel(const kiln_program_desc &desc, const char *weightsPath);
  ~AotModel();

  const driver::PreparedGraph &graph() const { return runner_->graph(); }
  /// The io info of input/output `index` (strings owned by the model).
  const kiln_io_info &inputInfo(size_t index) const { return inputInfo_.at(index); }
  const kiln_io_info &outputInfo(size_t index) const { return outputInfo_.at(index); }

  /// Checks the inputs, runs, and fills the outputs (see kiln_model_run). Thread-safe.
  void run(std::span<const kiln_tensor> inputs, std::span<kiln_tensor> outputs) const;

private:
  std::unique_ptr<codegen::Executable> loadCpuKernels(const driver::PreparedGraph &graph,
                                                      const kiln_program_desc &desc);
  std::unique_ptr<codegen::Executable> loadCudaCode(const driver::PreparedGraph &graph,
                                                    const kiln_program_desc &desc);
  std::vector<Tensor> bindWeights(const driver::PreparedGraph &graph, const kiln_program_desc &desc,
                                  const char *weightsPath);
  void describe();
  std::vector<Tensor> wrapInputs(std::span<const kiln_tensor> inputs,
                                 std::vector<std::optional<int64_t>> &ints) const;

  std::string name_;
  std::unique_ptr<driver::Runner> runner_;   ///< the program, its weights and its code
  std::shared_ptr<const void> weightsOwner_; ///< the mapped file, when not embedded
  std::vector<kiln_io_info> inputInfo_, outputInfo_;
  std::vector<std::unique_ptr<std::string>> strings_; ///< storage of io info names
};

/// kiln_dtype ↔ DType.
DType fromKilnDType(int32_t dtype);
int32_t toKilnDType(DType dtype);

} // namespace kiln::aot

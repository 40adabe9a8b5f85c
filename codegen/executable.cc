// The CPU and CUDA executables (see executable.h).

#include "codegen/executable.h"

namespace kiln::codegen {

namespace {

class CpuExecutable final : public Executable {
public:
  explicit CpuExecutable(cpu::CompiledProgram program) : program_(std::move(program)) {}

  std::vector<Tensor> run(std::span<const Tensor> inputs, const ir::SymbolValues &values,
                          std::span<const Tensor> into) const override {
    return program_.runChecked(inputs, values, into);
  }
  bool canComputeInPlace(size_t output, size_t input) const override {
    return program_.canComputeInPlace(output, input);
  }
  Device device() const override { return Device{}; }
  const std::string &code() const override { return program_.module().text; }
  size_t generatedKernels() const override { return program_.module().kernels.size(); }
  const cpu::CompiledProgram *cpuProgram() const override { return &program_; }

private:
  cpu::CompiledProgram program_;
};

class CudaExecutable final : public Executable {
public:
  CudaExecutable(cuda::CudaProgram program, Device device)
      : program_(std::move(program)), device_(device) {}

  std::vector<Tensor> run(std::span<const Tensor> inputs, const ir::SymbolValues &values,
                          std::span<const Tensor> into) const override {
    if (device_.type == DeviceType::CPU)
      return program_.run(inputs, values, /*checked=*/true);
    return program_.runOnDevice(inputs, device_, values, into, /*checked=*/true);
  }
  bool canComputeInPlace(size_t, size_t) const override { return false; }
  Device device() const override { return device_; }
  const std::string &code() const override { return program_.module().source; }
  size_t generatedKernels() const override { return program_.module().kernels().size(); }

private:
  cuda::CudaProgram program_;
  Device device_;
};

} // namespace

std::unique_ptr<Executable> cpuExecutable(cpu::CompiledProgram program) {
  return std::make_unique<CpuExecutable>(std::move(program));
}

std::unique_ptr<Executable> cudaExecutable(cuda::CudaProgram program, Device device) {
  return std::make_unique<CudaExecutable>(std::move(program), device);
}

} // namespace kiln::codegen

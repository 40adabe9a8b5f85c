// kiln's CUDA tensors: the DeviceMemory and DeviceOpRunner the runtime calls for DeviceType::CUDA.

#include "cuda/memory.h"

#include "cuda/backend.h"
#include "cuda/eager.h"
#include "ir/tensor_meta.h"
#include "runtime/copy.h"
#include "runtime/device_memory.h"
#include "runtime/device_ops.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::cuda {

namespace {

Backend &backend() {
  std::string reason;
  Backend *b = Backend::get(&reason);
  KILN_CHECK(b, "kiln: CUDA is not available: {}", reason);
  return *b;
}

uint64_t addressOf(const void *p) { return reinterpret_cast<uint64_t>(p); }

/// Writes host tensor `values` (dst's sizes) into device tensor `dst`, whose elements are not one
/// dense block: the span of storage dst covers makes a round trip through the host, so the
/// elements between dst's stay as they were. Slow, and only for layouts no kernel writes yet.
void writeThroughHost(const Tensor &dst, const Tensor &values) {
  int64_t span = 1;
  for (int64_t d = 0; d < dst.dim(); ++d)
    span += (dst.sizes()[d] - 1) * dst.strides()[d];
  size_t bytes = static_cast<size_t>(span * dst.itemsize());
  Tensor host = Tensor::empty({span}, dst.dtype());
  Backend &b = backend();
  int index = dst.device().index;
  b.copyToHost(index, host.rawData(), addressOf(dst.address()), bytes);
  copyInto(host.asStrided(dst.sizes(), dst.strides(), 0), values);
  b.copyToDevice(index, addressOf(dst.address()), host.rawData(), bytes);
}

class CudaMemory final : public DeviceMemory {
public:
  void *allocate(int index, size_t bytes) override {
    return reinterpret_cast<void *>(backend().allocate(index, bytes));
  }
  void release(int index, void *address) noexcept override {
    try {
      backend().release(index, addressOf(address));
    } catch (const std::exception &) {
      // A failing device at exit: the memory goes with the context.
    }
  }
  void copyToDevice(int index, void *dst, const void *src, size_t bytes) override {
    backend().copyToDevice(index, addressOf(dst), src, bytes);
  }
  void copyToHost(int index, void *dst, const void *src, size_t bytes) override {
    backend().copyToHost(index, dst, addressOf(src), bytes);
  }
  void copyOnDevice(const Tensor &dst, const Tensor &src) override {
    KILN_CHECK(dst.device() == src.device(), "copy: {} to {} on the device", src.device().str(),
               dst.device().str());
    std::string attrs = fmt::format("dtype = {}", ir::dtypeShortName(dst.dtype()));
    DeviceOperand operand(src);
    if (dst.isContiguous()) {
      runEagerOp("cast", {&operand, 1}, attrs, dst.device(), 1, {&dst, 1});
      return;
    }
    Tensor dense = runEagerOp("cast", {&operand, 1}, attrs, dst.device()).at(0);
    writeThroughHost(dst, dense.to(Device{}));
  }
  void fill(const Tensor &dst, const Scalar &value) override {
    Tensor host = Tensor::empty(dst.sizes(), dst.dtype());
    host.fill_(value);
    if (dst.isContiguous())
      copyToDevice(dst.device().index, dst.address(), host.rawData(),
                   static_cast<size_t>(host.numel() * host.itemsize()));
    else
      writeThroughHost(dst, host);
  }
};

} // namespace

void installCudaTensors() {
  static CudaMemory memory;
  registerDeviceMemory(DeviceType::CUDA, &memory);
  registerDeviceOps(DeviceType::CUDA, &runEagerOp);
}

} // namespace kiln::cuda

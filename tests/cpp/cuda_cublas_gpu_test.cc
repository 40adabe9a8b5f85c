// The device externs (codegen/cuda/device_externs.h) on a real GPU through the real libcuda and
// libcublas, against the eager externs on the CPU, and a GEMM timed with CudaEvent. Skipped with
// a message when the driver, a device or libcublas is missing (tests/gpu/run.sh runs it on a GPU
// machine; libcublas from the toolkit, `pip install nvidia-cublas`, or $KILN_CUBLAS).

#include "codegen/cuda/cublas.h"
#include "codegen/cuda/device_externs.h"
#include "codegen/cuda/driver.h"
#include "codegen/cuda/event.h"
#include "codegen/cuda/shared_library.h"
#include "codegen/externs.h"
#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/ops/compare.h"
#include "runtime/ops/random.h"

#include <fmt/format.h>
#include <kiln_catch.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

using namespace kiln;
using namespace kiln::codegen::cuda;

namespace {

/// Device 0's memory through the driver (synchronous copies on the default stream).
class DriverMemoryDevice final : public CudaDevice {
public:
  explicit DriverMemoryDevice(const Driver &driver) : driver_(driver) {}
  uint64_t allocate(size_t bytes) override {
    driver_.primaryContext(0);
    CuDevicePtr p = 0;
    driver_.check(driver_.memAlloc(&p, bytes == 0 ? 1 : bytes), "cuMemAlloc");
    return p;
  }
  void release(uint64_t address) override {
    driver_.primaryContext(0);
    driver_.check(driver_.memFree(address), "cuMemFree");
  }
  void copyToDevice(uint64_t dst, const void *src, size_t bytes) override {
    driver_.primaryContext(0);
    if (bytes)
      driver_.check(driver_.memcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
  }
  void copyToHost(void *dst, uint64_t src, size_t bytes) override {
    driver_.primaryContext(0);
    if (bytes)
      driver_.check(driver_.memcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
  }
  void launch(const CudaKernel &, std::span<const uint64_t>, int64_t, int) override {
    FAIL("no kernels on this device");
  }
  LaunchLimits limits() const override { return {}; }
  void synchronize() override { driver_.synchronize(0); }
  std::string name() const override { return driver_.device(0).name; }
  int ordinal() const override { return 0; }

private:
  const Driver &driver_;
};

/// The driver device, or null after a message saying why the GPU checks are skipped.
DriverMemoryDevice *gpuOrSkip() {
  // From the workspace root (tests/gpu/run.sh): the .venv's nvidia-cublas wheel, if installed.
  for (const std::string &py : filesWithPrefix(".venv/lib", "python3"))
    Cublas::addSearchRoot(std::filesystem::absolute(py + "/site-packages").string());
  std::string reason;
  const Driver *driver = Driver::get(&reason);
  if (driver && !Cublas::get(&reason))
    driver = nullptr;
  if (!driver) {
    KILN_SKIP("GPU cuBLAS checks skipped: " << reason);
    return nullptr;
  }
  static DriverMemoryDevice device(*driver);
  return &device;
}

Tensor randn(Shape sizes, DType dtype = DType::Float32) {
  static Generator gen(20261130);
  return ops::randn(sizes, DType::Float32, &gen).to(dtype);
}

/// `t`'s elements with its own strides (non-negative), copied to fresh device memory.
DeviceTensor upload(CudaDevice &device, const Tensor &t) {
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d)
    span += (t.size(d) - 1) * t.stride(d);
  if (t.numel() == 0)
    span = 0;
  size_t bytes = static_cast<size_t>(span * t.itemsize());
  uint64_t address = device.allocate(bytes);
  device.copyToDevice(address, t.rawData(), bytes);
  return {address, t.dtype(), t.sizes(), t.strides()};
}

void checkOp(CudaDevice &device, const char *op, std::vector<Tensor> in,
             const ir::Attributes &attrs = {}) {
  Tensor want = codegen::eagerExterns().at(op)(in, attrs).at(0);
  std::vector<DeviceTensor> ins;
  for (const Tensor &t : in)
    ins.push_back(upload(device, t));
  Tensor got = Tensor::empty(want.sizes(), want.dtype());
  DeviceTensor out = upload(device, got);
  const DeviceExternFn *fn = findDeviceExtern(op);
  REQUIRE(fn);
  (*fn)(device, ins, std::span<const DeviceTensor>(&out, 1), attrs);
  device.copyToHost(got.rawData(), out.address, static_cast<size_t>(got.numel() * got.itemsize()));
  for (const DeviceTensor &t : ins)
    device.release(t.address);
  device.release(out.address);
  INFO(fmt::format("{} -> [{}] {}", op, fmt::join(want.sizes(), ", "), dtypeName(want.dtype())));
  double tol = isReducedFloat(want.dtype()) ? 2e-2 : want.dtype() == DType::Float64 ? 1e-10 : 1e-4;
  CHECK(ops::allclose(got.to(DType::Float64), want.to(DType::Float64), tol, tol));
}

ir::Attributes transposes(bool a, bool b) {
  ir::Attributes attrs;
  if (a)
    attrs.emplace("transpose_a", ir::Attribute(true));
  if (b)
    attrs.emplace("transpose_b", ir::Attribute(true));
  return attrs;
}

} // namespace

TEST_CASE("cublas on the GPU: the GEMM externs equal the eager ones", "[.][cuda][gpu]") {
  DriverMemoryDevice *device = gpuOrSkip();
  if (!device)
    return;
  CudaDevice &d = *device;
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor a = randn({33, 33}, t), b = randn({33, 33}, t);
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        checkOp(d, "matmul", {a, b}, transposes(ta, tb));
    checkOp(d, "mm", {randn({65, 17}, t), randn({17, 40}, t)});
    checkOp(d, "mm", {randn({17, 65}, t).t(), randn({40, 17}, t).t()});
    checkOp(d, "bmm", {randn({3, 20, 9}, t), randn({3, 9, 31}, t)});
    checkOp(d, "matmul", {randn({2, 1, 20, 9}, t), randn({3, 9, 31}, t)});
    checkOp(d, "matmul", {randn({4, 3, 20, 9}, t).transpose(0, 1), randn({3, 4, 9, 7}, t)});
    checkOp(d, "matmul", {randn({9}, t), randn({2, 9, 5}, t)});
    checkOp(d, "matmul", {randn({2, 5, 9}, t), randn({9}, t)});
    checkOp(d, "linear", {randn({2, 30, 64}, t), randn({48, 64}, t), randn({48}, t)});
    checkOp(d, "linear", {randn({30, 64}, t), randn({48, 64}, t)});
    checkOp(d, "mm", {randn({5, 0}, t), randn({0, 4}, t)});
  }
}

TEST_CASE("cublas on the GPU: a GEMM timed with events", "[.][cuda][gpu][timing]") {
  DriverMemoryDevice *device = gpuOrSkip();
  if (!device)
    return;
  const DeviceExternFn *mm = findDeviceExtern("mm");
  REQUIRE(mm);
  for (DType t : {DType::Float32, DType::BFloat16}) {
    const int64_t n = 4096, reps = 10;
    Tensor a = randn({n, n}, t), b = randn({n, n}, t), c = Tensor::empty({n, n}, t);
    DeviceTensor da = upload(*device, a), db = upload(*device, b), dc = upload(*device, c);
    std::vector<DeviceTensor> ins = {da, db};
    (*mm)(*device, ins, std::span<const DeviceTensor>(&dc, 1), {}); // warm-up
    CudaEvent start(0), end(0);
    start.record();
    for (int64_t r = 0; r < reps; ++r)
      (*mm)(*device, ins, std::span<const DeviceTensor>(&dc, 1), {});
    end.record();
    end.synchronize();
    float ms = start.elapsedMillis(end) / reps;
    CHECK(ms > 0);
    std::cout << fmt::format("cuBLAS {} GEMM {}^3 on {}: {:.3f} ms, {:.1f} TFLOP/s\n", dtypeName(t),
                             n, device->name(), ms, 2.0 * n * n * n / ms / 1e9);
    for (const DeviceTensor &x : {da, db, dc})
      device->release(x.address);
  }
}

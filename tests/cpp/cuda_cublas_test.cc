// The device externs (codegen/cuda/device_externs.h) over a fake libcublas
// (tests/cpp/fake_cublas.cc: naive column-major GEMMs on host pointers, cuBLAS's argument checks)
// on a device whose addresses are host memory: every mapping of a row-major product onto
// cuBLAS — operand swap, transposes, leading dimensions, strided and broadcast batches, folded
// batches, padded outputs, the bias rows — is compared with the eager extern on the CPU. Also:
// finding libcublas, cuBLAS errors, declines, and streams/events over a fake libcuda
// (tests/cpp/fake_cuda_events.cc) that logs its calls.

#include "codegen/cuda/cublas.h"
#include "codegen/cuda/device_externs.h"
#include "codegen/cuda/driver.h"
#include "codegen/cuda/event.h"
#include "codegen/externs.h"
#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/ops/compare.h"
#include "runtime/ops/random.h"

#include <fmt/format.h>
#include <kiln_catch.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <map>
#include <mutex>

using namespace kiln;
using namespace kiln::codegen::cuda;

namespace {

/// The fake libcublas, selected through $KILN_CUBLAS before the first Cublas::get().
const std::string &fakeCublas() {
  static const std::string path = [] {
    std::string p = std::filesystem::absolute("tests/cpp/libkiln_fake_cublas.so").string();
    ::setenv("KILN_CUBLAS", p.c_str(), 1);
    return p;
  }();
  return path;
}

/// A hook of the loaded fake (the same object Cublas opened).
template <typename Fn> Fn hook(const char *name) {
  void *handle = ::dlopen(fakeCublas().c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle);
  auto fn = reinterpret_cast<Fn>(::dlsym(handle, name));
  REQUIRE(fn);
  return fn;
}

long calls(const char *fn) { return hook<long (*)(const char *)>("fake_cublas_count")(fn); }

/// A CudaDevice whose memory is host memory (0xff-filled like the host emulator's): device
/// addresses are host pointers, as the fake libcublas expects. No kernels.
class HostMemoryDevice final : public CudaDevice {
public:
  uint64_t allocate(size_t bytes) override {
    void *p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    std::memset(p, 0xff, bytes);
    std::lock_guard<std::mutex> lock(mu_);
    live_[reinterpret_cast<uint64_t>(p)] = bytes;
    return reinterpret_cast<uint64_t>(p);
  }
  void release(uint64_t address) override {
    std::lock_guard<std::mutex> lock(mu_);
    REQUIRE(live_.erase(address) == 1);
    std::free(reinterpret_cast<void *>(address));
  }
  void copyToDevice(uint64_t dst, const void *src, size_t bytes) override {
    std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
  }
  void copyToHost(void *dst, uint64_t src, size_t bytes) override {
    std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  }
  void launch(const CudaKernel &, std::span<const uint64_t>, int64_t, int) override {
    FAIL("no kernels on this device");
  }
  LaunchLimits limits() const override { return {}; }
  void synchronize() override {}
  std::string name() const override { return "host memory"; }
  size_t live() const { return live_.size(); }

private:
  std::mutex mu_;
  std::map<uint64_t, size_t> live_;
};

Tensor randn(Shape sizes, DType dtype = DType::Float32) {
  static Generator gen(20261130);
  return ops::randn(sizes, DType::Float32, &gen).to(dtype);
}

DeviceTensor onDevice(const Tensor &t) {
  return {reinterpret_cast<uint64_t>(t.rawData()), t.dtype(), t.sizes(), t.strides()};
}

const DeviceExternFn &deviceExtern(const char *op) {
  fakeCublas();
  std::string reason;
  const DeviceExternFn *fn = findDeviceExtern(op, &reason);
  INFO(reason);
  REQUIRE(fn);
  return *fn;
}

/// Runs extern `op` on the device into `out` (NaN-filled first: every element must be written).
void runDevice(const char *op, std::vector<Tensor> in, Tensor out,
               const ir::Attributes &attrs = {}) {
  HostMemoryDevice device;
  out.fill_(Scalar(std::nan("")));
  std::vector<DeviceTensor> ins;
  for (const Tensor &t : in)
    ins.push_back(onDevice(t));
  DeviceTensor o = onDevice(out);
  deviceExtern(op)(device, ins, std::span<const DeviceTensor>(&o, 1), attrs);
  CHECK(device.live() == 0); // workspace released
}

double tolerance(DType t) {
  return t == DType::Float64 ? 1e-12 : t == DType::Float32 ? 1e-5 : 1e-2;
}

/// The device result of `op` equals the eager extern's (into a contiguous output, or into
/// `out` when given: a view with its own strides).
void checkOp(const char *op, std::vector<Tensor> in, const ir::Attributes &attrs = {},
             Tensor out = {}) {
  Tensor want = codegen::eagerExterns().at(op)(in, attrs).at(0);
  if (!out.defined())
    out = Tensor::empty(want.sizes(), want.dtype());
  runDevice(op, in, out, attrs);
  INFO(fmt::format("{} -> [{}] {}", op, fmt::join(want.sizes(), ", "), dtypeName(want.dtype())));
  REQUIRE(out.sizes() == want.sizes());
  double tol = tolerance(want.dtype());
  CHECK(ops::allclose(out.to(DType::Float64), want.to(DType::Float64), tol, tol));
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

TEST_CASE("cublas: mm and matmul transposes map onto column-major GEMMs", "[cublas]") {
  checkOp("mm", {randn({5, 7}), randn({7, 3})});
  checkOp("mm", {randn({1, 7}), randn({7, 1})});
  checkOp("mm", {randn({6, 1}), randn({1, 4})});
  // Square operands: a wrong transpose keeps every size right and only the values tell.
  Tensor a = randn({4, 4}), b = randn({4, 4});
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      checkOp("matmul", {a, b}, transposes(ta, tb));
  // Transposed views passed as strided operands (unit row stride).
  checkOp("mm", {randn({7, 5}).t(), randn({3, 7}).t()});
  checkOp("matmul", {randn({5, 7}), randn({3, 7})}, transposes(false, true));
  checkOp("matmul", {randn({7, 5}), randn({7, 3})}, transposes(true, false));
  // Row strides larger than the row (a slice of wider matrices): lda/ldb > the row length.
  checkOp("mm", {randn({5, 11}).narrow(1, 2, 7), randn({7, 9}).narrow(1, 1, 3)});
  for (DType t : {DType::Float64, DType::Float16, DType::BFloat16}) {
    checkOp("matmul", {randn({6, 5}, t), randn({5, 4}, t)});
    checkOp("matmul", {randn({6, 5}, t), randn({4, 5}, t)}, transposes(false, true));
    checkOp("matmul", {randn({5, 6}, t), randn({5, 4}, t)}, transposes(true, false));
    checkOp("matmul", {randn({5, 6}, t), randn({4, 5}, t)}, transposes(true, true));
  }
}

TEST_CASE("cublas: matmul operands given as strided views of their buffers", "[cublas]") {
  // [sizes..., strides..., offset] of a view at affine offsets (lower_nn.cc stridedOperand):
  // a block of a wider matrix, a row, a column-major block, both operands of one buffer.
  auto strided = [](std::vector<int64_t> a, std::vector<int64_t> b) {
    ir::Attributes attrs;
    if (!a.empty())
      attrs.emplace("a_strided", ir::Attribute(a));
    if (!b.empty())
      attrs.emplace("b_strided", ir::Attribute(b));
    return attrs;
  };
  Tensor m = randn({9, 9}), n = randn({9, 9});
  checkOp("matmul", {m, n}, strided({4, 5, 9, 1, 11}, {5, 4, 9, 1, 27}));
  checkOp("matmul", {m, n}, strided({5, 1, 20}, {5, 9, 3}));
  checkOp("matmul", {m, n}, strided({3, 4, 1, 9, 2}, {4, 2, 9, 1, 0}));
  checkOp("matmul", {m, m}, strided({5, 1, 18}, {5, 1, 27}));
  for (DType t : {DType::Float64, DType::Float16})
    checkOp("matmul", {randn({8, 8}, t), randn({5, 2}, t)}, strided({3, 5, 8, 1, 9}, {}));
}

TEST_CASE("cublas: batches, broadcasting and 1-d operands", "[cublas]") {
  long strided = calls("cublasSgemmStridedBatched");
  checkOp("bmm", {randn({3, 5, 7}), randn({3, 7, 4})});
  CHECK(calls("cublasSgemmStridedBatched") == strided + 1);
  checkOp("bmm", {randn({3, 7, 5}).mT(), randn({3, 4, 7}).mT()});
  // Broadcast batch dims (stride 0 for the operand that repeats), transposed operands.
  checkOp("matmul", {randn({2, 1, 5, 7}), randn({3, 7, 4})});
  checkOp("matmul", {randn({2, 3, 7, 5}), randn({1, 4, 7})}, transposes(true, true));
  checkOp("matmul", {randn({5, 7}), randn({2, 3, 7, 4})});
  // A batch of B only: folding would need B's batches in m; they stay a strided batch.
  checkOp("matmul", {randn({1, 5, 7}), randn({4, 7, 2})});
  // Two batch dims that do not merge (a permuted operand): one call per outer index.
  strided = calls("cublasSgemmStridedBatched");
  checkOp("matmul", {randn({3, 2, 5, 7}).transpose(0, 1), randn({2, 3, 7, 4})});
  CHECK(calls("cublasSgemmStridedBatched") == strided + 2);
  // 1-d operands: a row, a column, and both (a 0-d result).
  checkOp("matmul", {randn({7}), randn({2, 7, 3})});
  checkOp("matmul", {randn({2, 5, 7}), randn({7})});
  checkOp("matmul", {randn({7}), randn({7})});
  checkOp("matmul", {randn({7}), randn({3, 7})}, transposes(false, true));
  for (DType t : {DType::Float64, DType::Float16, DType::BFloat16}) {
    checkOp("bmm", {randn({2, 3, 4}, t), randn({2, 4, 5}, t)});
    checkOp("matmul", {randn({2, 1, 3, 4}, t), randn({3, 5, 4}, t)}, transposes(false, true));
  }
  CHECK(calls("cublasGemmStridedBatchedEx") > 0);
  CHECK(calls("cublasDgemmStridedBatched") > 0);
}

TEST_CASE("cublas: leading batch dims fold into one GEMM", "[cublas]") {
  long plain = calls("cublasSgemm_v2"), strided = calls("cublasSgemmStridedBatched");
  checkOp("matmul", {randn({2, 3, 5, 7}), randn({7, 4})});
  checkOp("linear", {randn({2, 3, 7}), randn({4, 7})});
  CHECK(calls("cublasSgemm_v2") == plain + 2);
  CHECK(calls("cublasSgemmStridedBatched") == strided);
  // A transposed A cannot grow taller: it stays batched.
  checkOp("matmul", {randn({2, 7, 5}), randn({7, 4})}, transposes(true, false));
  CHECK(calls("cublasSgemmStridedBatched") == strided + 1);
}

TEST_CASE("cublas: linear, with and without a bias", "[cublas]") {
  long plain = calls("cublasSgemm_v2");
  checkOp("linear", {randn({5, 7}), randn({4, 7}), randn({4})});
  CHECK(calls("cublasSgemm_v2") == plain + 2); // the bias rows, then the product with beta 1
  checkOp("linear", {randn({7}), randn({4, 7}), randn({4})});
  checkOp("linear", {randn({2, 3, 7}), randn({4, 7}), randn({4})});
  // Batches that do not fold (x's batch dims permuted): the bias per batch.
  checkOp("linear", {randn({3, 2, 7}).transpose(0, 1), randn({4, 7}), randn({4})});
  // A strided bias and a transposed weight view.
  checkOp("linear", {randn({5, 7}), randn({7, 4}).t(), randn({8}).slice(0, 0, 8, 2)});
  for (DType t : {DType::Float64, DType::Float16, DType::BFloat16})
    checkOp("linear", {randn({2, 5, 7}, t), randn({3, 7}, t), randn({3}, t)});
}

TEST_CASE("cublas: outputs with padded rows, empty products", "[cublas]") {
  // The output's rows are 9 apart (ldc 9 > n 4).
  Tensor wide = Tensor::empty({5, 9}, DType::Float32);
  checkOp("mm", {randn({5, 7}), randn({7, 4})}, {}, wide.narrow(1, 3, 4));
  Tensor batched = Tensor::empty({3, 6, 4}, DType::Float32);
  checkOp("bmm", {randn({3, 5, 7}), randn({3, 7, 4})}, {}, batched.narrow(1, 1, 5));
  // k = 0: zeros, not the NaNs runDevice filled in.
  Tensor out = Tensor::empty({5, 4}, DType::Float32);
  runDevice("mm", {randn({5, 0}), randn({0, 4})}, out);
  CHECK(ops::equal(out, Tensor::empty({5, 4}, DType::Float32).fill_(Scalar(0.0))));
  checkOp("linear", {randn({5, 0}), randn({4, 0}), randn({4})});
  // m = 0 and an empty batch: nothing to do.
  checkOp("mm", {randn({0, 3}), randn({3, 4})});
  checkOp("bmm", {randn({0, 3, 2}), randn({0, 2, 4})});
}

TEST_CASE("cublas: declines and malformed calls", "[cublas]") {
  HostMemoryDevice device;
  auto run = [&](const char *op, std::vector<Tensor> in, Tensor out,
                 const ir::Attributes &attrs = {}) {
    std::vector<DeviceTensor> ins;
    for (const Tensor &t : in)
      ins.push_back(onDevice(t));
    DeviceTensor o = onDevice(out);
    deviceExtern(op)(device, ins, std::span<const DeviceTensor>(&o, 1), attrs);
  };
  Tensor out = Tensor::empty({5, 4}, DType::Float32);
  long sgemms = calls("cublasSgemm_v2");
  // No unit stride in either matrix dim.
  CHECK_THROWS_AS(
      run("mm", {randn({10, 14}).slice(0, 0, 10, 2).slice(1, 0, 14, 2), randn({7, 4})}, out),
      DeviceExternDeclined);
  // Integers have no cuBLAS GEMM; mixed dtypes are the eager kernel's error to report.
  CHECK_THROWS_AS(run("mm", {randn({5, 7}).to(DType::Int64), randn({7, 4}).to(DType::Int64)},
                      Tensor::empty({5, 4}, DType::Int64)),
                  DeviceExternDeclined);
  CHECK_THROWS_AS(run("mm", {randn({5, 7}), randn({7, 4}, DType::Float64)}, out),
                  DeviceExternDeclined);
  // An output whose columns are not contiguous (a transposed view).
  CHECK_THROWS_AS(
      run("mm", {randn({5, 7}), randn({7, 4})}, Tensor::empty({4, 5}, DType::Float32).t()),
      DeviceExternDeclined);
  // A bias with a declined product: declined before the bias rows are written.
  Tensor untouched = Tensor::empty({5, 4}, DType::Float32).fill_(Scalar(std::nan("")));
  CHECK_THROWS_AS(
      run("linear",
          {randn({10, 14}).slice(0, 0, 10, 2).slice(1, 0, 14, 2), randn({4, 7}), randn({4})},
          untouched),
      DeviceExternDeclined);
  CHECK(!ops::allclose(untouched, untouched)); // still all NaN
  CHECK(calls("cublasSgemm_v2") == sgemms);
  // A bias that is not [n].
  CHECK_THROWS_AS(run("linear", {randn({5, 7}), randn({4, 7}), randn({1, 4})}, out),
                  DeviceExternDeclined);
  CHECK(device.live() == 0);
  // Malformed calls are errors, as on the host.
  CHECK_THROWS_WITH(run("mm", {randn({5, 7})}, out), Catch::Contains("extern mm: 1 inputs"));
  CHECK_THROWS_WITH(run("mm", {randn({5, 6}), randn({7, 4})}, out),
                    Catch::Contains("inner sizes differ"));
  CHECK_THROWS_WITH(run("bmm", {randn({5, 7}), randn({7, 4})}, out),
                    Catch::Contains("expected [b, m, k] and [b, k, n]"));
  CHECK_THROWS_WITH(run("mm", {randn({5, 7}), randn({7, 3})}, out),
                    Catch::Contains("the output is [5, 4], the product [5, 3]"));
  CHECK_THROWS_WITH(
      run("matmul", {randn({2, 5, 7}), randn({3, 7, 4})}, Tensor::empty({3, 5, 4}, DType::Float32)),
      Catch::Contains("do not broadcast"));
  // Ops without a device implementation.
  std::string reason;
  CHECK(findDeviceExtern("conv2d", &reason) == nullptr);
  CHECK_THAT(reason, Catch::Contains("conv2d has no device implementation"));
}

TEST_CASE("cublas: one handle per device on the default stream, errors name the call", "[cublas]") {
  checkOp("mm", {randn({2, 3}), randn({3, 2})});
  CHECK(calls("cublasCreate_v2") == 1); // every test of this binary shares the host device's
  CHECK(calls("cublasSetStream_v2") == 1);
  CHECK(calls("cublasDestroy_v2") == 0);
  hook<void (*)(int)>("fake_cublas_fail_next")(13);
  CHECK_THROWS_WITH(
      runDevice("mm", {randn({2, 3}), randn({3, 2})}, Tensor::empty({2, 2}, DType::Float32)),
      Catch::Contains("kiln: cuBLAS: cublasSgemm failed: "
                      "CUBLAS_STATUS_EXECUTION_FAILED (13): fake status"));
  hook<void (*)(int)>("fake_cublas_fail_next")(7);
  CHECK_THROWS_WITH(runDevice("linear", {randn({2, 3}), randn({2, 3}), randn({2})},
                              Tensor::empty({2, 2}, DType::Float32)),
                    Catch::Contains("CUBLAS_STATUS_INVALID_VALUE (7): an invalid value"));
}

TEST_CASE("cublas: finding the library", "[cublas]") {
  fakeCublas();
  const Cublas *cublas = Cublas::get();
  REQUIRE(cublas);
  CHECK(cublas->path() == fakeCublas());
  std::vector<std::string> candidates = Cublas::searchCandidates();
  REQUIRE(!candidates.empty());
  CHECK(candidates.front() == fakeCublas());
  CHECK(candidates.back() == "libcublas.so");
  std::string reason;
  auto none = Cublas::load({"/nonexistent/libcublas.so.13", "libm.so.6"}, &reason);
  CHECK(!none);
  CHECK_THAT(reason, Catch::Contains("no libcublas could be loaded"));
  CHECK_THAT(reason, Catch::Contains("/nonexistent/libcublas.so.13: "));
  CHECK_THAT(reason, Catch::Contains("does not export cublasCreate_v2, cublasDestroy_v2"));
  CHECK_THAT(reason, Catch::Contains("KILN_CUBLAS"));
  auto fake = Cublas::load({"/nonexistent/x.so", fakeCublas()}, &reason);
  REQUIRE(fake);
  CHECK(fake->getStatusString);
  CHECK(fake->statusName(15) == "CUBLAS_STATUS_NOT_SUPPORTED (15): fake status");
  CHECK(fake->statusName(99) == "status 99: fake status");
  CHECK_THROWS_WITH(
      fake->check(3, "cublasCreate"),
      Catch::Contains("kiln: cuBLAS: cublasCreate failed: CUBLAS_STATUS_ALLOC_FAILED"));
  CHECK_NOTHROW(fake->check(0, "cublasCreate"));
}

namespace {

/// The fake libcuda with streams and events (or without), loaded once per process.
std::pair<const Driver *, const char *(*)()> fakeDriver(bool events) {
  const char *file =
      events ? "tests/cpp/libkiln_fake_cuda_events.so" : "tests/cpp/libkiln_fake_cuda_no_events.so";
  std::string path = std::filesystem::absolute(file).string();
  static std::map<std::string, const Driver *> drivers; // leaked, as Driver::get()'s
  const Driver *&d = drivers[path];
  if (!d) {
    std::string reason;
    d = Driver::load(path, &reason).release();
    INFO(reason);
    REQUIRE(d);
  }
  void *handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle);
  auto log = reinterpret_cast<const char *(*)()>(::dlsym(handle, "fake_log"));
  REQUIRE(log);
  log();
  return {d, log};
}

} // namespace

TEST_CASE("cuda events: record, synchronize and time in order", "[cuda][events]") {
  auto [driver, log] = fakeDriver(true);
  REQUIRE(driver->hasEvents());
  REQUIRE(driver->hasStreams());
  {
    CudaEvent start(*driver, 0), end(*driver, 0, 1);
    CHECK(std::string(log()) == "ctx eventCreate(e1,0) ctx eventCreate(e2,1)");
    start.record();
    end.record();
    end.synchronize();
    CHECK(start.elapsedMillis(end) == 1.5f);
    CHECK(std::string(log()) == "ctx eventRecord(e1,s0) ctx eventRecord(e2,s0) ctx "
                                "eventSynchronize(e2) ctx eventElapsedTime(e1,e2)");
    CudaStream stream(*driver, 0, 1);
    start.record(stream);
    stream.synchronize();
    CHECK(std::string(log()) ==
          "ctx streamCreate(s1,1) ctx eventRecord(e1,s1) ctx streamSynchronize(s1)");
    CHECK(end.elapsedMillis(start) == 1.5f); // re-recorded later
    log();
    CudaEvent moved = std::move(start);
    CHECK(start.get() == nullptr);
    CHECK_THROWS_WITH(start.record(), Catch::Contains("moved-from event"));
    CudaEvent never(*driver, 0);
    CHECK_THROWS_WITH(never.elapsedMillis(end),
                      Catch::Contains("cuEventElapsedTime failed: CUDA_ERROR_INVALID_HANDLE"));
    log();
  }
  // Destroyed in reverse order of construction; the moved-from event destroys nothing.
  CHECK(std::string(log()) == "ctx eventDestroy(e3) ctx eventDestroy(e1) ctx streamDestroy(s1) ctx "
                              "eventDestroy(e2)");
  CHECK_THROWS_WITH(CudaEvent(*driver, 1), Catch::Contains("CUDA device 1 does not exist"));
}

TEST_CASE("cuda events: a driver without them still loads", "[cuda][events]") {
  auto [driver, log] = fakeDriver(false);
  CHECK(!driver->hasEvents());
  CHECK(!driver->hasStreams());
  CHECK(driver->deviceCount() == 1);
  CHECK_THROWS_WITH(CudaEvent(*driver, 0), Catch::Contains("kiln: CUDA events are not available"));
  CHECK_THROWS_WITH(CudaStream(*driver, 0),
                    Catch::Contains("kiln: CUDA streams are not available"));
  CHECK(std::string(log()).empty()); // refused before any call
}

TEST_CASE("cuda events: without a driver", "[cuda][events]") {
  if (Driver::isAvailable())
    return; // the error path of machines without CUDA
  CHECK_THROWS_WITH(CudaEvent(0), Catch::Contains("kiln: CUDA is not available: "));
  // A device extern on a driver device needs the driver for its context.
  class NoDriverDevice final : public CudaDevice {
  public:
    uint64_t allocate(size_t) override { return 0; }
    void release(uint64_t) override {}
    void copyToDevice(uint64_t, const void *, size_t) override {}
    void copyToHost(void *, uint64_t, size_t) override {}
    void launch(const CudaKernel &, std::span<const uint64_t>, int64_t, int) override {}
    LaunchLimits limits() const override { return {}; }
    void synchronize() override {}
    std::string name() const override { return "no driver"; }
    int ordinal() const override { return 0; }
  } device;
  Tensor a = randn({2, 3}), b = randn({3, 2}), c = Tensor::empty({2, 2}, DType::Float32);
  std::vector<DeviceTensor> in = {onDevice(a), onDevice(b)};
  DeviceTensor out = onDevice(c);
  CHECK_THROWS_WITH(deviceExtern("mm")(device, in, std::span<const DeviceTensor>(&out, 1), {}),
                    Catch::Contains("kiln: CUDA is not available: "));
}

#include "codegen/cuda/driver.h"

#include "codegen/cuda/shared_library.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <cstdlib>
#include <vector>

namespace kiln::codegen::cuda {
namespace {

// CUdevice_attribute values (cuda.h).
constexpr int kAttrMaxThreadsPerBlock = 1;
constexpr int kAttrSharedMemoryPerBlock = 8;
constexpr int kAttrMultiprocessorCount = 16;
constexpr int kAttrComputeCapabilityMajor = 75;
constexpr int kAttrComputeCapabilityMinor = 76;

struct Loaded {
  const Driver *driver = nullptr; ///< never unloaded: modules and memory may outlive any owner
  std::string reason;
};

const Loaded &loaded() {
  static const Loaded l = [] {
    Loaded out;
    const char *env = std::getenv("KILN_LIBCUDA");
    std::string path = env && *env ? env : "libcuda.so.1";
    out.driver = Driver::load(path, &out.reason).release();
    return out;
  }();
  return l;
}

} // namespace

#if defined(KILN_HAVE_NVRTC_HEADERS) && __has_include(<cuda.h>)
} // namespace kiln::codegen::cuda
#include <cuda.h>
namespace kiln::codegen::cuda {
static_assert(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK == kAttrMaxThreadsPerBlock);
static_assert(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK == kAttrSharedMemoryPerBlock);
static_assert(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT == kAttrMultiprocessorCount);
static_assert(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR == kAttrComputeCapabilityMajor);
static_assert(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR == kAttrComputeCapabilityMinor);
static_assert(sizeof(CUdeviceptr) == sizeof(CuDevicePtr) && sizeof(CUdevice) == sizeof(CuDevice));
#endif

const Driver *Driver::get(std::string *reason) {
  const Loaded &l = loaded();
  if (!l.driver && reason)
    *reason = l.reason;
  return l.driver;
}

std::string Driver::unavailableReason() { return loaded().reason; }

std::unique_ptr<Driver> Driver::load(const std::string &path, std::string *reason) {
  std::unique_ptr<Driver> d(new Driver());
  std::string error;
  d->lib_ = SharedLibrary::open(path, &error);
  if (!d->lib_) {
    *reason = fmt::format("the NVIDIA driver library could not be loaded ({})", error);
    return nullptr;
  }
  const SharedLibrary &lib = *d->lib_;
  std::vector<std::string> missing;
  resolve(lib, d->init, "cuInit", missing);
  resolve(lib, d->driverGetVersion, "cuDriverGetVersion", missing);
  resolve(lib, d->deviceGetCount, "cuDeviceGetCount", missing);
  resolve(lib, d->deviceGet, "cuDeviceGet", missing);
  resolve(lib, d->deviceGetName, "cuDeviceGetName", missing);
  resolve(lib, d->deviceGetAttribute, "cuDeviceGetAttribute", missing);
  resolve(lib, d->deviceTotalMem, "cuDeviceTotalMem_v2", missing);
  resolve(lib, d->getErrorName, "cuGetErrorName", missing);
  resolve(lib, d->getErrorString, "cuGetErrorString", missing);
  resolve(lib, d->primaryCtxRetain, "cuDevicePrimaryCtxRetain", missing);
  resolve(lib, d->ctxSetCurrent, "cuCtxSetCurrent", missing);
  resolve(lib, d->ctxSynchronize, "cuCtxSynchronize", missing);
  resolve(lib, d->moduleLoadData, "cuModuleLoadData", missing);
  resolve(lib, d->moduleUnload, "cuModuleUnload", missing);
  resolve(lib, d->moduleGetFunction, "cuModuleGetFunction", missing);
  resolve(lib, d->launchKernel, "cuLaunchKernel", missing);
  resolve(lib, d->memAlloc, "cuMemAlloc_v2", missing);
  resolve(lib, d->memFree, "cuMemFree_v2", missing);
  resolve(lib, d->memcpyHtoD, "cuMemcpyHtoD_v2", missing);
  resolve(lib, d->memcpyDtoH, "cuMemcpyDtoH_v2", missing);
  if (!missing.empty()) {
    *reason = fmt::format("{} does not export {} (not a CUDA driver library?)", lib.path(),
                          fmt::join(missing, ", "));
    return nullptr;
  }
  // cuda.h maps the destroy calls to their _v2 entry points; cuEventElapsedTime became
  // cuEventElapsedTime_v2 in CUDA 12.8 (older drivers have only the first).
  std::vector<std::string> optional;
  resolve(lib, d->streamCreate, "cuStreamCreate", optional);
  resolve(lib, d->streamDestroy, "cuStreamDestroy_v2", optional);
  resolve(lib, d->streamSynchronize, "cuStreamSynchronize", optional);
  resolve(lib, d->eventCreate, "cuEventCreate", optional);
  resolve(lib, d->eventRecord, "cuEventRecord", optional);
  resolve(lib, d->eventSynchronize, "cuEventSynchronize", optional);
  resolve(lib, d->eventElapsedTime, "cuEventElapsedTime_v2", optional);
  if (!d->eventElapsedTime)
    resolve(lib, d->eventElapsedTime, "cuEventElapsedTime", optional);
  resolve(lib, d->eventDestroy, "cuEventDestroy_v2", optional);
  resolve(lib, d->eventQuery, "cuEventQuery", optional);
  // cuMemAllocHost maps to cuMemAllocHost_v2 and the copies to their _v2 entry points.
  resolve(lib, d->memHostAlloc, "cuMemHostAlloc", optional);
  resolve(lib, d->memAllocHost, "cuMemAllocHost_v2", optional);
  resolve(lib, d->memFreeHost, "cuMemFreeHost", optional);
  resolve(lib, d->memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", optional);
  resolve(lib, d->memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", optional);
  if (CuResult r = d->init(0); r != 0) {
    *reason = fmt::format("cuInit failed: {}", d->describe(r));
    return nullptr;
  }
  if (CuResult r = d->driverGetVersion(&d->version_); r != 0) {
    *reason = fmt::format("cuDriverGetVersion failed: {}", d->describe(r));
    return nullptr;
  }
  if (CuResult r = d->deviceGetCount(&d->deviceCount_); r != 0) {
    *reason = fmt::format("cuDeviceGetCount failed: {}", d->describe(r));
    return nullptr;
  }
  if (d->deviceCount_ <= 0) {
    *reason = "the CUDA driver reports no device";
    return nullptr;
  }
  d->contexts_.assign(static_cast<size_t>(d->deviceCount_), nullptr);
  return d;
}

Driver::~Driver() = default;

std::string Driver::describe(CuResult r) const {
  const char *name = nullptr, *text = nullptr;
  if (getErrorName)
    getErrorName(r, &name);
  if (getErrorString)
    getErrorString(r, &text);
  return fmt::format("{} ({})", name ? name : fmt::format("CUresult {}", r),
                     text ? text : "no description");
}

void Driver::check(CuResult r, const char *what) const {
  if (r != 0)
    fail(ErrorKind::Runtime, "kiln: CUDA driver: {} failed: {}", what, describe(r));
}

DeviceInfo Driver::device(int index) const {
  KILN_CHECK(index >= 0 && index < deviceCount_,
             "kiln: CUDA device {} does not exist (this machine has {} CUDA device{})", index,
             deviceCount_, deviceCount_ == 1 ? "" : "s");
  CuDevice dev = 0;
  check(deviceGet(&dev, index), "cuDeviceGet");
  DeviceInfo info;
  info.index = index;
  char name[256] = {};
  check(deviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName");
  info.name = name;
  auto attr = [&](int attribute, const char *what) {
    int v = 0;
    check(deviceGetAttribute(&v, attribute, dev), what);
    return v;
  };
  info.major = attr(kAttrComputeCapabilityMajor, "cuDeviceGetAttribute(compute capability)");
  info.minor = attr(kAttrComputeCapabilityMinor, "cuDeviceGetAttribute(compute capability)");
  info.multiprocessors = attr(kAttrMultiprocessorCount, "cuDeviceGetAttribute(SM count)");
  info.maxThreadsPerBlock = attr(kAttrMaxThreadsPerBlock, "cuDeviceGetAttribute(max threads)");
  info.sharedMemoryPerBlock =
      attr(kAttrSharedMemoryPerBlock, "cuDeviceGetAttribute(shared memory)");
  size_t bytes = 0;
  check(deviceTotalMem(&bytes, dev), "cuDeviceTotalMem");
  info.totalMemory = static_cast<int64_t>(bytes);
  return info;
}

CuContext Driver::primaryContext(int index) const {
  KILN_CHECK(index >= 0 && index < deviceCount_,
             "kiln: CUDA device {} does not exist (this machine has {} CUDA device{})", index,
             deviceCount_, deviceCount_ == 1 ? "" : "s");
  CuContext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ctx = contexts_[index];
    if (!ctx) {
      CuDevice dev = 0;
      check(deviceGet(&dev, index), "cuDeviceGet");
      check(primaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
      contexts_[index] = ctx; // held for the life of the process
    }
  }
  check(ctxSetCurrent(ctx), "cuCtxSetCurrent");
  return ctx;
}

void Driver::synchronize(int index) const {
  primaryContext(index);
  check(ctxSynchronize(), "cuCtxSynchronize");
}

} // namespace kiln::codegen::cuda

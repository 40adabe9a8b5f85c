// CudaDevice on a GPU through the driver API: the module loaded into the primary context,
// memory from a per-device CachingAllocator, launches and copies on the default stream.

#include "codegen/cuda/caching_allocator.h"
#include "codegen/cuda/compile.h"
#include "codegen/cuda/device.h"
#include "codegen/cuda/driver.h"
#include "codegen/cuda/staged_copy.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <limits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace kiln::codegen::cuda {

CachingAllocator &deviceAllocator(const Driver &driver, int index) {
  static std::mutex mu;
  static std::map<std::pair<const Driver *, int>, CachingAllocator *> allocators;
  std::lock_guard<std::mutex> lock(mu);
  CachingAllocator *&a = allocators[{&driver, index}];
  if (!a)
    a = new CachingAllocator(
        [&driver, index](size_t bytes) {
          driver.primaryContext(index);
          CuDevicePtr ptr = 0;
          driver.check(driver.memAlloc(&ptr, bytes), "cuMemAlloc");
          return static_cast<uint64_t>(ptr);
        },
        [&driver, index](uint64_t address) {
          driver.primaryContext(index);
          driver.check(driver.memFree(static_cast<CuDevicePtr>(address)), "cuMemFree");
        });
  return *a;
}

namespace {

class DriverDevice final : public CudaDevice {
public:
  DriverDevice(const Driver &driver, int index, const CompiledCuda &code)
      : driver_(driver), index_(index), info_(driver.device(index)),
        allocator_(deviceAllocator(driver, index)) {
    KILN_CHECK(!code.cubin.empty() || !code.ptx.empty(),
               "kiln: CUDA device {}: the compiled module has neither cubin nor PTX", index);
    KILN_CHECK(code.cubin.empty() || code.arch / 10 == info_.major,
               "kiln: CUDA device {} ({}) is sm_{}, but the cubin is for sm_{}", index, info_.name,
               info_.smVersion(), code.arch);
    driver_.primaryContext(index_);
    // A cubin runs as is; PTX (NUL-terminated, as cuModuleLoadData wants) is JIT-compiled by the
    // driver for this device.
    const void *image = code.cubin.empty() ? static_cast<const void *>(code.ptx.c_str())
                                           : static_cast<const void *>(code.cubin.data());
    driver_.check(driver_.moduleLoadData(&module_, image), "cuModuleLoadData");
  }

  ~DriverDevice() override {
    if (module_) {
      try {
        driver_.primaryContext(index_);
      } catch (const std::exception &) {
        return;
      }
      driver_.moduleUnload(module_);
    }
  }

  uint64_t allocate(size_t bytes) override { return allocator_.allocate(bytes); }
  void release(uint64_t address) override { allocator_.release(address); }

  void copyToDevice(uint64_t dst, const void *src, size_t bytes) override {
    if (bytes == 0)
      return;
    StagedCopy::forDevice(driver_, index_).toDevice(dst, src, bytes);
  }

  void copyToHost(void *dst, uint64_t src, size_t bytes) override {
    if (bytes == 0)
      return;
    StagedCopy::forDevice(driver_, index_).toHost(dst, src, bytes);
  }

  void launch(const CudaKernel &kernel, std::span<const uint64_t> args, int64_t grid,
              int block) override {
    KILN_CHECK(args.size() == kernel.args.size(), "kiln: {} takes {} arguments, got {}",
               kernel.name, kernel.args.size(), args.size());
    KILN_CHECK(grid > 0 && grid <= std::numeric_limits<int32_t>::max() && block > 0 &&
                   block <= kMaxBlockThreads,
               "kiln: {}: a launch of {} blocks of {} threads", kernel.name, grid, block);
    CuFunction fn = function(kernel.name);
    // Every argument is 64 bits (pointers, long long sizes and chunk counts): the kernel
    // parameter array points at each value.
    std::vector<uint64_t> values(args.begin(), args.end());
    std::vector<void *> params;
    for (uint64_t &v : values)
      params.push_back(&v);
    driver_.primaryContext(index_);
    driver_.check(driver_.launchKernel(fn, static_cast<unsigned>(grid), 1, 1,
                                       static_cast<unsigned>(block), 1, 1, 0, nullptr,
                                       params.data(), nullptr),
                  "cuLaunchKernel");
  }

  LaunchLimits limits() const override {
    LaunchLimits l;
    l.multiprocessors = info_.multiprocessors;
    return l;
  }

  void synchronize() override { driver_.synchronize(index_); }
  std::string name() const override { return info_.name; }
  int ordinal() const override { return index_; }

private:
  CuFunction function(const std::string &name) {
    std::lock_guard<std::mutex> lock(mu_);
    CuFunction &fn = functions_[name];
    if (!fn) {
      driver_.primaryContext(index_);
      driver_.check(driver_.moduleGetFunction(&fn, module_, name.c_str()), "cuModuleGetFunction");
    }
    return fn;
  }

  const Driver &driver_;
  int index_;
  DeviceInfo info_;
  CachingAllocator &allocator_;
  CuModule module_ = nullptr;
  std::mutex mu_;
  std::map<std::string, CuFunction> functions_;
};

} // namespace

std::shared_ptr<CudaDevice> openDriverDevice(int index, const CompiledCuda &code) {
  std::string reason;
  const Driver *driver = Driver::get(&reason);
  KILN_CHECK(driver, "kiln: CUDA is not available: {}", reason);
  return openDriverDevice(*driver, index, code);
}

std::shared_ptr<CudaDevice> openDriverDevice(const Driver &driver, int index,
                                             const CompiledCuda &code) {
  return std::make_shared<DriverDevice>(driver, index, code);
}

} // namespace kiln::codegen::cuda

// The driver backend (GPUs through libcuda and NVRTC) and the emulator backend (one device on the
// host), behind Backend.

#include "cuda/backend.h"

#include "codegen/cuda/caching_allocator.h"
#include "codegen/cuda/compile.h"
#include "codegen/cuda/event.h"
#include "codegen/cuda/host_emulator.h"
#include "codegen/cuda/staged_copy.h"
#include "runtime/error.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string_view>

namespace kiln::cuda {

using codegen::cuda::CachingAllocator;
using codegen::cuda::CudaDevice;
using codegen::cuda::CudaEvent;
using codegen::cuda::CudaModule;
using codegen::cuda::DeviceInfo;
using codegen::cuda::Driver;
using codegen::cuda::StagedCopy;

void Backend::checkIndex(int index) const {
  KILN_CHECK_KIND(Value, index >= 0 && index < deviceCount(),
                  "kiln: CUDA device {} does not exist ({} device{})", index, deviceCount(),
                  deviceCount() == 1 ? "" : "s");
}

void Event::record() {
  recordNow();
  recorded_ = true;
}

float Event::elapsedMillis(Event &end) {
  KILN_CHECK_KIND(Value, timing_ && end.timing_,
                  "kiln: Both events must be created with argument 'enable_timing=True'.");
  KILN_CHECK_KIND(Value, recorded_ && end.recorded_,
                  "kiln: Both events must be recorded before calculating elapsed time.");
  KILN_CHECK(device_ == end.device_, "kiln: elapsed_time between events of CUDA devices {} and {}",
             device_, end.device_);
  KILN_CHECK(query() && end.query(),
             "kiln: Both events must be completed before calculating elapsed time.");
  return millisTo(end);
}

namespace {

/// A cuEvent on the device's default stream.
class DriverEvent final : public Event {
public:
  DriverEvent(const Driver &driver, int index, bool timing)
      : Event(index, timing), event_(driver, index, timing ? 0 : CudaEvent::kDisableTiming) {}

  void synchronize() override {
    if (recorded())
      event_.synchronize();
  }
  bool query() override { return !recorded() || event_.query(); }

protected:
  void recordNow() override { event_.record(); }
  float millisTo(Event &end) override {
    auto *e = dynamic_cast<DriverEvent *>(&end);
    KILN_CHECK(e, "kiln: elapsed_time between events of different CUDA backends");
    return event_.elapsedMillis(e->event_);
  }

private:
  CudaEvent event_;
};

/// The emulator's work is finished when the call that queued it returns, so an event is complete
/// the moment it is recorded and its time is the host's clock then.
class EmulatorEvent final : public Event {
public:
  EmulatorEvent(int index, bool timing) : Event(index, timing) {}

  void synchronize() override {}
  bool query() override { return true; }

protected:
  void recordNow() override { at_ = std::chrono::steady_clock::now(); }
  float millisTo(Event &end) override {
    auto *e = dynamic_cast<EmulatorEvent *>(&end);
    KILN_CHECK(e, "kiln: elapsed_time between events of different CUDA backends");
    return std::chrono::duration<float, std::milli>(e->at_ - at_).count();
  }

private:
  std::chrono::steady_clock::time_point at_;
};

class DriverBackend final : public Backend {
public:
  explicit DriverBackend(const Driver &driver) : driver_(driver) {}

  bool emulated() const override { return false; }
  int deviceCount() const override { return driver_.deviceCount(); }
  DeviceInfo device(int index) const override {
    checkIndex(index);
    return driver_.device(index);
  }
  std::shared_ptr<CudaDevice> open(int index, const CudaModule &module) override {
    codegen::cuda::CudaCompileOptions options;
    options.arch = device(index).smVersion();
    codegen::cuda::CompiledCuda code = codegen::cuda::compileCuda(module.source, options);
    return codegen::cuda::openDriverDevice(driver_, index, code);
  }
  uint64_t allocate(int index, size_t bytes) override { return allocator(index).allocate(bytes); }
  void release(int index, uint64_t address) override { allocator(index).release(address); }
  void copyToDevice(int index, uint64_t dst, const void *src, size_t bytes) override {
    staged(index).toDevice(dst, src, bytes);
  }
  void copyToHost(int index, void *dst, uint64_t src, size_t bytes) override {
    staged(index).toHost(dst, src, bytes);
  }
  void synchronize(int index) override {
    checkIndex(index);
    driver_.synchronize(index);
  }
  MemoryStats memory(int index) const override {
    const CachingAllocator &a = allocator(index);
    return {a.allocated(), a.reserved()};
  }
  void emptyCache(int index) override { allocator(index).emptyCache(); }
  std::unique_ptr<Event> createEvent(int index, bool timing) override {
    checkIndex(index);
    return std::make_unique<DriverEvent>(driver_, index, timing);
  }

private:
  StagedCopy &staged(int index) const {
    checkIndex(index);
    return StagedCopy::forDevice(driver_, index);
  }
  CachingAllocator &allocator(int index) const {
    checkIndex(index);
    return codegen::cuda::deviceAllocator(driver_, index);
  }

  const Driver &driver_;
};

/// One device on the host. Fresh memory is filled with 0xff bytes (NaN for floats), as the
/// emulator's own buffers are, so a kernel that reads what nobody wrote shows up in tests.
class EmulatorBackend final : public Backend {
public:
  EmulatorBackend()
      : allocator_(
            [](size_t bytes) {
              size_t rounded = (bytes + 255) / 256 * 256;
              void *p = std::aligned_alloc(256, rounded ? rounded : 256);
              KILN_CHECK(p, "kiln: the CUDA emulator is out of host memory ({} bytes)", bytes);
              std::memset(p, 0xff, rounded);
              return reinterpret_cast<uint64_t>(p);
            },
            [](uint64_t address) { std::free(reinterpret_cast<void *>(address)); }) {}

  bool emulated() const override { return true; }
  int deviceCount() const override { return 1; }
  DeviceInfo device(int index) const override {
    checkIndex(index);
    DeviceInfo info;
    info.index = 0;
    info.name = "kiln host emulator";
    info.major = 9;
    info.minor = 0;
    info.multiprocessors = codegen::cuda::LaunchLimits{}.multiprocessors;
    info.maxThreadsPerBlock = 1024;
    info.sharedMemoryPerBlock = 48 << 10;
    return info;
  }
  std::shared_ptr<CudaDevice> open(int index, const CudaModule &module) override {
    checkIndex(index);
    // Small grids: every block's threads are host threads.
    codegen::cuda::LaunchLimits limits;
    limits.multiprocessors = 2;
    limits.blocksPerMultiprocessor = 2;
    limits.splitMinPoints = 1 << 12;
    limits.pointsPerChunk = 1 << 10;
    return std::make_shared<codegen::cuda::HostEmulatorDevice>(module, limits);
  }
  uint64_t allocate(int index, size_t bytes) override {
    checkIndex(index);
    return allocator_.allocate(bytes);
  }
  void release(int, uint64_t address) override { allocator_.release(address); }
  void copyToDevice(int, uint64_t dst, const void *src, size_t bytes) override {
    std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
  }
  void copyToHost(int, void *dst, uint64_t src, size_t bytes) override {
    std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  }
  void synchronize(int index) override { checkIndex(index); }
  MemoryStats memory(int index) const override {
    checkIndex(index);
    return {allocator_.allocated(), allocator_.reserved()};
  }
  void emptyCache(int index) override {
    checkIndex(index);
    allocator_.emptyCache();
  }
  std::unique_ptr<Event> createEvent(int index, bool timing) override {
    checkIndex(index);
    return std::make_unique<EmulatorEvent>(index, timing);
  }

private:
  CachingAllocator allocator_;
};

struct Chosen {
  std::unique_ptr<Backend> backend;
  std::string reason;
};

const Chosen &chosen() {
  static const Chosen c = [] {
    Chosen r;
    const char *emulate = std::getenv("KILN_CUDA_EMULATOR");
    if (emulate && std::string_view(emulate) == "1") {
      if (codegen::cuda::HostEmulator::findCompiler())
        r.backend = std::make_unique<EmulatorBackend>();
      else
        r.reason = "KILN_CUDA_EMULATOR=1, but no host C++ compiler ($CXX, c++, g++ or clang++) "
                   "was found to build the emulated kernels";
      return r;
    }
    if (const Driver *d = Driver::get(&r.reason))
      r.backend = std::make_unique<DriverBackend>(*d);
    return r;
  }();
  return c;
}

} // namespace

Backend *Backend::get(std::string *reason) {
  const Chosen &c = chosen();
  if (!c.backend && reason)
    *reason = c.reason;
  return c.backend.get();
}

std::string Backend::unavailableReason() { return chosen().reason; }

std::unique_ptr<Backend> Backend::overDriver(const Driver &driver) {
  return std::make_unique<DriverBackend>(driver);
}

} // namespace kiln::cuda

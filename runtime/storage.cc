#include "runtime/storage.h"

#include "runtime/device_memory.h"
#include "runtime/error.h"
#include "runtime/host_cache.h"

#include <cstdlib>
#include <new>

namespace kiln {

Device Device::parse(const std::string &s) {
  if (s == "cpu")
    return {DeviceType::CPU, 0};
  if (s == "cuda")
    return {DeviceType::CUDA, 0};
  if (s.rfind("cuda:", 0) == 0) {
    try {
      return {DeviceType::CUDA, std::stoi(s.substr(5))};
    } catch (const std::exception &) {
    }
  }
  if (s.rfind("cpu:", 0) == 0)
    return {DeviceType::CPU, 0};
  fail(ErrorKind::Value, "invalid device string '{}': expected 'cpu', 'cuda' or 'cuda:N'", s);
}

namespace {
DeviceMemory *registered[2] = {nullptr, nullptr};
} // namespace

void registerDeviceMemory(DeviceType type, DeviceMemory *memory) {
  KILN_CHECK(type != DeviceType::CPU, "registerDeviceMemory: the CPU's memory is the host's");
  registered[static_cast<int>(type)] = memory;
}

DeviceMemory &deviceMemory(Device device) {
  DeviceMemory *m =
      device.type == DeviceType::CPU ? nullptr : registered[static_cast<int>(device.type)];
  KILN_CHECK(m, "device {} is not available: no memory is registered for it", device.str());
  return *m;
}

void Storage::failHostAccess() const {
  fail(ErrorKind::Runtime,
       "kiln: this operation has no {} implementation yet and runs only on the CPU; move the "
       "tensor there with .cpu() first",
       device_.type == DeviceType::CUDA ? "CUDA" : device_.str());
}

namespace {

std::atomic<int64_t> liveHostBytes{0}, peakHostBytes{0};

} // namespace

std::shared_ptr<Storage> Storage::counted(std::shared_ptr<Storage> s) {
  int64_t n = static_cast<int64_t>(s->nbytes());
  int64_t live = liveHostBytes.fetch_add(n, std::memory_order_relaxed) + n;
  int64_t peak = peakHostBytes.load(std::memory_order_relaxed);
  while (live > peak && !peakHostBytes.compare_exchange_weak(peak, live, std::memory_order_relaxed))
    ;
  s->countedBytes_ = n;
  return s;
}

HostMemoryStats hostMemoryStats() {
  return {liveHostBytes.load(std::memory_order_relaxed),
          peakHostBytes.load(std::memory_order_relaxed)};
}

void resetHostPeak() {
  peakHostBytes.store(liveHostBytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  if (device.type != DeviceType::CPU) {
    DeviceMemory &m = deviceMemory(device);
    void *p = m.allocate(device.index, nbytes);
    return std::make_shared<Storage>(p, nbytes, device,
                                     [&m, p, index = device.index] { m.release(index, p); });
  }
  constexpr size_t kAlign = 64;
  KILN_CHECK(nbytes <= (size_t{1} << 62), "out of memory: cannot allocate {} bytes", nbytes);
  if (nbytes >= hostcache::kMinBytes) {
    size_t sizeClass = hostcache::sizeClass(nbytes);
    void *p = hostcache::take(sizeClass);
    if (!p)
      fail(ErrorKind::Runtime, "out of memory: cannot allocate {} bytes", nbytes);
    return counted(std::make_shared<Storage>(p, nbytes, device,
                                             [p, sizeClass] { hostcache::give(p, sizeClass); }));
  }
  size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
  void *p = rounded ? std::aligned_alloc(kAlign, rounded) : nullptr;
  if (rounded && !p)
    fail(ErrorKind::Runtime, "out of memory: cannot allocate {} bytes", nbytes);
  return counted(std::make_shared<Storage>(p, nbytes, device, [p] { std::free(p); }));
}

std::shared_ptr<Storage> Storage::borrow(void *data, size_t nbytes, Device device,
                                         std::function<void()> release) {
  return std::make_shared<Storage>(data, nbytes, device, std::move(release));
}

Storage::~Storage() {
  if (release_)
    release_();
  if (countedBytes_)
    liveHostBytes.fetch_sub(countedBytes_, std::memory_order_relaxed);
}

} // namespace kiln

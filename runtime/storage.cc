#include "runtime/storage.h"

#include "runtime/device_memory.h"
#include "runtime/error.h"
#include "runtime/host_cache.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
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
  if (released_)
    fail(ErrorKind::Runtime,
         "kiln: this tensor's memory was released (its storage was resized to 0 bytes; "
         "FullyShardedDataParallel does so to a unit's gathered parameters between its forward "
         "and its backward)");
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

void Storage::resize(size_t nbytes) {
  if (nbytes == nbytes_ && !released_)
    return;
  KILN_CHECK(nbytes == 0 || nbytes >= madeBytes_,
             "Storage.resize_: {} bytes is below the {} the storage was made with (views may "
             "reach past it); resize to 0 to release it, or to at least {}",
             nbytes, madeBytes_, madeBytes_);
  size_t kept = released_ ? 0 : std::min(nbytes, nbytes_);
  KILN_CHECK(!kept || device_.type == DeviceType::CPU,
             "Storage.resize_: keeping the contents of {} memory is not supported; resize to 0 "
             "first",
             device_.str());
  std::shared_ptr<Storage> fresh = allocate(nbytes, device_);
  if (kept)
    std::memcpy(fresh->data_, data_, kept);
  // The old memory leaves with `fresh`, whose destructor frees and uncounts it.
  std::swap(data_, fresh->data_);
  std::swap(nbytes_, fresh->nbytes_);
  std::swap(release_, fresh->release_);
  std::swap(countedBytes_, fresh->countedBytes_);
  released_ = nbytes == 0;
}

Storage::~Storage() {
  if (release_)
    release_();
  if (countedBytes_)
    liveHostBytes.fetch_sub(countedBytes_, std::memory_order_relaxed);
}

} // namespace kiln

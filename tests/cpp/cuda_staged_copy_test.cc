// Host<->device copies through pinned staging buffers (codegen/cuda/staged_copy.h) and the CUDA
// backend's copies and events over a fake libcuda (tests/cpp/fake_cuda_staging.cc) whose device
// memory is host memory and whose default stream really defers its work: a buffer reused before
// its DMA ran, or a copy returning before its last chunk, shows up as wrong bytes.

#include "codegen/cuda/driver.h"
#include "codegen/cuda/staged_copy.h"
#include "cuda/backend.h"
#include "runtime/error.h"

#include <kiln_catch.h>

#include <cstdint>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

using namespace kiln;
using namespace kiln::codegen::cuda;

namespace {

/// One fake libcuda, loaded once per process, with its control functions.
struct Fake {
  const Driver *driver = nullptr;
  const char *(*log)() = nullptr;
  void (*reset)() = nullptr;
  void (*setPinnedLimit)(size_t) = nullptr;
  int (*pinnedLive)() = nullptr;
  int (*queued)() = nullptr;
  void (*failAsyncIn)(int) = nullptr;
};

Fake fake(const char *name) {
  std::string path = std::filesystem::absolute(std::string("tests/cpp/") + name).string();
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
  Fake f;
  f.driver = d;
  auto get = [&](auto &fn, const char *symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, symbol));
    REQUIRE(fn);
  };
  get(f.log, "fake_log");
  get(f.reset, "fake_reset");
  get(f.setPinnedLimit, "fake_set_pinned_limit");
  get(f.pinnedLive, "fake_pinned_live");
  get(f.queued, "fake_queued");
  get(f.failAsyncIn, "fake_fail_async_in");
  f.reset();
  return f;
}

std::vector<unsigned char> pattern(size_t bytes, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(bytes);
  for (unsigned char &c : v)
    c = static_cast<unsigned char>(rng());
  return v;
}

/// Device memory of the fake (host memory) with 16 guard bytes after `bytes`.
struct DeviceBuffer {
  DeviceBuffer(const Driver &driver, size_t bytes) : driver(driver), bytes(bytes) {
    REQUIRE(driver.memAlloc(&address, bytes + 16) == 0);
    std::memset(host(), 0xab, bytes + 16);
  }
  ~DeviceBuffer() { driver.memFree(address); }
  unsigned char *host() const { return reinterpret_cast<unsigned char *>(address); }
  bool guardIntact() const {
    for (size_t i = 0; i < 16; ++i)
      if (host()[bytes + i] != 0xab)
        return false;
    return true;
  }

  const Driver &driver;
  size_t bytes;
  CuDevicePtr address = 0;
};

int count(const std::string &log, const std::string &what) {
  int n = 0;
  for (size_t at = log.find(what); at != std::string::npos; at = log.find(what, at + 1))
    ++n;
  return n;
}

/// One round trip of `bytes` through `copy`; checks the bytes on the device, back on the host,
/// and the guards on both sides. Returns the log of the two copies.
std::pair<std::string, std::string> roundTrip(const Fake &f, StagedCopy &copy, size_t bytes,
                                              unsigned seed) {
  INFO("bytes " << bytes);
  std::vector<unsigned char> src = pattern(bytes, seed);
  DeviceBuffer device(*f.driver, bytes);
  f.log();
  copy.toDevice(device.address, src.data(), bytes);
  std::string up = f.log();
  // Straight from the fake's memory: nothing may still be queued for it.
  CHECK(f.queued() == 0);
  CHECK(std::memcmp(device.host(), src.data(), bytes) == 0);
  CHECK(device.guardIntact());
  std::vector<unsigned char> back(bytes + 16, 0xcd);
  copy.toHost(back.data(), device.address, bytes);
  std::string down = f.log();
  CHECK(f.queued() == 0);
  CHECK(std::memcmp(back.data(), src.data(), bytes) == 0);
  for (size_t i = bytes; i < bytes + 16; ++i)
    CHECK(back[i] == 0xcd);
  return {up, down};
}

constexpr StagedCopyOptions kSmall{1000, 400}; // threshold 1000 bytes, chunks of 400

} // namespace

TEST_CASE("staged copy: every size gives the exact bytes in both directions", "[cuda][staging]") {
  Fake f = fake("libkiln_fake_cuda_staging.so");
  StagedCopy copy(*f.driver, 0, kSmall);
  REQUIRE(copy.staging());
  unsigned seed = 1;
  for (size_t bytes : {size_t(0), size_t(1), size_t(999), size_t(1000), size_t(1001), size_t(1399),
                       size_t(1400), size_t(1401), size_t(4097), size_t(12345)}) {
    INFO("bytes " << bytes);
    auto [up, down] = roundTrip(f, copy, bytes, seed++);
    if (bytes == 0) {
      CHECK(up.empty());
      CHECK(down.empty());
    } else if (bytes <= kSmall.threshold) {
      CHECK(up == "HtoD(" + std::to_string(bytes) + ")");
      CHECK(down == "DtoH(" + std::to_string(bytes) + ")");
    } else {
      int chunks = static_cast<int>((bytes + 399) / 400);
      CHECK(count(up, "HtoDAsync(") == chunks);
      CHECK(count(down, "DtoHAsync(") == chunks);
      CHECK(count(up + down, ",unpinned") == 0);
      CHECK(count(up + down, "HtoD(") + count(up + down, "DtoH(") == 0);
    }
  }
}

TEST_CASE("staged copy: the exact calls of 3.5 chunks, buffers reused", "[cuda][staging]") {
  Fake f = fake("libkiln_fake_cuda_staging.so");
  int live = f.pinnedLive();
  {
    StagedCopy copy(*f.driver, 0, kSmall);
    CHECK(std::string(f.log()).empty()); // nothing allocated before the first large copy
    auto [up, down] = roundTrip(f, copy, 1400, 7);
    // Two pinned buffers and events without timing, made once; chunk i + 2 waits for the DMA of
    // chunk i; the copy waits for its last DMA.
    CHECK(up == "hostAlloc(400) eventCreate(e1,2) hostAlloc(400) eventCreate(e2,2) "
                "HtoDAsync(400,p0) record(e1) HtoDAsync(400,p1) record(e2) "
                "sync(e1) HtoDAsync(400,p0) record(e1) sync(e2) HtoDAsync(200,p1) record(e2) "
                "sync(e1) sync(e2)");
    // Chunk i's DMA is queued before chunk i - 1 leaves the other buffer.
    CHECK(down == "DtoHAsync(400,p0) record(e1) DtoHAsync(400,p1) record(e2) sync(e1) "
                  "DtoHAsync(400,p0) record(e1) sync(e2) DtoHAsync(200,p1) record(e2) sync(e1) "
                  "sync(e2)");
    CHECK(f.pinnedLive() == live + 2);
    auto [up2, down2] = roundTrip(f, copy, 5001, 8);
    CHECK(count(up2 + down2, "hostAlloc") + count(up2 + down2, "eventCreate") == 0);
    CHECK(count(up2, "HtoDAsync(") == 13);
    CHECK(count(up2, ",p0)") == 7);
    CHECK(count(up2, ",p1)") == 6);
    CHECK(f.pinnedLive() == live + 2);
  }
  CHECK(std::string(f.log()) == "eventDestroy(e1) freeHost(p0) eventDestroy(e2) freeHost(p1)");
  CHECK(f.pinnedLive() == live);
}

TEST_CASE("staged copy: without pinned memory or async copies, copies stay synchronous",
          "[cuda][staging]") {
  Fake f = fake("libkiln_fake_cuda_staging_sync.so");
  CHECK(!f.driver->hasStagedCopies());
  CHECK(f.driver->hasEvents());
  StagedCopy copy(*f.driver, 0, kSmall);
  CHECK(!copy.staging());
  for (size_t bytes : {size_t(1), size_t(1400), size_t(12345)}) {
    auto [up, down] = roundTrip(f, copy, bytes, 3);
    CHECK(up == "HtoD(" + std::to_string(bytes) + ")");
    CHECK(down == "DtoH(" + std::to_string(bytes) + ")");
  }
}

TEST_CASE("staged copy: cuMemAllocHost when cuMemHostAlloc is missing", "[cuda][staging]") {
  Fake f = fake("libkiln_fake_cuda_staging_alloc_host.so");
  CHECK(!f.driver->memHostAlloc);
  CHECK(f.driver->hasStagedCopies());
  StagedCopy copy(*f.driver, 0, kSmall);
  auto [up, down] = roundTrip(f, copy, 2001, 4);
  CHECK(up.rfind("allocHost(400) eventCreate(e1,2) allocHost(400) eventCreate(e2,2) "
                 "HtoDAsync(400,p0)",
                 0) == 0);
  CHECK(count(down, "DtoHAsync(") == 6);
}

TEST_CASE("staged copy: a refused pinned allocation falls back for good", "[cuda][staging]") {
  Fake f = fake("libkiln_fake_cuda_staging.so");
  int live = f.pinnedLive();
  f.setPinnedLimit(500); // the first buffer fits, the second does not
  StagedCopy copy(*f.driver, 0, kSmall);
  auto [up, down] = roundTrip(f, copy, 1400, 5);
  CHECK(up == "hostAlloc(400) eventCreate(e1,2) hostAlloc(400) eventDestroy(e1) freeHost(p0) "
              "HtoD(1400)");
  CHECK(down == "DtoH(1400)");
  CHECK(!copy.staging());
  CHECK(f.pinnedLive() == live);
  f.setPinnedLimit(~size_t(0));
  auto [up2, down2] = roundTrip(f, copy, 1400, 6); // no retry
  CHECK(up2 == "HtoD(1400)");
  CHECK(down2 == "DtoH(1400)");
}

TEST_CASE("staged copy: a failing chunk drains the device and the next copy works",
          "[cuda][staging]") {
  Fake f = fake("libkiln_fake_cuda_staging.so");
  StagedCopy copy(*f.driver, 0, kSmall);
  std::vector<unsigned char> src = pattern(1400, 9), back(1400);
  DeviceBuffer device(*f.driver, 1400);
  f.failAsyncIn(2); // the third chunk
  CHECK_THROWS_WITH(
      copy.toDevice(device.address, src.data(), 1400),
      Catch::Contains("kiln: CUDA driver: cuMemcpyHtoDAsync failed: CUDA_ERROR_FAKE"));
  std::string log = f.log();
  CHECK(log.size() > 15);
  CHECK(log.substr(log.size() - 15) == " ctxSynchronize");
  CHECK(f.queued() == 0); // the two chunks queued before the error have landed
  CHECK(std::memcmp(device.host(), src.data(), 800) == 0);
  f.failAsyncIn(1);
  CHECK_THROWS_WITH(copy.toHost(back.data(), device.address, 1400),
                    Catch::Contains("cuMemcpyDtoHAsync failed"));
  CHECK(f.queued() == 0);
  CHECK(copy.staging()); // an error is not a refusal
  auto [up, down] = roundTrip(f, copy, 1400, 10);
  CHECK(count(up + down, "Async(") == 8);
}

TEST_CASE("staged copy: threads copying at once share the buffers safely", "[cuda][staging]") {
  Fake f = fake("libkiln_fake_cuda_staging.so");
  StagedCopy copy(*f.driver, 0, kSmall);
  constexpr int kThreads = 4, kRounds = 25;
  std::vector<int> failures(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        size_t bytes = 1001 + 397 * static_cast<size_t>((t * kRounds + r) % 13);
        std::vector<unsigned char> src = pattern(bytes, 100 * t + r);
        CuDevicePtr dst = 0;
        f.driver->memAlloc(&dst, bytes);
        copy.toDevice(dst, src.data(), bytes);
        std::vector<unsigned char> back(bytes);
        copy.toHost(back.data(), dst, bytes);
        if (back != src)
          ++failures[t];
        f.driver->memFree(dst);
      }
    });
  for (std::thread &t : threads)
    t.join();
  CHECK(failures == std::vector<int>(kThreads, 0));
  std::string log = f.log();
  CHECK(count(log, "hostAlloc") == 2);
  CHECK(count(log, ",unpinned") == 0);
}

TEST_CASE("cuda backend on the driver: copies staged above 1 MiB", "[cuda][staging]") {
  Fake f = fake("libkiln_fake_cuda_staging.so");
  std::unique_ptr<cuda::Backend> backend = cuda::Backend::overDriver(*f.driver);
  CHECK(!backend->emulated());
  StagedCopyOptions defaults;
  CHECK(defaults.threshold == size_t(1) << 20);
  CHECK(defaults.chunkBytes == size_t(2) << 20);
  for (size_t bytes :
       {defaults.threshold, defaults.threshold + 1, size_t(7) << 20, (size_t(7) << 20) + 3}) {
    INFO("bytes " << bytes);
    std::vector<unsigned char> src = pattern(bytes, static_cast<unsigned>(bytes));
    uint64_t dst = backend->allocate(0, bytes);
    f.log();
    backend->copyToDevice(0, dst, src.data(), bytes);
    std::vector<unsigned char> back(bytes);
    backend->copyToHost(0, back.data(), dst, bytes);
    std::string log = f.log();
    CHECK(back == src);
    if (bytes <= defaults.threshold) {
      CHECK(log == "HtoD(1048576) DtoH(1048576)");
    } else {
      int chunks = static_cast<int>((bytes + defaults.chunkBytes - 1) / defaults.chunkBytes);
      CHECK(count(log, "HtoDAsync(") == chunks);
      CHECK(count(log, "DtoHAsync(") == chunks);
      CHECK(count(log, "HtoD(") + count(log, "DtoH(") == 0);
    }
    backend->release(0, dst);
  }
  CHECK_THROWS_WITH(backend->copyToDevice(1, 0, nullptr, 1),
                    Catch::Contains("CUDA device 1 does not exist"));
}

TEST_CASE("cuda backend on the driver: events", "[cuda][events]") {
  Fake f = fake("libkiln_fake_cuda_staging.so");
  std::unique_ptr<cuda::Backend> backend = cuda::Backend::overDriver(*f.driver);
  std::unique_ptr<cuda::Event> start = backend->createEvent(0, true);
  std::unique_ptr<cuda::Event> end = backend->createEvent(0, true);
  std::unique_ptr<cuda::Event> plain = backend->createEvent(0, false);
  CHECK(std::string(f.log()) == "eventCreate(e1,0) eventCreate(e2,0) eventCreate(e3,2)");
  CHECK(start->timing());
  CHECK(!plain->timing());
  // Never recorded: done, nothing to wait for, no driver call; no time.
  CHECK(start->query());
  start->synchronize();
  CHECK(std::string(f.log()).empty());
  auto errorOf = [](auto &&fn) -> std::pair<ErrorKind, std::string> {
    try {
      fn();
    } catch (const Error &e) {
      return {e.kind(), e.what()};
    }
    return {ErrorKind::Runtime, "no error"};
  };
  auto notRecorded = errorOf([&] { start->elapsedMillis(*end); });
  CHECK(notRecorded.first == ErrorKind::Value);
  CHECK(notRecorded.second ==
        "kiln: Both events must be recorded before calculating elapsed time.");
  start->record();
  end->record();
  plain->record();
  CHECK(std::string(f.log()) == "record(e1) record(e2) record(e3)");
  auto noTiming = errorOf([&] { start->elapsedMillis(*plain); });
  CHECK(noTiming.first == ErrorKind::Value);
  CHECK(noTiming.second == "kiln: Both events must be created with argument 'enable_timing=True'.");
  // The fake's device reaches a record only when asked: the first query finds it pending.
  auto pending = errorOf([&] { start->elapsedMillis(*end); });
  CHECK(pending.first == ErrorKind::Runtime);
  CHECK(pending.second == "kiln: Both events must be completed before calculating elapsed time.");
  f.log();
  end->synchronize();
  CHECK(end->query());
  CHECK(start->elapsedMillis(*end) == 1.5f);
  CHECK(std::string(f.log()) == "sync(e2) query(e2) query(e1) query(e2) elapsed(e1,e2)");
  // Re-recorded: the time runs from the new record.
  end->record();
  CHECK(!end->query());
  CHECK(end->query());
  CHECK(start->elapsedMillis(*end) == 4.5f);
  plain.reset();
  end.reset();
  start.reset();
  f.log();
}

TEST_CASE("cuda backend on the driver: a driver without events", "[cuda][events]") {
  std::string path = std::filesystem::absolute("tests/cpp/libkiln_fake_cuda_no_events.so");
  std::string reason;
  static const Driver *driver = Driver::load(path, &reason).release();
  INFO(reason);
  REQUIRE(driver);
  std::unique_ptr<cuda::Backend> backend = cuda::Backend::overDriver(*driver);
  CHECK_THROWS_WITH(backend->createEvent(0, true),
                    Catch::Contains("kiln: CUDA events are not available"));
  CHECK_THROWS_WITH(backend->createEvent(3, true), Catch::Contains("CUDA device 3 does not exist"));
}

#include "codegen/cuda/staged_copy.h"

#include "codegen/cuda/event.h"
#include "runtime/error.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

namespace kiln::codegen::cuda {

StagedCopy::StagedCopy(const Driver &driver, int ordinal, StagedCopyOptions options)
    : driver_(driver), ordinal_(ordinal), options_(options) {
  KILN_CHECK(options_.chunkBytes > 0, "kiln: StagedCopy needs chunks of at least one byte");
}

StagedCopy::~StagedCopy() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!buffers_[0])
    return;
  try {
    driver_.primaryContext(ordinal_);
  } catch (const std::exception &) {
    return; // the context is gone, and the buffers with it
  }
  release();
}

StagedCopy &StagedCopy::forDevice(const Driver &driver, int ordinal) {
  static std::mutex mu;
  static std::map<std::pair<const Driver *, int>, StagedCopy *> copies;
  std::lock_guard<std::mutex> lock(mu);
  StagedCopy *&c = copies[{&driver, ordinal}];
  if (!c)
    c = new StagedCopy(driver, ordinal);
  return *c;
}

bool StagedCopy::staging() const {
  std::lock_guard<std::mutex> lock(mu_);
  return driver_.hasStagedCopies() && !refused_;
}

void StagedCopy::release() noexcept {
  // A DMA may still read or write a buffer after a failed copy: let the device finish first.
  if (pending_[0] || pending_[1])
    driver_.ctxSynchronize();
  for (int b = 0; b < 2; ++b) {
    if (events_[b])
      driver_.eventDestroy(events_[b]);
    if (buffers_[b])
      driver_.memFreeHost(buffers_[b]);
    events_[b] = nullptr;
    buffers_[b] = nullptr;
    pending_[b] = false;
  }
}

bool StagedCopy::ready() {
  if (buffers_[0])
    return true;
  if (refused_ || !driver_.hasStagedCopies())
    return false;
  for (int b = 0; b < 2; ++b) {
    CuResult r = driver_.memHostAlloc ? driver_.memHostAlloc(&buffers_[b], options_.chunkBytes, 0)
                                      : driver_.memAllocHost(&buffers_[b], options_.chunkBytes);
    if (r != 0)
      buffers_[b] = nullptr;
    else if (driver_.eventCreate(&events_[b], CudaEvent::kDisableTiming) != 0)
      events_[b] = nullptr;
    if (!buffers_[b] || !events_[b]) {
      // Page-locked memory is scarce (limits, containers): copies stay correct without it, so
      // they run synchronously rather than fail, or retry the allocation every time.
      release();
      refused_ = true;
      return false;
    }
  }
  return true;
}

void StagedCopy::wait(int b) {
  if (!pending_[b])
    return;
  driver_.check(driver_.eventSynchronize(events_[b]), "cuEventSynchronize");
  pending_[b] = false;
}

namespace {

/// On an error in the middle of a staged copy, a queued DMA may still use a buffer whose event
/// was never recorded: drain the device so the next copy finds both buffers idle.
template <typename Fn> void drainingOnError(const Driver &driver, bool (&pending)[2], Fn &&fn) {
  try {
    fn();
  } catch (...) {
    driver.ctxSynchronize();
    pending[0] = pending[1] = false;
    throw;
  }
}

} // namespace

void StagedCopy::toDevice(CuDevicePtr dst, const void *src, size_t bytes) {
  if (bytes == 0)
    return;
  driver_.primaryContext(ordinal_);
  if (bytes > options_.threshold) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready()) {
      drainingOnError(driver_, pending_, [&] {
        const char *from = static_cast<const char *>(src);
        size_t chunk = options_.chunkBytes;
        for (size_t off = 0, i = 0; off < bytes; off += chunk, ++i) {
          int b = static_cast<int>(i & 1);
          size_t n = std::min(chunk, bytes - off);
          wait(b); // the DMA of chunk i - 2 has read the buffer
          std::memcpy(buffers_[b], from + off, n);
          driver_.check(driver_.memcpyHtoDAsync(dst + off, buffers_[b], n, nullptr),
                        "cuMemcpyHtoDAsync");
          driver_.check(driver_.eventRecord(events_[b], nullptr), "cuEventRecord");
          pending_[b] = true;
        }
        // The default stream runs in order: the last chunk's event covers both, and waiting on
        // the earlier one costs nothing.
        wait(0);
        wait(1);
      });
      return;
    }
  }
  driver_.check(driver_.memcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

void StagedCopy::toHost(void *dst, CuDevicePtr src, size_t bytes) {
  if (bytes == 0)
    return;
  driver_.primaryContext(ordinal_);
  if (bytes > options_.threshold) {
    std::lock_guard<std::mutex> lock(mu_);
    if (ready()) {
      drainingOnError(driver_, pending_, [&] {
        char *to = static_cast<char *>(dst);
        size_t chunk = options_.chunkBytes;
        // Chunk i's DMA is queued before chunk i - 1 is copied out of the other buffer.
        int prev = -1;
        size_t prevOff = 0, prevBytes = 0;
        auto drain = [&] {
          wait(prev);
          std::memcpy(to + prevOff, buffers_[prev], prevBytes);
        };
        for (size_t off = 0, i = 0; off < bytes; off += chunk, ++i) {
          int b = static_cast<int>(i & 1);
          size_t n = std::min(chunk, bytes - off);
          wait(b);
          driver_.check(driver_.memcpyDtoHAsync(buffers_[b], src + off, n, nullptr),
                        "cuMemcpyDtoHAsync");
          driver_.check(driver_.eventRecord(events_[b], nullptr), "cuEventRecord");
          pending_[b] = true;
          if (prev >= 0)
            drain();
          prev = b;
          prevOff = off;
          prevBytes = n;
        }
        drain();
      });
      return;
    }
  }
  driver_.check(driver_.memcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

} // namespace kiln::codegen::cuda

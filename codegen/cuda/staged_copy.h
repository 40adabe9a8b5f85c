#pragma once
/// StagedCopy: host<->device copies of one device, large ones through two pinned staging
/// buffers.
///
/// A synchronous cuMemcpyHtoD/DtoH from pageable host memory makes the driver stage the bytes
/// itself, one piece after another, and the host waits for each piece's DMA before copying the
/// next. Above a threshold kiln stages instead: the copy is cut into chunks that alternate between
/// two page-locked buffers, each queued with cuMemcpyHtoDAsync / cuMemcpyDtoHAsync on the default
/// stream, so the host's memcpy of one chunk overlaps the DMA of the previous one. An event per
/// buffer, recorded after its DMA, is waited on before the buffer is touched again.
///
/// Semantics are those of the synchronous copies: toDevice returns once every byte has reached
/// the device (the source may be reused at once), toHost once `dst` holds every byte. Both are
/// ordered after the work already queued on the default stream, as the synchronous copies are.
///
/// Copies of at most `threshold` bytes, and every copy when the driver lacks the optional
/// functions (Driver::hasStagedCopies) or the pinned buffers cannot be allocated, stay one
/// synchronous call. The buffers are allocated on the first large copy and reused by every later
/// one; a mutex serializes the large copies of one StagedCopy (small ones never take it), so
/// threads copying at once never share a buffer.

#include "codegen/cuda/driver.h"

#include <cstddef>
#include <mutex>

namespace kiln::codegen::cuda {

struct StagedCopyOptions {
  /// Copies of at most this many bytes are one synchronous call: below it, setting up chunks
  /// costs more than the overlap saves.
  size_t threshold = size_t(1) << 20;
  /// Bytes per chunk, the size of each of the two pinned buffers.
  size_t chunkBytes = size_t(2) << 20;
};

class StagedCopy {
public:
  /// Copies of `driver`'s device `ordinal`; allocates nothing until the first large copy.
  StagedCopy(const Driver &driver, int ordinal, StagedCopyOptions options = {});
  /// Waits for the buffers' last copies, then frees them and their events.
  ~StagedCopy();
  StagedCopy(const StagedCopy &) = delete;
  StagedCopy &operator=(const StagedCopy &) = delete;

  /// The process's StagedCopy of `driver`'s device `ordinal` with the default options, made on
  /// first use. It is never destroyed: freeing pinned memory from a static destructor could run
  /// after the driver has gone, and the process's exit returns it anyway (2 × chunkBytes per
  /// device that made a large copy).
  static StagedCopy &forDevice(const Driver &driver, int ordinal);

  /// Copies `bytes` from host `src` to device address `dst`.
  void toDevice(CuDevicePtr dst, const void *src, size_t bytes);
  /// Copies `bytes` from device address `src` to host `dst`.
  void toHost(void *dst, CuDevicePtr src, size_t bytes);

  /// Whether copies above the threshold are staged: the driver has the functions and the
  /// buffers were not refused (false from the first failed pinned allocation on).
  bool staging() const;
  const StagedCopyOptions &options() const { return options_; }

private:
  /// Allocates the buffers and events on first use; false when staging is not possible.
  bool ready();
  /// Waits until the DMA last queued on buffer `b` has finished.
  void wait(int b);
  void release() noexcept;

  const Driver &driver_;
  int ordinal_;
  StagedCopyOptions options_;
  mutable std::mutex mu_; ///< held for the whole of a staged copy
  void *buffers_[2] = {nullptr, nullptr};
  CuEvent events_[2] = {nullptr, nullptr};
  bool pending_[2] = {false, false}; ///< an event recorded whose wait is still owed
  bool refused_ = false;             ///< a pinned allocation failed: synchronous from then on
};

} // namespace kiln::codegen::cuda

#pragma once
/// CudaStream and CudaEvent: RAII owners of a driver stream and event on one device's primary
/// context, for timing GPU work (an event recorded before and after, then elapsedMillis) and for
/// work queued on a stream of its own.
///
/// Kiln queues its work (copies, launches, cuBLAS calls) on each device's default stream: one
/// per device, so everything of one device runs in order without any event. These classes are
/// for what comes on top: timing, and streams other than the default one.
///
/// Streams and events are optional driver functions (driver.h): constructing either on a driver
/// without them throws kiln::Error ("kiln: CUDA events are not available: ..."). Every call
/// makes the device's primary context current first, so any thread may use them.

#include "codegen/cuda/driver.h"

namespace kiln::codegen::cuda {

/// A stream of device `ordinal`, destroyed with its owner (cuStreamDestroy lets queued work
/// finish first).
class CudaStream {
public:
  /// cuStreamCreate with `flags` (0: ordered with the default stream; 1:
  /// CU_STREAM_NON_BLOCKING) on `driver`'s device `ordinal`.
  CudaStream(const Driver &driver, int ordinal, unsigned flags = 0);
  ~CudaStream();
  CudaStream(CudaStream &&other) noexcept;
  CudaStream &operator=(CudaStream &&other) noexcept;
  CudaStream(const CudaStream &) = delete;
  CudaStream &operator=(const CudaStream &) = delete;

  /// Waits for everything queued on the stream.
  void synchronize() const;
  CuStream get() const { return stream_; }
  int ordinal() const { return ordinal_; }

private:
  const Driver *driver_;
  int ordinal_;
  CuStream stream_ = nullptr;
};

/// An event of device `ordinal`.
class CudaEvent {
public:
  /// CU_EVENT_BLOCKING_SYNC: synchronize() sleeps instead of spinning.
  static constexpr unsigned kBlockingSync = 1;
  /// CU_EVENT_DISABLE_TIMING: no timestamp, cheaper to record and wait on; elapsedMillis fails.
  static constexpr unsigned kDisableTiming = 2;

  /// cuEventCreate with `flags` (0: timing enabled, spin on synchronize; or kBlockingSync and
  /// kDisableTiming) on `driver`'s device `ordinal`.
  CudaEvent(const Driver &driver, int ordinal, unsigned flags = 0);
  /// The same on the process-wide driver; throws when CUDA is unavailable.
  explicit CudaEvent(int ordinal, unsigned flags = 0);
  ~CudaEvent();
  CudaEvent(CudaEvent &&other) noexcept;
  CudaEvent &operator=(CudaEvent &&other) noexcept;
  CudaEvent(const CudaEvent &) = delete;
  CudaEvent &operator=(const CudaEvent &) = delete;

  /// Records the event at the current end of `stream` (null: the default stream): it completes
  /// when the work queued before it does.
  void record(CuStream stream = nullptr);
  void record(const CudaStream &stream) { record(stream.get()); }
  /// Waits until the work before the last record() has finished.
  void synchronize() const;
  /// Whether the work before the last record() has finished (true for an event never
  /// recorded), without waiting. A driver without cuEventQuery answers by waiting: slower, and
  /// still true exactly when the work is done.
  bool query() const;
  /// Milliseconds from this event to `end` (both recorded and complete; call
  /// end.synchronize() first), with the driver's ~0.5 microsecond resolution. Throws when
  /// either was never recorded or the events belong to different devices.
  float elapsedMillis(const CudaEvent &end) const;

  CuEvent get() const { return event_; }
  int ordinal() const { return ordinal_; }

private:
  const Driver *driver_;
  int ordinal_;
  CuEvent event_ = nullptr;
};

} // namespace kiln::codegen::cuda

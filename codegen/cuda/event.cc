#include "codegen/cuda/event.h"

#include "runtime/error.h"

#include <utility>

namespace kiln::codegen::cuda {

namespace {

const Driver &processDriver() {
  std::string reason;
  const Driver *driver = Driver::get(&reason);
  KILN_CHECK(driver, "kiln: CUDA is not available: {}", reason);
  return *driver;
}

} // namespace

CudaStream::CudaStream(const Driver &driver, int ordinal, unsigned flags)
    : driver_(&driver), ordinal_(ordinal) {
  KILN_CHECK(driver.hasStreams(),
             "kiln: CUDA streams are not available: the driver library does not export "
             "cuStreamCreate, cuStreamDestroy_v2 and cuStreamSynchronize");
  driver.primaryContext(ordinal);
  driver.check(driver.streamCreate(&stream_, flags), "cuStreamCreate");
}

CudaStream::~CudaStream() {
  if (!stream_)
    return;
  try {
    driver_->primaryContext(ordinal_);
  } catch (const std::exception &) {
    return; // the context is gone, and the stream with it
  }
  driver_->streamDestroy(stream_);
}

CudaStream::CudaStream(CudaStream &&other) noexcept
    : driver_(other.driver_), ordinal_(other.ordinal_),
      stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream &CudaStream::operator=(CudaStream &&other) noexcept {
  if (this != &other) {
    CudaStream old(std::move(*this));
    driver_ = other.driver_;
    ordinal_ = other.ordinal_;
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void CudaStream::synchronize() const {
  KILN_CHECK(stream_, "kiln: CudaStream::synchronize on a moved-from stream");
  driver_->primaryContext(ordinal_);
  driver_->check(driver_->streamSynchronize(stream_), "cuStreamSynchronize");
}

CudaEvent::CudaEvent(const Driver &driver, int ordinal, unsigned flags)
    : driver_(&driver), ordinal_(ordinal) {
  KILN_CHECK(driver.hasEvents(),
             "kiln: CUDA events are not available: the driver library does not export "
             "cuEventCreate, cuEventRecord, cuEventSynchronize, cuEventElapsedTime and "
             "cuEventDestroy_v2");
  driver.primaryContext(ordinal);
  driver.check(driver.eventCreate(&event_, flags), "cuEventCreate");
}

CudaEvent::CudaEvent(int ordinal, unsigned flags) : CudaEvent(processDriver(), ordinal, flags) {}

CudaEvent::~CudaEvent() {
  if (!event_)
    return;
  try {
    driver_->primaryContext(ordinal_);
  } catch (const std::exception &) {
    return;
  }
  driver_->eventDestroy(event_);
}

CudaEvent::CudaEvent(CudaEvent &&other) noexcept
    : driver_(other.driver_), ordinal_(other.ordinal_),
      event_(std::exchange(other.event_, nullptr)) {}

CudaEvent &CudaEvent::operator=(CudaEvent &&other) noexcept {
  if (this != &other) {
    CudaEvent old(std::move(*this));
    driver_ = other.driver_;
    ordinal_ = other.ordinal_;
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void CudaEvent::record(CuStream stream) {
  KILN_CHECK(event_, "kiln: CudaEvent::record on a moved-from event");
  driver_->primaryContext(ordinal_);
  driver_->check(driver_->eventRecord(event_, stream), "cuEventRecord");
}

void CudaEvent::synchronize() const {
  KILN_CHECK(event_, "kiln: CudaEvent::synchronize on a moved-from event");
  driver_->primaryContext(ordinal_);
  driver_->check(driver_->eventSynchronize(event_), "cuEventSynchronize");
}

bool CudaEvent::query() const {
  KILN_CHECK(event_, "kiln: CudaEvent::query on a moved-from event");
  driver_->primaryContext(ordinal_);
  if (!driver_->eventQuery) {
    driver_->check(driver_->eventSynchronize(event_), "cuEventSynchronize");
    return true;
  }
  constexpr CuResult kNotReady = 600; // CUDA_ERROR_NOT_READY
  CuResult r = driver_->eventQuery(event_);
  if (r == kNotReady)
    return false;
  driver_->check(r, "cuEventQuery");
  return true;
}

float CudaEvent::elapsedMillis(const CudaEvent &end) const {
  KILN_CHECK(event_ && end.event_, "kiln: CudaEvent::elapsedMillis on a moved-from event");
  KILN_CHECK(driver_ == end.driver_ && ordinal_ == end.ordinal_,
             "kiln: CudaEvent::elapsedMillis between events of CUDA devices {} and {}", ordinal_,
             end.ordinal_);
  driver_->primaryContext(ordinal_);
  float ms = 0;
  driver_->check(driver_->eventElapsedTime(&ms, event_, end.event_), "cuEventElapsedTime");
  return ms;
}

} // namespace kiln::codegen::cuda

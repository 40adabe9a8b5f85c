#pragma once
/// The CUDA driver API (libcuda), loaded lazily with dlopen: kiln runs on machines without the
/// NVIDIA driver, and asks for it only when something wants a GPU.
///
/// Driver::get() loads `$KILN_LIBCUDA` (a file) when set, else `libcuda.so.1` through the
/// loader's search, calls cuInit and counts the devices, once per process. It returns null with
/// a reason when any step fails: no driver library, a library without the API (the toolkit's
/// link stub answers CUDA_ERROR_STUB_LIBRARY), cuInit failing (CUDA_ERROR_NO_DEVICE on a machine
/// without a GPU), or zero devices. Only the functions kiln calls are resolved: device queries,
/// the primary context and synchronization, and — for the launch layer — modules, launches and
/// device memory. Streams, events, pinned host memory and asynchronous copies are optional: a
/// library without them still loads, and hasStreams()/hasEvents()/hasStagedCopies() say whether
/// they can be used.

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace kiln::codegen::cuda {

class SharedLibrary;

using CuResult = int;               ///< CUresult: 0 is CUDA_SUCCESS
using CuDevice = int;               ///< CUdevice
using CuContext = struct CuCtxSt *; ///< CUcontext
using CuModule = struct CuModSt *;  ///< CUmodule
using CuFunction = struct CuFuncSt *;
using CuStream = struct CuStreamSt *;
using CuEvent = struct CuEventSt *;     ///< CUevent
using CuDevicePtr = unsigned long long; ///< CUdeviceptr (the _v2 API)

/// What kiln needs to know about one device.
struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0; ///< compute capability
  int multiprocessors = 0;
  int maxThreadsPerBlock = 0;
  int sharedMemoryPerBlock = 0; ///< bytes, without opt-in
  int64_t totalMemory = 0;      ///< bytes

  /// `sm_90` for compute capability 9.0: the architecture NVRTC compiles for.
  int smVersion() const { return major * 10 + minor; }
};

class Driver {
public:
  /// The process-wide driver, loaded and initialized once; null (and `reason` set) when CUDA
  /// cannot be used here.
  static const Driver *get(std::string *reason = nullptr);
  /// Whether get() succeeds.
  static bool isAvailable() { return get() != nullptr; }
  /// Why get() fails; empty when CUDA is available.
  static std::string unavailableReason();
  /// Loads and initializes the driver library `path` (not cached, for tests and explicit
  /// paths); null and `reason` set on failure.
  static std::unique_ptr<Driver> load(const std::string &path, std::string *reason);

  ~Driver();
  Driver(const Driver &) = delete;
  Driver &operator=(const Driver &) = delete;

  /// The driver's CUDA version, e.g. 13000 for 13.0.
  int version() const { return version_; }
  int deviceCount() const { return deviceCount_; }
  /// Properties of device `index`; throws kiln::Error for an index out of range.
  DeviceInfo device(int index) const;
  /// Waits for all work on device `index` (its primary context) to finish.
  void synchronize(int index) const;
  /// The primary context of device `index`, retained once per process and made current on
  /// this thread.
  CuContext primaryContext(int index) const;
  /// Throws kiln::Error naming `what` and the driver's error name and text unless `r` is 0.
  void check(CuResult r, const char *what) const;
  /// Whether the stream functions (create, destroy, synchronize) were all resolved.
  bool hasStreams() const { return streamCreate && streamDestroy && streamSynchronize; }
  /// Whether the event functions (create, record, synchronize, elapsed time, destroy) were all
  /// resolved.
  bool hasEvents() const {
    return eventCreate && eventRecord && eventSynchronize && eventElapsedTime && eventDestroy;
  }
  /// Whether copies can go through pinned staging buffers (staged_copy.h): pinned host memory
  /// (cuMemHostAlloc or cuMemAllocHost, and cuMemFreeHost), both asynchronous copies, and the
  /// events that order reuse of a buffer (create, record, synchronize, destroy).
  bool hasStagedCopies() const {
    return (memHostAlloc || memAllocHost) && memFreeHost && memcpyHtoDAsync && memcpyDtoHAsync &&
           eventCreate && eventRecord && eventSynchronize && eventDestroy;
  }

  // The resolved C functions (signatures of cuda.h, _v2 entry points where cuda.h maps to them).
  CuResult (*init)(unsigned flags) = nullptr;
  CuResult (*driverGetVersion)(int *version) = nullptr;
  CuResult (*deviceGetCount)(int *count) = nullptr;
  CuResult (*deviceGet)(CuDevice *device, int ordinal) = nullptr;
  CuResult (*deviceGetName)(char *name, int len, CuDevice device) = nullptr;
  CuResult (*deviceGetAttribute)(int *value, int attribute, CuDevice device) = nullptr;
  CuResult (*deviceTotalMem)(size_t *bytes, CuDevice device) = nullptr;
  CuResult (*getErrorName)(CuResult r, const char **name) = nullptr;
  CuResult (*getErrorString)(CuResult r, const char **text) = nullptr;
  CuResult (*primaryCtxRetain)(CuContext *ctx, CuDevice device) = nullptr;
  CuResult (*ctxSetCurrent)(CuContext ctx) = nullptr;
  CuResult (*ctxSynchronize)() = nullptr;
  CuResult (*moduleLoadData)(CuModule *module, const void *image) = nullptr;
  CuResult (*moduleUnload)(CuModule module) = nullptr;
  CuResult (*moduleGetFunction)(CuFunction *fn, CuModule module, const char *name) = nullptr;
  CuResult (*launchKernel)(CuFunction fn, unsigned gridX, unsigned gridY, unsigned gridZ,
                           unsigned blockX, unsigned blockY, unsigned blockZ, unsigned sharedBytes,
                           CuStream stream, void **params, void **extra) = nullptr;
  CuResult (*memAlloc)(CuDevicePtr *ptr, size_t bytes) = nullptr;
  CuResult (*memFree)(CuDevicePtr ptr) = nullptr;
  CuResult (*memcpyHtoD)(CuDevicePtr dst, const void *src, size_t bytes) = nullptr;
  CuResult (*memcpyDtoH)(void *dst, CuDevicePtr src, size_t bytes) = nullptr;
  // Optional (null when the library lacks them): streams and events, for timing and, later, work
  // on streams other than the default one.
  CuResult (*streamCreate)(CuStream *stream, unsigned flags) = nullptr;
  CuResult (*streamDestroy)(CuStream stream) = nullptr;
  CuResult (*streamSynchronize)(CuStream stream) = nullptr;
  CuResult (*eventCreate)(CuEvent *event, unsigned flags) = nullptr;
  CuResult (*eventRecord)(CuEvent event, CuStream stream) = nullptr;
  CuResult (*eventSynchronize)(CuEvent event) = nullptr;
  CuResult (*eventElapsedTime)(float *milliseconds, CuEvent start, CuEvent end) = nullptr;
  CuResult (*eventDestroy)(CuEvent event) = nullptr;
  /// cuEventQuery: 0 when the work before the last record has finished, CUDA_ERROR_NOT_READY
  /// (600) while it runs.
  CuResult (*eventQuery)(CuEvent event) = nullptr;
  // Optional: page-locked host memory and copies queued on a stream, for pinned staging of large
  // host<->device copies (staged_copy.h).
  CuResult (*memHostAlloc)(void **ptr, size_t bytes, unsigned flags) = nullptr;
  CuResult (*memAllocHost)(void **ptr, size_t bytes) = nullptr;
  CuResult (*memFreeHost)(void *ptr) = nullptr;
  CuResult (*memcpyHtoDAsync)(CuDevicePtr dst, const void *src, size_t bytes,
                              CuStream stream) = nullptr;
  CuResult (*memcpyDtoHAsync)(void *dst, CuDevicePtr src, size_t bytes, CuStream stream) = nullptr;

private:
  Driver() = default;
  std::string describe(CuResult r) const;

  std::unique_ptr<SharedLibrary> lib_;
  int version_ = 0;
  int deviceCount_ = 0;
  mutable std::mutex mu_;
  mutable std::vector<CuContext> contexts_; ///< per device; null until retained
};

} // namespace kiln::codegen::cuda

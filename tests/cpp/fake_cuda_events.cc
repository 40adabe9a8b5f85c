// A stand-in for libcuda (tests/cpp/cuda_cublas_test.cc loads it with Driver::load): the entry
// points Driver requires, one device, and — unless built with KILN_FAKE_NO_EVENTS — streams and
// events that log every call in order, so the test checks what CudaStream and CudaEvent call and
// when. An event records a fake clock that advances 1.5 ms per record.

#include <cstring>
#include <string>

namespace {
std::string calls;
int ctx;
void note(const std::string &s) { calls += calls.empty() ? s : " " + s; }
#ifndef KILN_FAKE_NO_EVENTS
double clock;
struct Event {
  int id;
  double at = -1; ///< the clock when recorded; -1 before any record
};
struct Stream {
  int id;
};
int events, streams;

std::string nameOf(void *stream) {
  return stream ? "s" + std::to_string(static_cast<Stream *>(stream)->id) : "s0";
}
#endif
} // namespace

extern "C" {
int cuInit(unsigned) { return 0; }
int cuDriverGetVersion(int *v) {
  *v = 13000;
  return 0;
}
int cuDeviceGetCount(int *n) {
  *n = 1;
  return 0;
}
int cuDeviceGet(int *d, int i) {
  *d = i;
  return i == 0 ? 0 : 101;
}
int cuDeviceGetName(char *name, int len, int) {
  std::strncpy(name, "Fake GPU", len);
  return 0;
}
int cuDeviceGetAttribute(int *v, int, int) {
  *v = 1;
  return 0;
}
int cuDeviceTotalMem_v2(size_t *b, int) {
  *b = size_t(1) << 30;
  return 0;
}
int cuGetErrorName(int r, const char **s) {
  *s = r == 400 ? "CUDA_ERROR_INVALID_HANDLE" : "CUDA_ERROR_FAKE";
  return 0;
}
int cuGetErrorString(int, const char **s) {
  *s = "fake";
  return 0;
}
int cuDevicePrimaryCtxRetain(void **c, int) {
  *c = &ctx;
  return 0;
}
int cuCtxSetCurrent(void *c) {
  note("ctx");
  return c == &ctx ? 0 : 201;
}
int cuCtxSynchronize() { return 0; }
int cuModuleLoadData(void **, const void *) { return 1; }
int cuModuleUnload(void *) { return 1; }
int cuModuleGetFunction(void **, void *, const char *) { return 1; }
int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   void *, void **, void **) {
  return 1;
}
int cuMemAlloc_v2(unsigned long long *, size_t) { return 2; }
int cuMemFree_v2(unsigned long long) { return 1; }
int cuMemcpyHtoD_v2(unsigned long long, const void *, size_t) { return 1; }
int cuMemcpyDtoH_v2(void *, unsigned long long, size_t) { return 1; }

#ifndef KILN_FAKE_NO_EVENTS
int cuStreamCreate(void **s, unsigned flags) {
  *s = new Stream{++streams};
  note("streamCreate(" + nameOf(*s) + "," + std::to_string(flags) + ")");
  return 0;
}
int cuStreamDestroy_v2(void *s) {
  note("streamDestroy(" + nameOf(s) + ")");
  delete static_cast<Stream *>(s);
  return 0;
}
int cuStreamSynchronize(void *s) {
  note("streamSynchronize(" + nameOf(s) + ")");
  return 0;
}
int cuEventCreate(void **e, unsigned flags) {
  *e = new Event{++events};
  note("eventCreate(e" + std::to_string(events) + "," + std::to_string(flags) + ")");
  return 0;
}
int cuEventRecord(void *e, void *s) {
  Event *ev = static_cast<Event *>(e);
  clock += 1.5;
  ev->at = clock;
  note("eventRecord(e" + std::to_string(ev->id) + "," + nameOf(s) + ")");
  return 0;
}
int cuEventSynchronize(void *e) {
  note("eventSynchronize(e" + std::to_string(static_cast<Event *>(e)->id) + ")");
  return 0;
}
int cuEventElapsedTime_v2(float *ms, void *start, void *end) {
  Event *a = static_cast<Event *>(start), *b = static_cast<Event *>(end);
  note("eventElapsedTime(e" + std::to_string(a->id) + ",e" + std::to_string(b->id) + ")");
  if (a->at < 0 || b->at < 0)
    return 400;
  *ms = static_cast<float>(b->at - a->at);
  return 0;
}
int cuEventDestroy_v2(void *e) {
  note("eventDestroy(e" + std::to_string(static_cast<Event *>(e)->id) + ")");
  delete static_cast<Event *>(e);
  return 0;
}
#endif

/// The calls so far, space-separated; cleared by each read.
const char *fake_log() {
  static std::string out;
  out = calls;
  calls.clear();
  return out.c_str();
}
}

// A stand-in for libcuda whose device memory is host memory (tests/cpp/cuda_staged_copy_test.cc
// loads it with Driver::load): one device, every copy and event call logged in order, and an
// asynchronous default stream that is honestly asynchronous. Queued copies and event records run
// only when something waits for them (an event synchronize reaching them, a context synchronize,
// a synchronous copy; a query that finds them pending runs them, so the next query finds them
// done), so a StagedCopy that reuses a pinned buffer
// before its DMA ran, or returns before the last one, copies the wrong bytes.
//
// Asynchronous copies are refused unless their host side lies in pinned memory from this library.
// Built with KILN_FAKE_NO_ASYNC it exports no pinned memory and no asynchronous copies (events
// stay); with KILN_FAKE_ALLOC_HOST_ONLY it has cuMemAllocHost_v2 but not cuMemHostAlloc.

#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>

namespace {

constexpr int kInvalidValue = 1, kOutOfMemory = 2, kInvalidHandle = 400, kNotReady = 600;

std::recursive_mutex mu;
std::string calls;
int ctx;
double clock;
size_t pinnedLimit = ~size_t(0); ///< pinned bytes this library agrees to hold at once
size_t pinnedHeld;
int asyncFailsIn = -1; ///< the asynchronous copy that fails, counted down; -1: none

/// Whether this asynchronous copy is the one set to fail.
bool failAsync() { return asyncFailsIn >= 0 && asyncFailsIn-- == 0; }

void note(const std::string &s) { calls += calls.empty() ? s : " " + s; }

struct Event {
  int id;
  unsigned flags;
  unsigned long long mark = 0; ///< the queue position of the last record; 0 before any
  bool done = true;
  double at = -1;
};

struct Op {
  unsigned long long seq;
  void *dst = nullptr;
  const void *src = nullptr;
  size_t bytes = 0;
  Event *event = nullptr; ///< a record, when set
};

std::deque<Op> queue;
unsigned long long nextSeq = 1;
int events;

struct Pinned {
  int id;
  size_t bytes;
};
std::map<const char *, Pinned> pinned;
int pinnedCount;

/// Runs the queued work up to and including `seq` (everything with 0).
void runUntil(unsigned long long seq) {
  while (!queue.empty() && (seq == 0 || queue.front().seq <= seq)) {
    Op op = queue.front();
    queue.pop_front();
    if (op.event) {
      if (op.event->mark == op.seq) {
        op.event->done = true;
        clock += 1.5;
        op.event->at = clock;
      }
    } else if (op.bytes) {
      std::memcpy(op.dst, op.src, op.bytes);
    }
  }
}

/// The pinned allocation holding [p, p + bytes), or null.
[[maybe_unused]] const Pinned *pinnedAt(const void *p, size_t bytes) {
  const char *c = static_cast<const char *>(p);
  auto it = pinned.upper_bound(c);
  if (it == pinned.begin())
    return nullptr;
  --it;
  return c + bytes <= it->first + it->second.bytes ? &it->second : nullptr;
}

std::string eventName(void *e) { return "e" + std::to_string(static_cast<Event *>(e)->id); }

[[maybe_unused]] int allocPinned(void **p, size_t bytes, const char *what) {
  note(std::string(what) + "(" + std::to_string(bytes) + ")");
  if (pinnedHeld + bytes > pinnedLimit)
    return kOutOfMemory;
  *p = std::malloc(bytes ? bytes : 1);
  pinned[static_cast<const char *>(*p)] = {pinnedCount++, bytes};
  pinnedHeld += bytes;
  return 0;
}

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
int cuDeviceGetAttribute(int *v, int attribute, int) {
  *v = attribute == 75 ? 9 : 1; // compute capability 9.x
  return 0;
}
int cuDeviceTotalMem_v2(size_t *b, int) {
  *b = size_t(1) << 30;
  return 0;
}
int cuGetErrorName(int r, const char **s) {
  *s = r == kInvalidHandle ? "CUDA_ERROR_INVALID_HANDLE"
       : r == kNotReady    ? "CUDA_ERROR_NOT_READY"
       : r == kOutOfMemory ? "CUDA_ERROR_OUT_OF_MEMORY"
                           : "CUDA_ERROR_FAKE";
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
int cuCtxSetCurrent(void *c) { return c == &ctx ? 0 : 201; }
int cuCtxSynchronize() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  note("ctxSynchronize");
  runUntil(0);
  return 0;
}
int cuModuleLoadData(void **, const void *) { return 1; }
int cuModuleUnload(void *) { return 1; }
int cuModuleGetFunction(void **, void *, const char *) { return 1; }
int cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                   void *, void **, void **) {
  return 1;
}
int cuMemAlloc_v2(unsigned long long *p, size_t bytes) {
  *p = reinterpret_cast<unsigned long long>(std::malloc(bytes ? bytes : 1));
  return 0;
}
int cuMemFree_v2(unsigned long long p) {
  std::free(reinterpret_cast<void *>(p));
  return 0;
}
int cuMemcpyHtoD_v2(unsigned long long dst, const void *src, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  note("HtoD(" + std::to_string(bytes) + ")");
  runUntil(0);
  std::memcpy(reinterpret_cast<void *>(dst), src, bytes);
  return 0;
}
int cuMemcpyDtoH_v2(void *dst, unsigned long long src, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  note("DtoH(" + std::to_string(bytes) + ")");
  runUntil(0);
  std::memcpy(dst, reinterpret_cast<const void *>(src), bytes);
  return 0;
}

#ifndef KILN_FAKE_NO_ASYNC
#ifndef KILN_FAKE_ALLOC_HOST_ONLY
int cuMemHostAlloc(void **p, size_t bytes, unsigned) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  return allocPinned(p, bytes, "hostAlloc");
}
#endif
int cuMemAllocHost_v2(void **p, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  return allocPinned(p, bytes, "allocHost");
}
int cuMemFreeHost(void *p) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  auto it = pinned.find(static_cast<const char *>(p));
  if (it == pinned.end())
    return kInvalidValue;
  note("freeHost(p" + std::to_string(it->second.id) + ")");
  pinnedHeld -= it->second.bytes;
  pinned.erase(it);
  std::free(p);
  return 0;
}
int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t bytes, void *stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  const Pinned *p = pinnedAt(src, bytes);
  note("HtoDAsync(" + std::to_string(bytes) + (p ? ",p" + std::to_string(p->id) : ",unpinned") +
       ")");
  if (!p || stream || failAsync())
    return kInvalidValue;
  queue.push_back({nextSeq++, reinterpret_cast<void *>(dst), src, bytes});
  return 0;
}
int cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t bytes, void *stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  const Pinned *p = pinnedAt(dst, bytes);
  note("DtoHAsync(" + std::to_string(bytes) + (p ? ",p" + std::to_string(p->id) : ",unpinned") +
       ")");
  if (!p || stream || failAsync())
    return kInvalidValue;
  queue.push_back({nextSeq++, dst, reinterpret_cast<const void *>(src), bytes});
  return 0;
}
#endif

int cuStreamCreate(void **, unsigned) { return 1; }
int cuStreamDestroy_v2(void *) { return 1; }
int cuStreamSynchronize(void *) { return 1; }

int cuEventCreate(void **e, unsigned flags) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  *e = new Event{++events, flags};
  note("eventCreate(" + eventName(*e) + "," + std::to_string(flags) + ")");
  return 0;
}
int cuEventRecord(void *e, void *stream) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Event *ev = static_cast<Event *>(e);
  note("record(" + eventName(e) + ")");
  if (stream)
    return kInvalidValue;
  ev->mark = nextSeq++;
  ev->done = false;
  queue.push_back({ev->mark, nullptr, nullptr, 0, ev});
  return 0;
}
int cuEventSynchronize(void *e) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  note("sync(" + eventName(e) + ")");
  runUntil(static_cast<Event *>(e)->mark);
  return 0;
}
int cuEventQuery(void *e) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  note("query(" + eventName(e) + ")");
  Event *ev = static_cast<Event *>(e);
  if (ev->done)
    return 0;
  runUntil(ev->mark); // the device gets there while the host looks away
  return kNotReady;
}
int cuEventElapsedTime_v2(float *ms, void *start, void *end) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  Event *a = static_cast<Event *>(start), *b = static_cast<Event *>(end);
  note("elapsed(" + eventName(a) + "," + eventName(b) + ")");
  if ((a->flags | b->flags) & 2 || a->mark == 0 || b->mark == 0)
    return kInvalidHandle;
  if (!a->done || !b->done)
    return kNotReady;
  *ms = static_cast<float>(b->at - a->at);
  return 0;
}
int cuEventDestroy_v2(void *e) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  note("eventDestroy(" + eventName(e) + ")");
  Event *ev = static_cast<Event *>(e);
  for (Op &op : queue)
    if (op.event == ev)
      op.event = nullptr;
  delete ev;
  return 0;
}

/// The calls so far, space-separated; cleared by each read.
const char *fake_log() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  static std::string out;
  out = calls;
  calls.clear();
  return out.c_str();
}

/// Refuses pinned allocations that would hold more than `bytes` at once.
void fake_set_pinned_limit(size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  pinnedLimit = bytes;
}

/// Clears the log and numbers later events and pinned allocations from 1 and 0 again, so a test
/// can expect exact names whatever ran before it.
void fake_reset() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  calls.clear();
  events = 0;
  pinnedCount = 0;
  pinnedLimit = ~size_t(0);
  asyncFailsIn = -1;
}

/// Makes the asynchronous copy after the next `n` fail (CUDA_ERROR_INVALID_VALUE).
void fake_fail_async_in(int n) {
  std::lock_guard<std::recursive_mutex> lock(mu);
  asyncFailsIn = n;
}

/// Pinned allocations alive now.
int fake_pinned_live() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  return static_cast<int>(pinned.size());
}

/// Queued work not run yet.
int fake_queued() {
  std::lock_guard<std::recursive_mutex> lock(mu);
  return static_cast<int>(queue.size());
}
}

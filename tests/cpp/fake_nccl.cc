// A stand-in for libnccl.so.2 (tests/python/distributed/test_nccl.py points KILN_NCCL_LIB at
// it, with KILN_LIBCUDA at the fake libcuda of fake_cuda_staging.cc, whose device memory is host
// memory): one-rank communicators whose collectives copy their input to their output, which is
// what NCCL computes for a world of one, and a log of every call (fake_nccl_calls) so the test
// checks the types, operations, counts and stream kiln passed. KILN_FAKE_NCCL_ASYNC_ERROR=1 makes
// ncclCommGetAsyncError report a remote error, as NCCL does when a peer dies.

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace {

struct UniqueId {
  char internal[128];
};
struct Comm {
  int nranks, rank;
};

constexpr int kSuccess = 0, kInvalidArgument = 4, kInvalidUsage = 5, kRemoteError = 6;
constexpr const char *kId = "kiln fake nccl";

std::mutex mu;
std::string calls;

void note(const std::string &s) {
  std::lock_guard<std::mutex> lock(mu);
  calls += calls.empty() ? s : " " + s;
}

size_t itemsize(int type) {
  switch (type) {
  case 0: // int8
  case 1: // uint8
    return 1;
  case 6: // float16
  case 9: // bfloat16
    return 2;
  case 2: // int32
  case 3: // uint32
  case 7: // float32
    return 4;
  default: // int64, uint64, float64
    return 8;
  }
}

/// The log entry of a collective; a stream other than the default one is an error kiln must not
/// make.
int collective(const char *name, const void *send, void *recv, size_t count, int type, int op,
               Comm *comm, void *stream) {
  note(std::string(name) + "(" + std::to_string(count) + "," + std::to_string(type) +
       (op >= 0 ? "," + std::to_string(op) : std::string()) + (stream ? ",stream" : "") + ")");
  if (!comm || stream || type < 0 || type > 9 || op > 4)
    return kInvalidArgument;
  if (send != recv)
    std::memmove(recv, send, count * itemsize(type));
  return kSuccess;
}

} // namespace

extern "C" {
int ncclGetVersion(int *version) {
  const char *v = std::getenv("KILN_FAKE_NCCL_VERSION");
  *version = v ? std::atoi(v) : 22803;
  return kSuccess;
}
int ncclGetUniqueId(UniqueId *id) {
  std::memset(id, 0, sizeof *id);
  std::strcpy(id->internal, kId);
  note("get_unique_id");
  return kSuccess;
}
int ncclCommInitRank(Comm **comm, int nranks, UniqueId id, int rank) {
  note("init(" + std::to_string(nranks) + "," + std::to_string(rank) + ")");
  if (std::strcmp(id.internal, kId) != 0)
    return kInvalidArgument; // the id did not arrive intact
  if (nranks != 1)
    return kInvalidUsage;
  *comm = new Comm{nranks, rank};
  return kSuccess;
}
int ncclCommDestroy(Comm *comm) {
  note("destroy");
  delete comm;
  return kSuccess;
}
int ncclCommAbort(Comm *comm) {
  note("abort");
  delete comm;
  return kSuccess;
}
int ncclCommGetAsyncError(Comm *, int *error) {
  const char *e = std::getenv("KILN_FAKE_NCCL_ASYNC_ERROR");
  *error = e && *e == '1' ? kRemoteError : kSuccess;
  return kSuccess;
}
const char *ncclGetErrorString(int result) {
  switch (result) {
  case kSuccess:
    return "no error";
  case kInvalidArgument:
    return "invalid argument";
  case kInvalidUsage:
    return "invalid usage";
  case kRemoteError:
    return "remote process exited or there was a network error";
  }
  return "unknown result code";
}
int ncclAllReduce(const void *send, void *recv, size_t count, int type, int op, Comm *comm,
                  void *stream) {
  return collective("all_reduce", send, recv, count, type, op, comm, stream);
}
int ncclBroadcast(const void *send, void *recv, size_t count, int type, int root, Comm *comm,
                  void *stream) {
  return root == 0 ? collective("broadcast", send, recv, count, type, -1, comm, stream)
                   : kInvalidArgument;
}
int ncclAllGather(const void *send, void *recv, size_t count, int type, Comm *comm, void *stream) {
  return collective("all_gather", send, recv, count, type, -1, comm, stream);
}
int ncclReduceScatter(const void *send, void *recv, size_t count, int type, int op, Comm *comm,
                      void *stream) {
  return collective("reduce_scatter", send, recv, count, type, op, comm, stream);
}
int ncclReduce(const void *send, void *recv, size_t count, int type, int op, int root, Comm *comm,
               void *stream) {
  return root == 0 ? collective("reduce", send, recv, count, type, op, comm, stream)
                   : kInvalidArgument;
}
// A world of one has no peer to send to or receive from.
int ncclSend(const void *, size_t, int, int, Comm *, void *) { return kInvalidUsage; }
int ncclRecv(void *, size_t, int, int, Comm *, void *) { return kInvalidUsage; }
int ncclGroupStart() { return kSuccess; }
int ncclGroupEnd() { return kSuccess; }

/// The calls so far, space-separated, for the test.
const char *fake_nccl_calls() {
  std::lock_guard<std::mutex> lock(mu);
  return calls.c_str();
}
}

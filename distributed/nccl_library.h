#pragma once
/// NCCL's C API, opened with dlopen from libnccl.so.2: the entry points kiln's NCCL group uses
/// (nccl_group.h), with the types and enum values of nccl.h declared here, so kiln builds without
/// NCCL's headers and runs on machines without NCCL.
///
/// [Note: finding libnccl]
/// library() tries, in order, and keeps the first library that loads and exports every entry
/// point below:
///   1. `$KILN_NCCL_LIB` alone, when set (a file, or a name for the loader's search);
///   2. the CUDA toolkit's folders, then the `nvidia-nccl-cu13` / `nvidia-nccl-cu12` wheels
///      (`nvidia/nccl/lib`) under every folder given to addSearchRoot (the frontend adds
///      `sys.path`) and `$VIRTUAL_ENV`'s site-packages (codegen/cuda/shared_library.h's
///      LibrarySearch, the one cuBLAS and NVRTC are found with);
///   3. the system's `libnccl.so.2`, through the loader's search.
/// When nothing loads, the error lists every attempt and names what to install.

#include <string>
#include <vector>

namespace kiln::distributed::nccl {

using Result = int; ///< ncclResult_t
inline constexpr Result kSuccess = 0;
inline constexpr Result kInProgress = 7; ///< ncclInProgress: a non-blocking call still running

/// ncclComm_t: a pointer to NCCL's opaque communicator.
using Comm = struct CommSt *;
/// cudaStream_t; null is the default stream, the one kiln queues its CUDA work on.
using Stream = struct StreamSt *;

/// ncclUniqueId: passed by value to ncclCommInitRank, so its size is part of the ABI.
struct UniqueId {
  char internal[128];
};
static_assert(sizeof(UniqueId) == 128);

/// ncclDataType_t.
enum DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};

/// ncclRedOp_t.
enum RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

struct Library {
  Result (*getVersion)(int *);
  Result (*getUniqueId)(UniqueId *);
  Result (*commInitRank)(Comm *, int, UniqueId, int);
  Result (*commDestroy)(Comm);
  Result (*commAbort)(Comm);
  Result (*commGetAsyncError)(Comm, Result *);
  const char *(*getErrorString)(Result);
  Result (*allReduce)(const void *, void *, size_t, DataType, RedOp, Comm, Stream);
  Result (*broadcast)(const void *, void *, size_t, DataType, int, Comm, Stream);
  Result (*allGather)(const void *, void *, size_t, DataType, Comm, Stream);
  Result (*reduceScatter)(const void *, void *, size_t, DataType, RedOp, Comm, Stream);
  Result (*reduce)(const void *, void *, size_t, DataType, RedOp, int, Comm, Stream);
  Result (*send)(const void *, size_t, DataType, int, Comm, Stream);
  Result (*recv)(void *, size_t, DataType, int, Comm, Stream);
  Result (*groupStart)();
  Result (*groupEnd)();

  int version = 0;  ///< ncclGetVersion's code: 22803 for 2.28.3
  std::string path; ///< the file the loader opened

  /// NCCL's text for `code`, with the code.
  std::string message(Result code) const;
  /// "2.28.3" for version 22803.
  std::string versionString() const;
};

/// Lets the search see a Python environment's site-packages (the nvidia-nccl wheels).
void addSearchRoot(const std::string &dir);
/// The candidates library() tries, in order ([Note: finding libnccl]).
std::vector<std::string> searchCandidates();

/// The library, loaded on first use; null with `reason` set (every attempt and what to install)
/// when none loads.
const Library *tryLibrary(std::string *reason = nullptr);
/// The library; throws kiln's RuntimeError with tryLibrary's reason when none loads.
const Library &library();

} // namespace kiln::distributed::nccl

#include "distributed/nccl_library.h"

#include "codegen/cuda/shared_library.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <mutex>

namespace kiln::distributed::nccl {
namespace {

using codegen::cuda::LibrarySearch;
using codegen::cuda::SharedLibrary;

constexpr const char *kEnvVar = "KILN_NCCL_LIB";

LibrarySearch &search() {
  // Both wheels put the library in nvidia/nccl/lib; nvidia/cu13/lib is where the other CUDA 13
  // wheels keep theirs, should NCCL's move there too.
  static LibrarySearch s(kEnvVar, {"libnccl.so.2"}, "libnccl.so.",
                         {"nvidia/nccl/lib", "nvidia/cu13/lib"});
  return s;
}

/// Opens `path` and resolves every entry point; null and `error` set when either fails.
std::unique_ptr<Library> tryLoad(const std::string &path, std::string *error) {
  std::unique_ptr<SharedLibrary> lib = SharedLibrary::open(path, error);
  if (!lib)
    return nullptr;
  auto l = std::make_unique<Library>();
  std::vector<std::string> missing;
  using codegen::cuda::resolve;
  resolve(*lib, l->getVersion, "ncclGetVersion", missing);
  resolve(*lib, l->getUniqueId, "ncclGetUniqueId", missing);
  resolve(*lib, l->commInitRank, "ncclCommInitRank", missing);
  resolve(*lib, l->commDestroy, "ncclCommDestroy", missing);
  resolve(*lib, l->commAbort, "ncclCommAbort", missing);
  resolve(*lib, l->commGetAsyncError, "ncclCommGetAsyncError", missing);
  resolve(*lib, l->getErrorString, "ncclGetErrorString", missing);
  resolve(*lib, l->allReduce, "ncclAllReduce", missing);
  resolve(*lib, l->broadcast, "ncclBroadcast", missing);
  resolve(*lib, l->allGather, "ncclAllGather", missing);
  resolve(*lib, l->reduceScatter, "ncclReduceScatter", missing);
  resolve(*lib, l->reduce, "ncclReduce", missing);
  resolve(*lib, l->send, "ncclSend", missing);
  resolve(*lib, l->recv, "ncclRecv", missing);
  resolve(*lib, l->groupStart, "ncclGroupStart", missing);
  resolve(*lib, l->groupEnd, "ncclGroupEnd", missing);
  if (!missing.empty()) {
    *error = fmt::format("{} does not export {} (not NCCL 2.7 or later?)", lib->path(),
                         fmt::join(missing, ", "));
    return nullptr;
  }
  if (Result r = l->getVersion(&l->version); r != kSuccess) {
    *error = fmt::format("{}: ncclGetVersion failed: {}", lib->path(), l->message(r));
    return nullptr;
  }
  l->path = lib->path();
  (void)lib.release(); // never unloaded: communicators live as long as the process
  return l;
}

std::mutex gMu;
const Library *gLibrary = nullptr;

} // namespace

std::string Library::message(Result code) const {
  const char *text = getErrorString ? getErrorString(code) : nullptr;
  return text && *text ? fmt::format("{} (ncclResult_t {})", text, code)
                       : fmt::format("ncclResult_t {}", code);
}

std::string Library::versionString() const {
  // Codes below 2.9 were major*1000 + minor*100 + patch.
  if (version < 20900)
    return fmt::format("{}.{}.{}", version / 1000, version % 1000 / 100, version % 100);
  return fmt::format("{}.{}.{}", version / 10000, version % 10000 / 100, version % 100);
}

void addSearchRoot(const std::string &dir) { search().addRoot(dir); }

std::vector<std::string> searchCandidates() {
  // An explicit path is the library wanted: falling back to another would hide a typo.
  if (const char *env = std::getenv(kEnvVar); env && *env)
    return {env};
  return search().candidates();
}

const Library *tryLibrary(std::string *reason) {
  std::lock_guard<std::mutex> lock(gMu);
  if (gLibrary)
    return gLibrary;
  // A failure is not kept: a later call (after pip install, or with KILN_NCCL_LIB set) retries.
  std::string attempts;
  for (const std::string &candidate : searchCandidates()) {
    std::string error;
    if (std::unique_ptr<Library> l = tryLoad(candidate, &error)) {
      gLibrary = l.release();
      return gLibrary;
    }
    attempts += fmt::format("\n  {}: {}", candidate, error);
  }
  if (reason)
    *reason = fmt::format(
        "libnccl could not be loaded (`pip install nvidia-nccl-cu13`, or nvidia-nccl-cu12 for a "
        "CUDA 12 driver, or set {} to the library); tried:{}",
        kEnvVar, attempts.empty() ? std::string(" nothing") : attempts);
  return nullptr;
}

const Library &library() {
  std::string reason;
  const Library *l = tryLibrary(&reason);
  KILN_CHECK(l, "kiln.distributed: the NCCL backend needs NCCL: {}", reason);
  return *l;
}

} // namespace kiln::distributed::nccl

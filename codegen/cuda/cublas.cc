#include "codegen/cuda/cublas.h"

#include "codegen/cuda/shared_library.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string_view>

namespace kiln::codegen::cuda {
namespace {

namespace fs = std::filesystem;

/// Where libcublas may be (shared_library.h), newest names first.
LibrarySearch &search() {
  static LibrarySearch s("KILN_CUBLAS", {"libcublas.so.13", "libcublas.so.12", "libcublas.so"},
                         "libcublas.so.", {"nvidia/cu13/lib", "nvidia/cublas/lib"});
  return s;
}

/// The names of cublasStatus_t (cublas_api.h), for libraries without cublasGetStatusString.
const char *statusTableName(CublasStatus s) {
  switch (s) {
  case 0:
    return "CUBLAS_STATUS_SUCCESS";
  case 1:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case 3:
    return "CUBLAS_STATUS_ALLOC_FAILED";
  case 7:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case 8:
    return "CUBLAS_STATUS_ARCH_MISMATCH";
  case 11:
    return "CUBLAS_STATUS_MAPPING_ERROR";
  case 13:
    return "CUBLAS_STATUS_EXECUTION_FAILED";
  case 14:
    return "CUBLAS_STATUS_INTERNAL_ERROR";
  case 15:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  case 16:
    return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return nullptr;
}

} // namespace

void Cublas::addSearchRoot(const std::string &dir) { search().addRoot(dir); }

std::vector<std::string> Cublas::searchCandidates() { return search().candidates(); }

std::unique_ptr<Cublas> Cublas::tryLoad(const std::string &candidate, std::string *error) {
  std::unique_ptr<Cublas> c(new Cublas());
  if (candidate.find('/') != std::string::npos) {
    std::string dir = fs::path(candidate).parent_path().string();
    for (const std::string &f : filesWithPrefix(dir, "libcublasLt.so.")) {
      std::string ignored; // a missing libcublasLt shows up as libcublas's own load error
      if (auto lib = SharedLibrary::open(f, &ignored, /*global=*/true)) {
        c->preloaded_.push_back(std::move(lib));
        break;
      }
    }
  }
  c->lib_ = SharedLibrary::open(candidate, error);
  if (!c->lib_)
    return nullptr;
  const SharedLibrary &lib = *c->lib_;
  std::vector<std::string> missing;
  resolve(lib, c->create, "cublasCreate_v2", missing);
  resolve(lib, c->destroy, "cublasDestroy_v2", missing);
  resolve(lib, c->setStream, "cublasSetStream_v2", missing);
  resolve(lib, c->sgemm, "cublasSgemm_v2", missing);
  resolve(lib, c->dgemm, "cublasDgemm_v2", missing);
  resolve(lib, c->sgemmStridedBatched, "cublasSgemmStridedBatched", missing);
  resolve(lib, c->dgemmStridedBatched, "cublasDgemmStridedBatched", missing);
  resolve(lib, c->gemmEx, "cublasGemmEx", missing);
  resolve(lib, c->gemmStridedBatchedEx, "cublasGemmStridedBatchedEx", missing);
  if (!missing.empty()) {
    *error = fmt::format("{} does not export {} (not a cuBLAS library?)", lib.path(),
                         fmt::join(missing, ", "));
    return nullptr;
  }
  std::vector<std::string> optional; // added in CUDA 11.4: the table above names the rest
  resolve(lib, c->getStatusString, "cublasGetStatusString", optional);
  return c;
}

std::unique_ptr<Cublas> Cublas::load(const std::vector<std::string> &candidates,
                                     std::string *reason) {
  std::string attempts;
  for (const std::string &candidate : candidates) {
    std::string error;
    if (std::unique_ptr<Cublas> c = tryLoad(candidate, &error))
      return c;
    attempts += fmt::format("\n  {}: {}", candidate, error);
  }
  if (reason)
    *reason = fmt::format("no libcublas could be loaded (install the CUDA toolkit or `pip install "
                          "nvidia-cublas`, or set KILN_CUBLAS to the library); tried:{}",
                          attempts.empty() ? std::string(" nothing") : attempts);
  return nullptr;
}

const Cublas *Cublas::get(std::string *reason) {
  static std::once_flag once;
  static const Cublas *instance = nullptr; // never unloaded: handles live as long as the process
  static std::string failure;
  std::call_once(once, [] { instance = load(searchCandidates(), &failure).release(); });
  if (!instance && reason)
    *reason = failure;
  return instance;
}

Cublas::~Cublas() = default;

const std::string &Cublas::path() const { return lib_->path(); }

std::string Cublas::statusName(CublasStatus status) const {
  const char *name = statusTableName(status);
  std::string out = name ? fmt::format("{} ({})", name, status) : fmt::format("status {}", status);
  if (getStatusString)
    if (const char *text = getStatusString(status);
        text && *text && (!name || std::string_view(text) != name))
      out += fmt::format(": {}", text);
  return out;
}

void Cublas::check(CublasStatus status, const char *what) const {
  if (status != 0)
    fail(ErrorKind::Runtime, "kiln: cuBLAS: {} failed: {}", what, statusName(status));
}

} // namespace kiln::codegen::cuda

#include "codegen/cuda/nvrtc.h"

#include "codegen/cuda/shared_library.h"
#include "runtime/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#if defined(KILN_HAVE_NVRTC_HEADERS) && __has_include(<nvrtc.h>)
#include <nvrtc.h>
static_assert(sizeof(nvrtcResult) == sizeof(kiln::codegen::cuda::NvrtcResult));
static_assert(NVRTC_SUCCESS == kiln::codegen::cuda::kNvrtcSuccess);
static_assert(NVRTC_ERROR_COMPILATION == kiln::codegen::cuda::kNvrtcCompilationError);
static_assert(sizeof(nvrtcProgram) == sizeof(kiln::codegen::cuda::NvrtcProgram));
#endif

namespace kiln::codegen::cuda {
namespace {

namespace fs = std::filesystem;

/// Where libnvrtc may be (shared_library.h), newest names first.
LibrarySearch &search() {
  static LibrarySearch s("KILN_NVRTC", {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"},
                         "libnvrtc.so.", {"nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"});
  return s;
}

} // namespace

void Nvrtc::addSearchRoot(const std::string &dir) { search().addRoot(dir); }

std::vector<std::string> Nvrtc::searchCandidates() { return search().candidates(); }

std::unique_ptr<Nvrtc> Nvrtc::tryLoad(const std::string &candidate, std::string *error) {
  std::unique_ptr<Nvrtc> n(new Nvrtc());
  bool isPath = candidate.find('/') != std::string::npos;
  if (isPath) {
    std::string dir = fs::path(candidate).parent_path().string();
    for (const std::string &f : filesWithPrefix(dir, "libnvrtc-builtins.so.")) {
      if (f.find(".alt.") != std::string::npos)
        continue;
      std::string ignored; // a missing builtins library shows up as NVRTC's own error later
      if (auto lib = SharedLibrary::open(f, &ignored, /*global=*/true))
        n->preloaded_.push_back(std::move(lib));
    }
  }
  n->lib_ = SharedLibrary::open(candidate, error);
  if (!n->lib_)
    return nullptr;
  std::vector<std::string> missing;
  const SharedLibrary &lib = *n->lib_;
  resolve(lib, n->versionFn, "nvrtcVersion", missing);
  resolve(lib, n->getErrorString, "nvrtcGetErrorString", missing);
  resolve(lib, n->createProgram, "nvrtcCreateProgram", missing);
  resolve(lib, n->destroyProgram, "nvrtcDestroyProgram", missing);
  resolve(lib, n->compileProgram, "nvrtcCompileProgram", missing);
  resolve(lib, n->getProgramLogSize, "nvrtcGetProgramLogSize", missing);
  resolve(lib, n->getProgramLog, "nvrtcGetProgramLog", missing);
  resolve(lib, n->getPTXSize, "nvrtcGetPTXSize", missing);
  resolve(lib, n->getPTX, "nvrtcGetPTX", missing);
  if (!missing.empty()) {
    *error = fmt::format("{} does not export {} (not an NVRTC library?)", lib.path(),
                         fmt::join(missing, ", "));
    return nullptr;
  }
  std::vector<std::string> optional; // absent from old NVRTCs: features are checked at use
  resolve(lib, n->getCUBINSize, "nvrtcGetCUBINSize", optional);
  resolve(lib, n->getCUBIN, "nvrtcGetCUBIN", optional);
  resolve(lib, n->getNumSupportedArchs, "nvrtcGetNumSupportedArchs", optional);
  resolve(lib, n->getSupportedArchs, "nvrtcGetSupportedArchs", optional);
  return n;
}

std::unique_ptr<Nvrtc> Nvrtc::load(const std::vector<std::string> &candidates) {
  std::string attempts;
  for (const std::string &c : candidates) {
    std::string error;
    if (std::unique_ptr<Nvrtc> n = tryLoad(c, &error))
      return n;
    attempts += fmt::format("\n  {}: {}", c, error);
  }
  fail(ErrorKind::Runtime,
       "kiln: NVRTC is not available: no libnvrtc could be loaded (install the CUDA toolkit or "
       "`pip install nvidia-cuda-nvrtc`, or set KILN_NVRTC to the library); tried:{}",
       attempts.empty() ? std::string(" nothing") : attempts);
}

const Nvrtc *Nvrtc::tryGet(std::string *reason) {
  static std::once_flag once;
  static const Nvrtc *instance = nullptr; // never unloaded: kernels may outlive any owner
  static std::string failure;
  std::call_once(once, [] {
    try {
      instance = load(searchCandidates()).release();
    } catch (const Error &e) {
      failure = e.what();
    }
  });
  if (!instance && reason)
    *reason = failure;
  return instance;
}

const Nvrtc &Nvrtc::get() {
  std::string reason;
  const Nvrtc *n = tryGet(&reason);
  if (!n)
    throw Error(ErrorKind::Runtime, reason);
  return *n;
}

Nvrtc::~Nvrtc() = default;

const std::string &Nvrtc::path() const { return lib_->path(); }

std::pair<int, int> Nvrtc::version() const {
  int major = 0, minor = 0;
  versionFn(&major, &minor);
  return {major, minor};
}

std::vector<int> Nvrtc::supportedArchs() const {
  if (!getNumSupportedArchs || !getSupportedArchs)
    return {};
  int count = 0;
  if (getNumSupportedArchs(&count) != kNvrtcSuccess || count <= 0)
    return {};
  std::vector<int> archs(static_cast<size_t>(count));
  if (getSupportedArchs(archs.data()) != kNvrtcSuccess)
    return {};
  return archs;
}

std::string Nvrtc::errorString(NvrtcResult result) const {
  const char *s = getErrorString ? getErrorString(result) : nullptr;
  return s ? s : fmt::format("NVRTC error {}", result);
}

} // namespace kiln::codegen::cuda

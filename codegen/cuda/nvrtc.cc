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

/// Library names in a folder or for the loader, newest first.
const char *const kNames[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
/// Where the wheels put libnvrtc under a site-packages folder.
const char *const kWheelDirs[] = {"nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"};

std::mutex &rootsMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<std::string> &extraRoots() {
  static std::vector<std::string> roots;
  return roots;
}

bool isDir(const std::string &p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

/// The library files of `dir` in preference order (the names above, then any libnvrtc.so.*).
void addFolder(const std::string &dir, std::vector<std::string> &out) {
  if (!isDir(dir))
    return;
  for (const char *name : kNames) {
    std::error_code ec;
    if (fs::exists(fs::path(dir) / name, ec)) {
      out.push_back((fs::path(dir) / name).string());
      return;
    }
  }
  for (const std::string &f : filesWithPrefix(dir, "libnvrtc.so."))
    if (f.find(".alt.") == std::string::npos) {
      out.push_back(f);
      return;
    }
}

void addSitePackages(const std::string &root, std::vector<std::string> &out) {
  for (const char *sub : kWheelDirs)
    addFolder((fs::path(root) / sub).string(), out);
}

} // namespace

void Nvrtc::addSearchRoot(const std::string &dir) {
  std::lock_guard<std::mutex> lock(rootsMutex());
  for (const std::string &r : extraRoots())
    if (r == dir)
      return;
  extraRoots().push_back(dir);
}

std::vector<std::string> Nvrtc::searchCandidates() {
  std::vector<std::string> out;
  if (const char *env = std::getenv("KILN_NVRTC"); env && *env) {
    if (isDir(env))
      addFolder(env, out);
    else
      out.push_back(env);
  }
  addFolder("/usr/local/cuda/lib64", out);
#if defined(__aarch64__)
  addFolder("/usr/local/cuda/targets/sbsa-linux/lib", out);
#else
  addFolder("/usr/local/cuda/targets/x86_64-linux/lib", out);
#endif
  {
    std::lock_guard<std::mutex> lock(rootsMutex());
    for (const std::string &root : extraRoots())
      addSitePackages(root, out);
  }
  if (const char *venv = std::getenv("VIRTUAL_ENV"); venv && *venv)
    for (const std::string &py : filesWithPrefix(std::string(venv) + "/lib", "python3"))
      addSitePackages(py + "/site-packages", out);
  for (const char *name : kNames)
    out.push_back(name);
  // The same file can be reached twice (a symlinked toolkit, a root given twice).
  std::vector<std::string> unique;
  for (const std::string &c : out)
    if (std::find(unique.begin(), unique.end(), c) == unique.end())
      unique.push_back(c);
  return unique;
}

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

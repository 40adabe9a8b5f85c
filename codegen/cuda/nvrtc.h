#pragma once
/// NVRTC, the CUDA runtime compiler, loaded with dlopen: kiln compiles CUDA C on machines with no
/// GPU and no CUDA toolkit installed, as long as libnvrtc can be found.
///
/// [Note: finding libnvrtc]
/// Nvrtc::get() tries, in order, and keeps the first library that loads and exports every
/// function kiln calls:
///   1. `$KILN_NVRTC`: a library file, or a folder holding one;
///   2. `/usr/local/cuda/lib64` and `/usr/local/cuda/targets/<arch>-linux/lib` (the toolkit);
///   3. the `nvidia-cuda-nvrtc` wheel in a Python site-packages folder: `nvidia/cu13/lib` (CUDA
///      13 wheels) or `nvidia/cuda_nvrtc/lib` (CUDA 12), under every folder given to
///      addSearchRoot (the frontend adds the running interpreter's `sys.path`) and under
///      `$VIRTUAL_ENV/lib/python3.*/site-packages`;
///   4. the loader's default search (`LD_LIBRARY_PATH`, ldconfig): `libnvrtc.so.13`,
///      `libnvrtc.so.12`, `libnvrtc.so`.
/// From a folder, the `libnvrtc-builtins.so.*` next to libnvrtc is loaded first (RTLD_GLOBAL):
/// libnvrtc opens it by its bare name, which the loader only finds in a folder that is not on
/// its search path because it is already loaded (the CUDA 13.0 wheel has no RUNPATH).
/// When nothing loads, the error lists every attempt and why it failed.
///
/// The function signatures are declared here (NVRTC's C API is stable), so kiln builds without
/// nvrtc.h; when the headers are present (@local_nvrtc), nvrtc.cc checks the declarations
/// against them at compile time.

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kiln::codegen::cuda {

class SharedLibrary;

/// NVRTC's handle and result types, as in nvrtc.h.
struct NvrtcProgramImpl;
using NvrtcProgram = NvrtcProgramImpl *; ///< nvrtcProgram (an opaque pointer)
using NvrtcResult = int;                 ///< nvrtcResult: 0 is NVRTC_SUCCESS
inline constexpr NvrtcResult kNvrtcSuccess = 0;
inline constexpr NvrtcResult kNvrtcCompilationError = 6; ///< NVRTC_ERROR_COMPILATION

/// A loaded libnvrtc and the functions kiln calls.
class Nvrtc {
public:
  /// The process-wide library (searched once, see [Note: finding libnvrtc]); throws kiln::Error
  /// ("kiln: NVRTC is not available: ...", with every attempt) when none loads.
  static const Nvrtc &get();
  /// Same, but returns null and sets `reason` instead of throwing.
  static const Nvrtc *tryGet(std::string *reason = nullptr);
  /// Loads the first of `candidates` (file paths or bare names) that works; throws kiln::Error
  /// listing each candidate and its failure. Not cached: for tests and explicit paths.
  static std::unique_ptr<Nvrtc> load(const std::vector<std::string> &candidates);
  /// The candidates get() tries, in order (depends on the environment and addSearchRoot).
  static std::vector<std::string> searchCandidates();
  /// Adds a folder that may hold the wheel's `nvidia/...` tree (a site-packages folder). Only
  /// affects a search that has not run yet.
  static void addSearchRoot(const std::string &dir);

  ~Nvrtc();
  Nvrtc(const Nvrtc &) = delete;
  Nvrtc &operator=(const Nvrtc &) = delete;

  /// The library file that was loaded.
  const std::string &path() const;
  /// NVRTC's (major, minor) version.
  std::pair<int, int> version() const;
  /// The `sm_XY` numbers this NVRTC compiles for (XY = 10 * major + minor); empty when the
  /// library predates nvrtcGetSupportedArchs.
  std::vector<int> supportedArchs() const;
  /// nvrtcGetErrorString.
  std::string errorString(NvrtcResult result) const;
  /// Whether this NVRTC can emit cubin (nvrtcGetCUBIN, CUDA 11.1+).
  bool hasCubin() const { return getCUBINSize && getCUBIN; }

  // The resolved C functions (signatures of nvrtc.h).
  NvrtcResult (*versionFn)(int *major, int *minor) = nullptr;
  const char *(*getErrorString)(NvrtcResult result) = nullptr;
  NvrtcResult (*createProgram)(NvrtcProgram *prog, const char *src, const char *name,
                               int numHeaders, const char *const *headers,
                               const char *const *includeNames) = nullptr;
  NvrtcResult (*destroyProgram)(NvrtcProgram *prog) = nullptr;
  NvrtcResult (*compileProgram)(NvrtcProgram prog, int numOptions,
                                const char *const *options) = nullptr;
  NvrtcResult (*getProgramLogSize)(NvrtcProgram prog, size_t *size) = nullptr;
  NvrtcResult (*getProgramLog)(NvrtcProgram prog, char *log) = nullptr;
  NvrtcResult (*getPTXSize)(NvrtcProgram prog, size_t *size) = nullptr;
  NvrtcResult (*getPTX)(NvrtcProgram prog, char *ptx) = nullptr;
  // Optional: null when this NVRTC does not have them.
  NvrtcResult (*getCUBINSize)(NvrtcProgram prog, size_t *size) = nullptr;
  NvrtcResult (*getCUBIN)(NvrtcProgram prog, char *cubin) = nullptr;
  NvrtcResult (*getNumSupportedArchs)(int *count) = nullptr;
  NvrtcResult (*getSupportedArchs)(int *archs) = nullptr;

private:
  Nvrtc() = default;
  /// Loads one candidate; null and `error` set when it does not work.
  static std::unique_ptr<Nvrtc> tryLoad(const std::string &candidate, std::string *error);

  std::vector<std::unique_ptr<SharedLibrary>> preloaded_; ///< libnvrtc-builtins
  std::unique_ptr<SharedLibrary> lib_;
};

} // namespace kiln::codegen::cuda

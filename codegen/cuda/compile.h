#pragma once
/// Compiling CUDA C with NVRTC: PTX for `sm_XY`, and SASS (cubin) from NVRTC itself or from the
/// toolkit's ptxas, cached in memory and on disk (cache.h).
///
///   source ──NVRTC (--gpu-architecture=sm_XY -default-device -std=c++17)──► PTX
///          └─ nvrtcGetCUBIN (a real architecture) ─► cubin     or   ptxas -arch=sm_XY ─► cubin
///
/// NVRTC needs no GPU and, for kiln's kernels (emit.h: no #include), no CUDA headers. A cubin
/// runs only on its architecture's major version (sm_80 on 8.x with x >= 0); the PTX is kept as
/// well so a driver can JIT it for a newer device. Errors are kiln::Errors carrying NVRTC's log
/// (or ptxas's output) and the offending source line.

#include "codegen/cuda/cache.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::codegen::cuda {

/// Where a compile's SASS came from.
enum class CubinSource : uint8_t { None, Nvrtc, Ptxas };

struct CudaCompileOptions {
  /// The architecture, `sm_<arch>`: compute capability major * 10 + minor (80, 86, 90, ...).
  int arch = 80;
  /// Also produce SASS: nvrtcGetCUBIN when NVRTC has it, else ptxas when one is found. False
  /// compiles for the virtual architecture `compute_<arch>`: PTX only, about 3x faster.
  bool cubin = true;
  /// Make the SASS with the toolkit's ptxas even when NVRTC could (NVRTC then emits PTX only).
  bool preferPtxas = false;
  /// `-lineinfo`: source lines in the SASS for profilers.
  bool lineInfo = false;
  /// More NVRTC options, appended after kiln's.
  std::vector<std::string> extraOptions;
  /// Where results are cached; null: always compile.
  CudaCache *cache = &CudaCache::global();
  /// Part of the cache key (tests use it to simulate another kiln version).
  std::string version = std::string(kCudaCodegenVersion);
};

struct CompiledCuda {
  int arch = 0;
  std::string ptx;
  std::string cubin; ///< empty when no SASS was produced
  CubinSource cubinSource = CubinSource::None;
  std::string log; ///< NVRTC's log (warnings) of a successful compile
  std::vector<std::string> options;
  bool fromCache = false;
};

/// The NVRTC options for `options`, in order: `--gpu-architecture=sm_XY` when NVRTC makes the
/// SASS, `compute_XY` (PTX only) otherwise.
std::vector<std::string> nvrtcOptions(const CudaCompileOptions &options);

/// Compiles `source` (one translation unit). Throws kiln::Error when NVRTC is missing, the
/// architecture is unsupported, or the source does not compile (with NVRTC's log).
CompiledCuda compileCuda(std::string_view source, const CudaCompileOptions &options = {});

/// `$KILN_PTXAS`, else `/usr/local/cuda/bin/ptxas`, else `ptxas` on PATH; nullopt when none is
/// an executable file.
std::optional<std::string> findPtxas();
/// Assembles PTX into a cubin for `sm_<arch>` with `ptxas` (default: findPtxas()). Throws
/// kiln::Error with ptxas's output when it fails (e.g. PTX newer than this ptxas supports).
std::string assembleWithPtxas(std::string_view ptx, int arch, const std::string &ptxas = "");

/// The `.version` of a PTX text ("9.0"), empty when it has none.
std::string ptxVersion(std::string_view ptx);

} // namespace kiln::codegen::cuda

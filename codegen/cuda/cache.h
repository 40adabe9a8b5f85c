#pragma once
/// CudaCache: compiled CUDA modules (PTX and cubin), in memory per process and on disk.
///
/// The same contract as the CPU kernel cache (codegen/cpu/kernel_cache.h), which cannot be
/// reused as is: its entries live under `cpu/`, its key takes a CPU TargetDesc, and it sits in
/// the LLVM-linked cpu_jit target, which CUDA code generation does not need.
/// - Key: SHA-256 (hex) of length-prefixed fields: the CUDA source, the NVRTC version, the
///   options (architecture included) and kiln's CUDA codegen version (cudaCacheKey).
/// - Disk: `$KILN_CACHE_DIR/cuda/<key>.bin` (default `~/.cache/kiln`), written to a temporary
///   file and renamed into place. A header (magic, format version, key, payload size, FNV-1a
///   checksum) is checked on every read; a truncated, corrupt or mismatching entry is counted,
///   deleted and rebuilt, never trusted.
/// - Concurrent requests for one key build it once (the others wait for it).

#include "codegen/disk_cache.h"

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace kiln::codegen::cuda {

/// Part of every key: bump when generated code or the payload format changes meaning.
inline constexpr std::string_view kCudaCodegenVersion = "kiln-0.1.0/cuda-codegen-2";

/// SHA-256 (64 hex digits) of the fields, each prefixed by its length.
std::string cudaCacheKey(std::initializer_list<std::string_view> fields);
/// SHA-256 of `data` (64 hex digits).
std::string sha256Hex(std::string_view data);

struct CudaCacheStats {
  int64_t memoryHits = 0; ///< includes requests that waited for a concurrent build
  int64_t diskHits = 0;
  int64_t misses = 0;        ///< entries built
  int64_t corrupt = 0;       ///< disk entries discarded (truncated, bad header or checksum)
  int64_t writeFailures = 0; ///< entries that could not be written (still used from memory)

  /// "hits 3 (memory 2, disk 1), misses 2 (corrupt 1)" for KILN_LOGS=perf.
  std::string str() const;
};

class CudaCache {
public:
  using Entry = std::shared_ptr<const std::string>;

  /// `dir` empty: memory only. Otherwise entries live in `dir/cuda/`.
  explicit CudaCache(std::string dir);
  /// `$KILN_CACHE_DIR`, else `$HOME/.cache/kiln` (the CPU cache's rule).
  static std::string defaultDir();
  /// The process-wide cache over defaultDir().
  static CudaCache &global();

  /// The entry for `key`: from memory, else a verified disk entry, else `build()` (stored in
  /// memory and on disk). An exception from build reaches every caller waiting on the key.
  Entry getOrBuild(const std::string &key, const std::function<std::string()> &build,
                   bool *fromCache = nullptr);

  CudaCacheStats stats() const;
  /// Forgets the in-memory entries (the next lookups read the disk).
  void clearMemory();
  /// The disk path of `key` (empty for a memory-only cache).
  std::string entryPath(const std::string &key) const;

private:
  Entry readEntry(const std::string &key, bool *corrupt) const;
  bool writeEntry(const std::string &key, const std::string &payload) const;

  std::string dir_;
  BuildOnceMap memo_;
  mutable std::mutex mu_; ///< guards stats_
  CudaCacheStats stats_;
};

} // namespace kiln::codegen::cuda

#pragma once
/// The kernel cache: compiled object code, in memory per process and on disk.
///
/// A key is the SHA-256 (hex) of everything the object depends on: the kernel's MLIR text, the
/// target (triple, CPU, features), the opt level, kiln's codegen version and LLVM's version.
/// Disk entries live in `$KILN_CACHE_DIR/cpu/<key>.o` (default `~/.cache/kiln`); each is
/// written to a temporary file and renamed into place, so readers never see half an entry. An
/// entry starts with a header (magic, format version, key, payload size, payload
/// checksum); an entry whose header or checksum does not match is counted, deleted and rebuilt,
/// never trusted. Concurrent requests for one key build it once (the others wait for it).

#include "codegen/cpu/target.h"
#include "codegen/disk_cache.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace kiln::codegen::cpu {

/// Part of every key: bump when generated code changes meaning for the same IR text.
inline constexpr std::string_view kCodegenVersion = "kiln-0.1.0/cpu-codegen-4";

/// The key of a compiled object (64 hex digits).
std::string cacheKey(std::string_view irText, const TargetDesc &target, int optLevel,
                     std::string_view version = kCodegenVersion);

/// Why a lookup did not produce a usable object.
enum class MissReason {
  NotFound,      ///< in neither the memory nor the disk cache (or no disk cache)
  Truncated,     ///< shorter than its header or its recorded payload size
  BadMagic,      ///< not a kiln cache entry
  FormatVersion, ///< written by another cache format version
  KeyMismatch,   ///< the header records another key
  BadChecksum,   ///< the payload does not match its checksum
  Unreadable,    ///< the file exists but could not be read
};
inline constexpr int kNumMissReasons = 7;
const char *missReasonName(MissReason reason);

struct CacheStats {
  int64_t memoryHits = 0; ///< includes requests that waited for a concurrent build
  int64_t diskHits = 0;
  int64_t misses = 0; ///< objects built
  std::array<int64_t, kNumMissReasons> missesBy{};
  int64_t writeFailures = 0; ///< disk entries that could not be written (the object is still used)

  int64_t count(MissReason r) const { return missesBy[static_cast<int>(r)]; }
  /// "hits 3 (memory 2, disk 1), misses 2 (not-found 1, bad-checksum 1)" for KILN_LOGS=perf.
  std::string str() const;
};

class KernelCache {
public:
  using Object = std::shared_ptr<const std::string>;

  /// `dir` empty: memory only. Otherwise entries live in `dir/cpu/`.
  explicit KernelCache(std::string dir);

  /// `$KILN_CACHE_DIR`, else `$HOME/.cache/kiln`.
  static std::string defaultDir();
  /// The process-wide cache over defaultDir().
  static KernelCache &global();

  /// The object for `key`: from memory, else a verified disk entry, else `build()` (stored in
  /// memory and on disk). Exceptions from build propagate to every caller waiting on the key.
  Object getOrBuild(const std::string &key, const std::function<std::string()> &build);

  CacheStats stats() const;
  /// Forgets the in-memory objects (the next lookups read the disk).
  void clearMemory();
  /// The disk path of `key` (empty for a memory-only cache).
  std::string entryPath(const std::string &key) const;
  const std::string &dir() const { return dir_; }

private:
  Object readEntry(const std::string &key, MissReason *reason) const;
  bool writeEntry(const std::string &key, const std::string &object) const;

  std::string dir_;
  BuildOnceMap memo_;
  mutable std::mutex mu_; ///< guards stats_
  CacheStats stats_;
};

} // namespace kiln::codegen::cpu

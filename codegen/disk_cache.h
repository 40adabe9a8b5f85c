#pragma once
/// What the on-disk caches (the CPU kernel cache, the CUDA cache) share: the cache directory,
/// reading and atomically writing one entry file, the framing of an entry, and stats text.
///
/// [Note: disk cache entry format]
/// A header, then the payload:
///   magic (8 bytes) | u32 format version | u32 key length | the key |
///   u64 payload size | u64 checksum of the payload
/// in host byte order. Each cache chooses its magic, format version and checksum.

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::codegen {

/// `$KILN_CACHE_DIR`, else `$HOME/.cache/kiln`, else empty (no disk cache).
std::string defaultCacheDir();

/// The contents of `path`; nullopt when it does not exist or (`*unreadable` set) when it exists
/// but cannot be opened.
std::optional<std::string> readFileIfExists(const std::string &path, bool *unreadable);

/// Writes `bytes` to a temporary file next to `path` (creating its folder) and renames it into
/// place, so readers see the old file or the new one, never half of one. False on failure.
bool writeFileAtomically(const std::string &path, std::string_view bytes);

struct EntryFormat {
  char magic[8];
  uint32_t version;
  uint64_t (*checksum)(std::string_view payload);
};

/// Why an entry is not the entry of a key.
enum class EntryError {
  Truncated,     ///< shorter than its header or its recorded payload size
  BadMagic,      ///< not an entry of this format
  FormatVersion, ///< written by another format version
  KeyMismatch,   ///< the header records another key
  BadChecksum,   ///< the payload does not match its checksum
};

/// The header of `payload` stored under `key`.
std::string entryHeader(const EntryFormat &format, std::string_view key, std::string_view payload);
/// The header size of an entry of `key` (its payload follows).
size_t entryHeaderSize(std::string_view key);
/// Why `data` is not the entry of `key`, or nullopt when it is.
std::optional<EntryError> checkEntry(const EntryFormat &format, std::string_view data,
                                     std::string_view key);

/// "hits 3 (memory 2, disk 1), misses 2 (<missDetail>), write failures 1": the detail and the
/// write failures only when not empty / not zero.
std::string cacheStatsText(int64_t memoryHits, int64_t diskHits, int64_t misses,
                           std::string_view missDetail, int64_t writeFailures);

/// The in-memory side of a cache: one immutable blob per key, built at most once. Concurrent
/// requests for a key that is being built wait for that build and share its result (or its
/// exception, after which the key is free to be built again). Thread-safe.
class BuildOnceMap {
public:
  using Object = std::shared_ptr<const std::string>;

  /// The object of `key`: the memoized one, else the one `make` returns (run by exactly one
  /// caller). `*memoized` is true when this call did not run `make`.
  Object get(const std::string &key, const std::function<Object()> &make, bool *memoized);
  /// Forgets every memoized object.
  void clear();

private:
  std::mutex mu_;
  std::map<std::string, Object> memory_;
  std::map<std::string, std::shared_future<Object>> inFlight_;
};

} // namespace kiln::codegen

#include "codegen/cpu/kernel_cache.h"

#include "codegen/disk_cache.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/xxhash.h"

#include <fmt/format.h>

#include <filesystem>
#include <optional>

namespace kiln::codegen::cpu {
namespace {

// [Note: kernel cache entry format]
// The disk cache framing (codegen/disk_cache.h) with magic "KILNOBJ\n" and an xxh3-64 checksum,
// then the object file image (the triple is part of the key). Any mismatch makes the entry a miss.
uint64_t xxh3(std::string_view payload) {
  return llvm::xxh3_64bits(llvm::StringRef(payload.data(), payload.size()));
}
constexpr EntryFormat kFormat = {{'K', 'I', 'L', 'N', 'O', 'B', 'J', '\n'}, 1, xxh3};

/// Length-prefixed, so no two field lists hash alike.
void hashField(llvm::SHA256 &sha, std::string_view field) {
  uint64_t n = field.size();
  sha.update(llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(&n), sizeof(n)));
  sha.update(llvm::StringRef(field.data(), field.size()));
}

} // namespace

std::string cacheKey(std::string_view irText, const TargetDesc &target, int optLevel,
                     std::string_view version) {
  llvm::SHA256 sha;
  for (std::string_view field :
       {std::string_view("kiln-cpu-object"), version, std::string_view(LLVM_VERSION_STRING),
        std::string_view(target.triple), std::string_view(target.cpu),
        std::string_view(target.features), std::string_view("O" + std::to_string(optLevel)),
        irText})
    hashField(sha, field);
  std::string hex;
  for (uint8_t byte : sha.final())
    hex += fmt::format("{:02x}", byte);
  return hex;
}

const char *missReasonName(MissReason reason) {
  switch (reason) {
  case MissReason::NotFound:
    return "not-found";
  case MissReason::Truncated:
    return "truncated";
  case MissReason::BadMagic:
    return "bad-magic";
  case MissReason::FormatVersion:
    return "format-version";
  case MissReason::KeyMismatch:
    return "key-mismatch";
  case MissReason::BadChecksum:
    return "bad-checksum";
  case MissReason::Unreadable:
    return "unreadable";
  }
  return "?";
}

std::string CacheStats::str() const {
  std::string reasons;
  for (int i = 0; i < kNumMissReasons; ++i)
    if (missesBy[i])
      reasons += fmt::format("{}{} {}", reasons.empty() ? "" : ", ",
                             missReasonName(static_cast<MissReason>(i)), missesBy[i]);
  return cacheStatsText(memoryHits, diskHits, misses, reasons, writeFailures);
}

KernelCache::KernelCache(std::string dir) : dir_(std::move(dir)) {}

std::string KernelCache::defaultDir() { return defaultCacheDir(); }

KernelCache &KernelCache::global() {
  static KernelCache cache(defaultDir());
  return cache;
}

std::string KernelCache::entryPath(const std::string &key) const {
  return dir_.empty() ? "" : dir_ + "/cpu/" + key + ".o";
}

KernelCache::Object KernelCache::readEntry(const std::string &key, MissReason *reason) const {
  *reason = MissReason::NotFound;
  if (dir_.empty())
    return nullptr;
  std::string path = entryPath(key);
  bool unreadable = false;
  std::optional<std::string> data = readFileIfExists(path, &unreadable);
  if (!data) {
    if (unreadable)
      *reason = MissReason::Unreadable;
    return nullptr;
  }
  std::optional<EntryError> bad = checkEntry(kFormat, *data, key);
  if (!bad)
    return std::make_shared<const std::string>(data->substr(entryHeaderSize(key)));
  switch (*bad) {
  case EntryError::Truncated:
    *reason = MissReason::Truncated;
    break;
  case EntryError::BadMagic:
    *reason = MissReason::BadMagic;
    break;
  case EntryError::FormatVersion:
    *reason = MissReason::FormatVersion;
    break;
  case EntryError::KeyMismatch:
    *reason = MissReason::KeyMismatch;
    break;
  case EntryError::BadChecksum:
    *reason = MissReason::BadChecksum;
    break;
  }
  std::error_code ec;
  std::filesystem::remove(path, ec); // never trusted again; rebuilt by the caller
  return nullptr;
}

bool KernelCache::writeEntry(const std::string &key, const std::string &object) const {
  return dir_.empty() ||
         writeFileAtomically(entryPath(key), entryHeader(kFormat, key, object) + object);
}

KernelCache::Object KernelCache::getOrBuild(const std::string &key,
                                            const std::function<std::string()> &build) {
  bool memoized = false;
  Object object = memo_.get(
      key,
      [&] { // this thread owns the key: read the disk, else build
        MissReason reason;
        Object found = readEntry(key, &reason);
        bool fromDisk = found != nullptr, written = true;
        if (!found) {
          found = std::make_shared<const std::string>(build());
          written = writeEntry(key, *found);
        }
        std::lock_guard<std::mutex> lock(mu_);
        if (fromDisk) {
          ++stats_.diskHits;
        } else {
          ++stats_.misses;
          ++stats_.missesBy[static_cast<int>(reason)];
          stats_.writeFailures += !written;
        }
        return found;
      },
      &memoized);
  if (memoized) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.memoryHits;
  }
  return object;
}

CacheStats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void KernelCache::clearMemory() { memo_.clear(); }

} // namespace kiln::codegen::cpu

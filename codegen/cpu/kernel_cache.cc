#include "codegen/cpu/kernel_cache.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/xxhash.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace kiln::codegen::cpu {
namespace {

namespace fs = std::filesystem;

// [Note: kernel cache entry format]
// A header, then the object file image:
//   magic "KILNOBJ\n" | u32 format version | u32 key length | the key |
//   u64 payload size | u64 xxh3-64 of the payload
// in host byte order (the triple is part of the key). Any mismatch makes the entry a miss.
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'O', 'B', 'J', '\n'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kFixedHeader = 8 + 4 + 4 + 8 + 8;

template <typename T> void put(std::string &out, T value) {
  out.append(reinterpret_cast<const char *>(&value), sizeof(T));
}
template <typename T> T get(const std::string &in, size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

std::string header(const std::string &key, const std::string &object) {
  std::string h(kMagic, sizeof(kMagic));
  put<uint32_t>(h, kFormatVersion);
  put<uint32_t>(h, static_cast<uint32_t>(key.size()));
  h += key;
  put<uint64_t>(h, object.size());
  put<uint64_t>(h, llvm::xxh3_64bits(object));
  return h;
}

/// Why `data` is not the entry of `key`, or nullopt when it is.
std::optional<MissReason> checkEntry(const std::string &data, const std::string &key) {
  const size_t headerSize = kFixedHeader + key.size();
  if (data.size() < 16)
    return MissReason::Truncated;
  if (std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0)
    return MissReason::BadMagic;
  if (get<uint32_t>(data, 8) != kFormatVersion)
    return MissReason::FormatVersion;
  if (get<uint32_t>(data, 12) != key.size())
    return MissReason::KeyMismatch;
  if (data.size() < headerSize)
    return MissReason::Truncated;
  if (data.compare(16, key.size(), key) != 0)
    return MissReason::KeyMismatch;
  if (get<uint64_t>(data, 16 + key.size()) != data.size() - headerSize)
    return MissReason::Truncated;
  if (get<uint64_t>(data, 24 + key.size()) !=
      llvm::xxh3_64bits(llvm::StringRef(data).drop_front(headerSize)))
    return MissReason::BadChecksum;
  return std::nullopt;
}

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
  std::string s = fmt::format("hits {} (memory {}, disk {}), misses {}", memoryHits + diskHits,
                              memoryHits, diskHits, misses);
  if (!reasons.empty())
    s += " (" + reasons + ")";
  if (writeFailures)
    s += fmt::format(", write failures {}", writeFailures);
  return s;
}

KernelCache::KernelCache(std::string dir) : dir_(std::move(dir)) {}

std::string KernelCache::defaultDir() {
  if (const char *env = std::getenv("KILN_CACHE_DIR"); env && *env)
    return env;
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/kiln";
  return "";
}

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
  std::error_code ec;
  if (!fs::exists(path, ec))
    return nullptr;
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {
    *reason = MissReason::Unreadable;
    return nullptr;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string data = std::move(buffer).str();
  std::optional<MissReason> bad = checkEntry(data, key);
  if (!bad)
    return std::make_shared<const std::string>(data.substr(kFixedHeader + key.size()));
  *reason = *bad;
  fs::remove(path, ec); // never trusted again; rebuilt by the caller
  return nullptr;
}

bool KernelCache::writeEntry(const std::string &key, const std::string &object) const {
  if (dir_.empty())
    return true;
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  std::string path = entryPath(key);
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string tmp =
      fmt::format("{}.tmp.{}.{}.{}", path, ::getpid(),
                  std::hash<std::thread::id>()(std::this_thread::get_id()), counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << header(key, object) << object;
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      return false;
    }
  }
  fs::rename(tmp, path, ec); // atomic on POSIX: readers see the old entry or the new one
  if (ec) {
    fs::remove(tmp, ec);
    return false;
  }
  return true;
}

KernelCache::Object KernelCache::getOrBuild(const std::string &key,
                                            const std::function<std::string()> &build) {
  std::promise<Object> promise;
  std::shared_future<Object> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = memory_.find(key); it != memory_.end()) {
      ++stats_.memoryHits;
      return it->second;
    }
    if (auto it = inFlight_.find(key); it != inFlight_.end()) {
      ++stats_.memoryHits;
      pending = it->second;
    } else {
      inFlight_.emplace(key, promise.get_future().share());
    }
  }
  if (pending.valid())
    return pending.get(); // another thread builds it; rethrows its exception
  // This thread owns the key: read the disk, else build.
  try {
    MissReason reason;
    Object object = readEntry(key, &reason);
    bool fromDisk = object != nullptr;
    bool written = true;
    if (!object) {
      object = std::make_shared<const std::string>(build());
      written = writeEntry(key, *object);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (fromDisk) {
      ++stats_.diskHits;
    } else {
      ++stats_.misses;
      ++stats_.missesBy[static_cast<int>(reason)];
      stats_.writeFailures += !written;
    }
    memory_[key] = object;
    inFlight_.erase(key);
    promise.set_value(object);
    return object;
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    inFlight_.erase(key);
    promise.set_exception(std::current_exception());
    throw;
  }
}

CacheStats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void KernelCache::clearMemory() {
  std::lock_guard<std::mutex> lock(mu_);
  memory_.clear();
}

} // namespace kiln::codegen::cpu

#include "codegen/disk_cache.h"

#include <fmt/format.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>
#include <unistd.h>

namespace kiln::codegen {
namespace {

namespace fs = std::filesystem;

constexpr size_t kFixedHeader = 8 + 4 + 4 + 8 + 8;

template <typename T> void put(std::string &out, T value) {
  out.append(reinterpret_cast<const char *>(&value), sizeof(T));
}
template <typename T> T get(std::string_view in, size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

} // namespace

std::string defaultCacheDir() {
  if (const char *env = std::getenv("KILN_CACHE_DIR"); env && *env)
    return env;
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/kiln";
  return "";
}

std::optional<std::string> readFileIfExists(const std::string &path, bool *unreadable) {
  *unreadable = false;
  std::error_code ec;
  if (!fs::exists(path, ec))
    return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in.is_open()) {
    *unreadable = true;
    return std::nullopt;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return std::move(buffer).str();
}

bool writeFileAtomically(const std::string &path, std::string_view bytes) {
  static std::atomic<uint64_t> counter{0};
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string tmp =
      fmt::format("{}.tmp.{}.{}.{}", path, ::getpid(),
                  std::hash<std::thread::id>()(std::this_thread::get_id()), counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << bytes;
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

std::string entryHeader(const EntryFormat &format, std::string_view key, std::string_view payload) {
  std::string h(format.magic, sizeof(format.magic));
  put<uint32_t>(h, format.version);
  put<uint32_t>(h, static_cast<uint32_t>(key.size()));
  h += key;
  put<uint64_t>(h, payload.size());
  put<uint64_t>(h, format.checksum(payload));
  return h;
}

size_t entryHeaderSize(std::string_view key) { return kFixedHeader + key.size(); }

std::optional<EntryError> checkEntry(const EntryFormat &format, std::string_view data,
                                     std::string_view key) {
  const size_t headerSize = entryHeaderSize(key);
  if (data.size() < 16)
    return EntryError::Truncated;
  if (std::memcmp(data.data(), format.magic, sizeof(format.magic)) != 0)
    return EntryError::BadMagic;
  if (get<uint32_t>(data, 8) != format.version)
    return EntryError::FormatVersion;
  if (get<uint32_t>(data, 12) != key.size())
    return EntryError::KeyMismatch;
  if (data.size() < headerSize)
    return EntryError::Truncated;
  if (data.compare(16, key.size(), key) != 0)
    return EntryError::KeyMismatch;
  if (get<uint64_t>(data, 16 + key.size()) != data.size() - headerSize)
    return EntryError::Truncated;
  if (get<uint64_t>(data, 24 + key.size()) != format.checksum(data.substr(headerSize)))
    return EntryError::BadChecksum;
  return std::nullopt;
}

std::string cacheStatsText(int64_t memoryHits, int64_t diskHits, int64_t misses,
                           std::string_view missDetail, int64_t writeFailures) {
  std::string s = fmt::format("hits {} (memory {}, disk {}), misses {}", memoryHits + diskHits,
                              memoryHits, diskHits, misses);
  if (!missDetail.empty())
    s += fmt::format(" ({})", missDetail);
  if (writeFailures)
    s += fmt::format(", write failures {}", writeFailures);
  return s;
}

BuildOnceMap::Object BuildOnceMap::get(const std::string &key, const std::function<Object()> &make,
                                       bool *memoized) {
  std::promise<Object> promise;
  std::shared_future<Object> pending;
  *memoized = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = memory_.find(key); it != memory_.end())
      return it->second;
    if (auto it = inFlight_.find(key); it != inFlight_.end())
      pending = it->second;
    else
      inFlight_.emplace(key, promise.get_future().share());
  }
  if (pending.valid())
    return pending.get(); // another thread builds it; rethrows its exception
  *memoized = false;
  try {
    Object object = make();
    std::lock_guard<std::mutex> lock(mu_);
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

void BuildOnceMap::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  memory_.clear();
}

} // namespace kiln::codegen

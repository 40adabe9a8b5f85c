#include "codegen/cuda/cache.h"

#include "codegen/disk_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <optional>

namespace kiln::codegen::cuda {
namespace {

/// SHA-256 (FIPS 180-4), streaming.
class Sha256 {
public:
  void update(const void *data, size_t n) {
    const auto *p = static_cast<const uint8_t *>(data);
    bits_ += uint64_t{n} * 8;
    while (n > 0) {
      size_t take = std::min(n, size_t{64} - used_);
      std::memcpy(block_ + used_, p, take);
      used_ += take, p += take, n -= take;
      if (used_ == 64) {
        compress();
        used_ = 0;
      }
    }
  }
  std::string hex() {
    uint64_t bits = bits_;
    uint8_t pad = 0x80;
    update(&pad, 1);
    uint8_t zero = 0;
    while (used_ != 56)
      update(&zero, 1);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
    update(len, 8);
    std::string out;
    for (uint32_t h : h_)
      out += fmt::format("{:08x}", h);
    return out;
  }

private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void compress() {
    static constexpr uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t{block_[4 * i]} << 24 | uint32_t{block_[4 * i + 1]} << 16 |
             uint32_t{block_[4 * i + 2]} << 8 | uint32_t{block_[4 * i + 3]};
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 =
          h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h_[0] += a, h_[1] += b, h_[2] += c, h_[3] += d, h_[4] += e, h_[5] += f, h_[6] += g, h_[7] += h;
  }

  std::array<uint32_t, 8> h_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block_[64] = {};
  size_t used_ = 0;
  uint64_t bits_ = 0;
};

// [Note: CUDA cache entry format]
// The disk cache framing (codegen/disk_cache.h) with magic "KILNCUDA" and an FNV-1a 64 checksum.
uint64_t fnv1a(std::string_view data) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data)
    h = (h ^ c) * 0x100000001b3ULL;
  return h;
}
constexpr EntryFormat kFormat = {{'K', 'I', 'L', 'N', 'C', 'U', 'D', 'A'}, 1, fnv1a};

} // namespace

std::string sha256Hex(std::string_view data) {
  Sha256 sha;
  sha.update(data.data(), data.size());
  return sha.hex();
}

std::string cudaCacheKey(std::initializer_list<std::string_view> fields) {
  Sha256 sha;
  for (std::string_view f : fields) {
    uint64_t n = f.size();
    sha.update(&n, sizeof(n));
    sha.update(f.data(), f.size());
  }
  return sha.hex();
}

std::string CudaCacheStats::str() const {
  return cacheStatsText(memoryHits, diskHits, misses,
                        corrupt ? fmt::format("corrupt {}", corrupt) : "", writeFailures);
}

CudaCache::CudaCache(std::string dir) : dir_(std::move(dir)) {}

std::string CudaCache::defaultDir() { return defaultCacheDir(); }

CudaCache &CudaCache::global() {
  static CudaCache cache(defaultDir());
  return cache;
}

std::string CudaCache::entryPath(const std::string &key) const {
  return dir_.empty() ? "" : dir_ + "/cuda/" + key + ".bin";
}

CudaCache::Entry CudaCache::readEntry(const std::string &key, bool *corrupt) const {
  *corrupt = false;
  if (dir_.empty())
    return nullptr;
  std::string path = entryPath(key);
  bool unreadable = false;
  std::optional<std::string> data = readFileIfExists(path, &unreadable);
  if (!data && !unreadable)
    return nullptr;
  if (data && !checkEntry(kFormat, *data, key))
    return std::make_shared<const std::string>(data->substr(entryHeaderSize(key)));
  *corrupt = true;
  std::error_code ec;
  std::filesystem::remove(path, ec); // never trusted again; rebuilt by the caller
  return nullptr;
}

bool CudaCache::writeEntry(const std::string &key, const std::string &payload) const {
  return dir_.empty() ||
         writeFileAtomically(entryPath(key), entryHeader(kFormat, key, payload) + payload);
}

CudaCache::Entry CudaCache::getOrBuild(const std::string &key,
                                       const std::function<std::string()> &build, bool *fromCache) {
  bool memoized = false;
  Entry entry = memo_.get(
      key,
      [&] { // this thread owns the key: read the disk, else build
        bool corrupt = false;
        Entry found = readEntry(key, &corrupt);
        bool fromDisk = found != nullptr, written = true;
        if (!found) {
          found = std::make_shared<const std::string>(build());
          written = writeEntry(key, *found);
        }
        if (fromCache)
          *fromCache = fromDisk;
        std::lock_guard<std::mutex> lock(mu_);
        if (fromDisk) {
          ++stats_.diskHits;
        } else {
          ++stats_.misses;
          stats_.corrupt += corrupt;
          stats_.writeFailures += !written;
        }
        return found;
      },
      &memoized);
  if (memoized) {
    if (fromCache)
      *fromCache = true;
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.memoryHits;
  }
  return entry;
}

CudaCacheStats CudaCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CudaCache::clearMemory() { memo_.clear(); }

} // namespace kiln::codegen::cuda

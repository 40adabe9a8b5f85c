#include "runtime/host_cache.h"

#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace kiln::hostcache {

namespace {

size_t capacityFromEnv() {
  const char *mb = std::getenv("KILN_HOST_CACHE_MB");
  if (!mb || !*mb)
    return size_t{1024} << 20;
  try {
    return static_cast<size_t>(std::stoull(mb)) << 20;
  } catch (const std::exception &) {
    return size_t{1024} << 20;
  }
}

struct Cache {
  std::mutex mu;
  std::multimap<size_t, void *> blocks;
  size_t bytes = 0, hits = 0, misses = 0;
  const size_t capacity = capacityFromEnv();
};

/// Never destroyed: storages released during static destruction still give blocks back.
Cache &cache() {
  static Cache *c = new Cache();
  return *c;
}

} // namespace

size_t sizeClass(size_t bytes) {
  size_t step = std::bit_floor(bytes) / 8;
  return (bytes + step - 1) / step * step;
}

void *take(size_t sizeClass) {
  Cache &c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto it = c.blocks.find(sizeClass); it != c.blocks.end()) {
      void *p = it->second;
      c.blocks.erase(it);
      c.bytes -= sizeClass;
      ++c.hits;
      return p;
    }
    ++c.misses;
  }
  return std::aligned_alloc(64, sizeClass);
}

void give(void *block, size_t sizeClass) noexcept {
  Cache &c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.bytes + sizeClass <= c.capacity) {
      c.blocks.emplace(sizeClass, block);
      c.bytes += sizeClass;
      return;
    }
  }
  std::free(block);
}

void clear() noexcept {
  Cache &c = cache();
  std::multimap<size_t, void *> blocks;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    blocks.swap(c.blocks);
    c.bytes = 0;
  }
  for (auto &[size, p] : blocks)
    std::free(p);
}

HostCacheStats stats() {
  Cache &c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return {c.bytes, c.capacity, c.hits, c.misses};
}

} // namespace kiln::hostcache

#pragma once
/// HostBlockCache: freed large host blocks kept for the next allocation of the same size class.
///
/// A program that allocates a large tensor per call (a compiled graph's output, a convolution's
/// result) would otherwise get freshly mapped pages every call: glibc serves blocks above its mmap
/// threshold with mmap and unmaps them on free, and the first touch of each 4 KiB page then
/// faults, which costs about as much as the kernel writing the tensor. Storage::allocate takes
/// blocks of at least kMinBytes from here and gives them back on release.
///
/// Size classes: a request is rounded up to a multiple of 1/8 of its power of two (at most 12.5%
/// slack); only a block of exactly that class is reused. The cache holds at most `capacity`
/// bytes (`KILN_HOST_CACHE_MB`, default 1024; 0 disables it): a block that does not fit is
/// freed. Thread-safe.

#include <cstddef>

namespace kiln {

struct HostCacheStats {
  size_t cachedBytes = 0; ///< held for reuse, not in any tensor
  size_t capacity = 0;
  size_t hits = 0, misses = 0;
};

namespace hostcache {

inline constexpr size_t kMinBytes = size_t{1} << 20;

/// The size class of a request of `bytes` (>= kMinBytes).
size_t sizeClass(size_t bytes);
/// A block of `sizeClass` bytes (64-byte aligned): a cached one, else a new one; null when the
/// system is out of memory.
void *take(size_t sizeClass);
/// Returns a block from take(); it is cached or freed.
void give(void *block, size_t sizeClass) noexcept;
/// Frees every cached block.
void clear() noexcept;
HostCacheStats stats();

} // namespace hostcache
} // namespace kiln

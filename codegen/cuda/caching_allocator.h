#pragma once
/// CachingAllocator: device memory reused across allocations, over a raw allocate/release pair
/// (cuMemAlloc/cuMemFree for a GPU; anything in tests).
///
/// Raw device allocations are slow (cuMemAlloc/cuMemFree synchronize and take milliseconds for
/// large blocks) and a program allocates and frees every intermediate on every call, so freed
/// blocks are kept and handed out again:
/// - Size classes: requests up to kSmallLimit (1 MiB) round up to a multiple of kSmallRound
///   (512 B), larger ones to a multiple of kLargeRound (2 MiB). Rounding makes blocks of similar
///   requests interchangeable; 2 MiB is the driver's own allocation granularity, so rounding
///   large requests to it costs no device memory. Zero-byte requests get a 512 B block, so every
///   allocation has a distinct address.
/// - Reuse is best fit within a stream: the smallest cached block of the same stream that is
///   large enough, of the same class (small or large) and at most twice the rounded size (a
///   small request never pins a huge block). Blocks are not split.
/// - Per-stream free lists: a block freed on stream S may still be read by work queued on S, and
///   only later work on S is ordered after it, so a block is reused only by the stream that
///   freed it (today every launch is on the default stream, id 0).
/// - When the raw allocator fails, the cache is emptied and the request tried once more.
/// Thread-safe: one mutex guards the lists and counters (raw calls happen under it).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace kiln::codegen::cuda {

class CachingAllocator {
public:
  /// Returns the address of `bytes` fresh bytes or throws.
  using RawAllocate = std::function<uint64_t(size_t bytes)>;
  using RawRelease = std::function<void(uint64_t address)>;

  static constexpr size_t kSmallRound = 512;
  static constexpr size_t kSmallLimit = size_t{1} << 20;
  static constexpr size_t kLargeRound = size_t{2} << 20;

  CachingAllocator(RawAllocate allocate, RawRelease release);
  /// Returns the cached blocks to the raw allocator; blocks still allocated are left to it.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator &) = delete;
  CachingAllocator &operator=(const CachingAllocator &) = delete;

  /// The size of the block a request of `bytes` gets.
  static size_t roundSize(size_t bytes);

  /// A block of at least `bytes` for work on `stream`.
  uint64_t allocate(size_t bytes, int64_t stream = 0);
  /// Returns a block to the free list of the stream it was allocated for. Throws kiln::Error
  /// for an address this allocator did not hand out (or already took back).
  void release(uint64_t address);
  /// Gives every cached (free) block back to the raw allocator.
  void emptyCache();

  /// Bytes in blocks handed out and not released (rounded sizes).
  size_t allocated() const;
  /// Bytes obtained from the raw allocator and not given back (allocated + cached).
  size_t reserved() const;
  /// Raw allocations made so far (tests use it to see reuse).
  size_t rawAllocations() const;

private:
  struct Block {
    size_t size = 0;
    int64_t stream = 0;
  };
  void emptyCacheLocked();

  RawAllocate rawAllocate_;
  RawRelease rawRelease_;
  mutable std::mutex mu_;
  std::map<uint64_t, Block> live_; ///< address → block handed out
  /// stream → (size → address) of cached blocks
  std::map<int64_t, std::multimap<size_t, uint64_t>> free_;
  size_t allocated_ = 0, reserved_ = 0, rawAllocations_ = 0;
};

} // namespace kiln::codegen::cuda

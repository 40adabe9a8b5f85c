#include "codegen/cuda/caching_allocator.h"

#include "runtime/error.h"

#include <utility>

namespace kiln::codegen::cuda {

namespace {

bool isSmall(size_t rounded) { return rounded <= CachingAllocator::kSmallLimit; }

} // namespace

CachingAllocator::CachingAllocator(RawAllocate allocate, RawRelease release)
    : rawAllocate_(std::move(allocate)), rawRelease_(std::move(release)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  try {
    emptyCacheLocked();
  } catch (const std::exception &) {
    // A destructor must not throw; a failing raw release at exit only leaks device memory.
  }
}

size_t CachingAllocator::roundSize(size_t bytes) {
  if (bytes == 0)
    return kSmallRound;
  size_t unit = bytes <= kSmallLimit ? kSmallRound : kLargeRound;
  return (bytes + unit - 1) / unit * unit;
}

uint64_t CachingAllocator::allocate(size_t bytes, int64_t stream) {
  size_t rounded = roundSize(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto lists = free_.find(stream); lists != free_.end()) {
    std::multimap<size_t, uint64_t> &blocks = lists->second;
    auto it = blocks.lower_bound(rounded);
    if (it != blocks.end() && isSmall(it->first) == isSmall(rounded) && it->first <= 2 * rounded) {
      uint64_t address = it->second;
      size_t size = it->first;
      blocks.erase(it);
      live_[address] = {size, stream};
      allocated_ += size;
      return address;
    }
  }
  uint64_t address = 0;
  try {
    address = rawAllocate_(rounded);
  } catch (const std::exception &) {
    // Out of memory with blocks cached: give them back and try once more.
    if (reserved_ == allocated_)
      throw;
    emptyCacheLocked();
    address = rawAllocate_(rounded);
  }
  ++rawAllocations_;
  live_[address] = {rounded, stream};
  allocated_ += rounded;
  reserved_ += rounded;
  return address;
}

void CachingAllocator::release(uint64_t address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(address);
  KILN_CHECK(it != live_.end(),
             "kiln: CUDA allocator: release of {:#x}, which is not an allocated block", address);
  free_[it->second.stream].emplace(it->second.size, address);
  allocated_ -= it->second.size;
  live_.erase(it);
}

void CachingAllocator::emptyCache() {
  std::lock_guard<std::mutex> lock(mu_);
  emptyCacheLocked();
}

void CachingAllocator::emptyCacheLocked() {
  for (auto &[stream, blocks] : free_)
    for (auto &[size, address] : blocks) {
      rawRelease_(address);
      reserved_ -= size;
    }
  free_.clear();
}

size_t CachingAllocator::allocated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

size_t CachingAllocator::reserved() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserved_;
}

size_t CachingAllocator::rawAllocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return rawAllocations_;
}

} // namespace kiln::codegen::cuda

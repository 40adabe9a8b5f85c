#pragma once
/// Generator: kiln's random number source, a counter-based Philox4x32-10 stream.
///
/// [Note: counter-based random numbers]
/// A Philox generator is a pure function of (key, counter): the key is the seed and the counter
/// is the generator's offset plus the element's index. An op that needs n random elements
/// reserves n counters (advancing the offset by n) and then computes element i's numbers from
/// (seed, offset + i) alone. The numbers therefore do not depend on how the work is split over
/// threads, and a stream is reproduced exactly by restoring (seed, offset).

#include "runtime/philox.h"

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>

namespace kiln {

/// A seeded Philox stream position (torch.Generator). Thread-safe: reserve() is atomic.
class Generator {
public:
  /// torch's default seed, so a fresh generator reports the same initial_seed() as torch's.
  static constexpr uint64_t kDefaultSeed = 67280421310721ull;
  /// Size of the state from getState(): seed then offset, little-endian uint64s.
  static constexpr int kStateBytes = 16;

  explicit Generator(uint64_t seed = kDefaultSeed) : seed_(seed) {}

  /// Restarts the stream at offset 0 of `seed`.
  void manualSeed(uint64_t seed);
  /// Reseeds from a non-deterministic source and returns the new seed.
  uint64_t seedRandomly();
  uint64_t initialSeed() const;
  uint64_t offset() const;

  /// Reserves n counters and returns the stream that owns them.
  PhiloxStream reserve(uint64_t n);

  std::array<uint8_t, kStateBytes> getState() const;
  void setState(const std::array<uint8_t, kStateBytes> &state);

  /// The process-wide generator that ops use when none is passed (torch.default_generator).
  static const std::shared_ptr<Generator> &defaultGenerator();

private:
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

/// `gen`, or the default generator when null.
inline Generator &generatorOrDefault(Generator *gen) {
  return gen ? *gen : *Generator::defaultGenerator();
}

} // namespace kiln

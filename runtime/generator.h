#pragma once
/// Generator: kiln's random number source, a counter-based Philox4x32-10 stream.
///
/// [Note: counter-based random numbers]
/// A Philox generator is a pure function of (key, counter): the key is the seed and the counter
/// is the generator's offset plus the element's index. An op that needs n random elements
/// reserves n counters (advancing the offset by n) and then computes element i's numbers from
/// (seed, offset + i) alone. The numbers therefore do not depend on how the work is split over
/// threads, and a stream is reproduced exactly by restoring (seed, offset).

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>

namespace kiln {

/// One Philox4x32-10 block: four 32-bit random words for a 128-bit counter and a 64-bit key.
inline std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> ctr,
                                          std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return ctr;
}

/// The counters one op reserved: element i of the op draws from block(i).
struct PhiloxStream {
  uint64_t seed = 0;
  uint64_t offset = 0;

  /// The four random words of element `index`; `sub` selects further blocks for ops that need
  /// more than four words per element.
  std::array<uint32_t, 4> block(uint64_t index, uint32_t sub = 0) const {
    uint64_t c = offset + index;
    return philox4x32({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), sub, 0u},
                      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  }
};

/// A uniform float in [0, 1) with `bits` random bits, so that it is exactly representable in
/// a type with that many significand bits and never rounds up to 1.
inline float uniformFloat(uint32_t x, int bits = 24) {
  return static_cast<float>(x >> (32 - bits)) * (1.0f / static_cast<float>(1u << bits));
}
/// A uniform double in [0, 1) with 53 random bits.
inline double uniformDouble(uint32_t hi, uint32_t lo) {
  uint64_t v = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(v) * 0x1.0p-53;
}

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

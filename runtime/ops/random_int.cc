// Discrete uniform samplers: random_, randint and randperm.
#include "runtime/ops/factory.h"
#include "runtime/ops/random.h"
#include "runtime/ops/random_impl.h"

#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

namespace kiln::ops {

namespace {

/// The inclusive integer range dtype represents exactly: its full range for integers, [0, 1] for
/// bool and +-2^significand for floats.
std::pair<int64_t, int64_t> exactIntRange(DType dtype) {
  return dispatchAll(dtype, [&]<typename T>() -> std::pair<int64_t, int64_t> {
    if constexpr (std::is_same_v<T, bool>)
      return {0, 1};
    else if constexpr (std::is_integral_v<T>)
      return {std::numeric_limits<T>::min(), std::numeric_limits<T>::max()};
    else {
      int64_t m = int64_t{1} << detail::kSignificandBits<T>;
      return {-m, m};
    }
  });
}

/// Fills `self` with from + (r mod range); range 0 stands for the full 2^64.
Tensor &randomFill(Tensor &self, int64_t from, uint64_t range, Generator *gen) {
  return detail::sampleInPlace(self, gen, [&](const Tensor &dst, const PhiloxStream &s) {
    const bool wide = range == 0 || range > (uint64_t{1} << 32);
    dispatchAll(dst.dtype(), [&]<typename T>() {
      detail::fillContiguous<T>(dst, [&](int64_t i) {
        auto r = s.block(i);
        uint64_t x = wide ? (static_cast<uint64_t>(r[0]) << 32) | r[1] : r[0];
        if (range != 0)
          x %= range;
        // Unsigned addition wraps instead of overflowing for ranges that span all of int64.
        auto v = static_cast<int64_t>(static_cast<uint64_t>(from) + x);
        return convertValue<T>(v);
      });
    });
  });
}

} // namespace

Tensor &random_(Tensor &self, int64_t from, std::optional<int64_t> to, Generator *gen) {
  auto [lo, hi] = exactIntRange(self.dtype());
  const auto name = dtypeName(self.dtype());
  if (!to) {
    // [from, the largest exactly representable value].
    KILN_CHECK(from <= hi, "random_: from={} is larger than the largest value {} of {}", from, hi,
               name);
    return randomFill(self, from, static_cast<uint64_t>(hi) - static_cast<uint64_t>(from) + 1, gen);
  }
  KILN_CHECK(from < *to, "random_ expects 'from' to be less than 'to', but got from={} >= to={}",
             from, *to);
  if (!isFloating(self.dtype())) {
    KILN_CHECK(from >= lo, "random_: from={} is out of bounds for {} (range [{}, {}])", from, name,
               lo, hi);
    KILN_CHECK(*to - 1 <= hi, "random_: to - 1 = {} is out of bounds for {} (range [{}, {}])",
               *to - 1, name, lo, hi);
  }
  return randomFill(self, from, static_cast<uint64_t>(*to) - static_cast<uint64_t>(from), gen);
}

Tensor randint(int64_t low, int64_t high, IntList sizes, DType dtype, Generator *gen) {
  checkSizes("randint", sizes);
  KILN_CHECK(low < high,
             "randint: expected 'low' to be less than 'high', but got low={} >= "
             "high={}",
             low, high);
  Tensor out = Tensor::empty(sizes, dtype);
  return random_(out, low, high, gen);
}

namespace {

void checkRandperm(int64_t n, DType dtype) {
  KILN_CHECK(n >= 0, "randperm: Trying to create tensor with negative dimension {}: [{}]", n, n);
  KILN_CHECK_KIND(NotImplemented, dtype != DType::Bool, "\"randperm\" not implemented for 'bool'");
  int64_t hi = exactIntRange(dtype).second;
  // Floats represent every integer up to 2^significand: n - 1 may be that value itself.
  KILN_CHECK(n == 0 || n - 1 <= hi,
             "randperm: n={} is too large for dtype {} (its values 0..n-1 must be exact, so n "
             "cannot be greater than {})",
             n, dtypeName(dtype), hi + 1);
}

} // namespace

Tensor randperm(int64_t n, DType dtype, Generator *gen) {
  checkRandperm(n, dtype);
  return randpermFrom(generatorOrDefault(gen).reserve(static_cast<uint64_t>(n)), n, dtype);
}

Tensor randpermFrom(const PhiloxStream &s, int64_t n, DType dtype) {
  checkRandperm(n, dtype);
  Tensor out = Tensor::empty({n}, DType::Int64);
  int64_t *p = out.data<int64_t>();
  std::iota(p, p + n, int64_t{0});
  // Fisher-Yates: the swap at step i uses counter i, so the permutation depends only on the seed.
  for (int64_t i = 0; i + 1 < n; ++i) {
    auto r = s.block(static_cast<uint64_t>(i));
    uint64_t x = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    int64_t j = i + static_cast<int64_t>(x % static_cast<uint64_t>(n - i));
    std::swap(p[i], p[j]);
  }
  return out.to(dtype);
}

} // namespace kiln::ops

// multinomial: category sampling from rows of non-negative weights.
//
// With replacement each sample inverts the row's cumulative distribution at a uniform draw.
// Without replacement the row is sampled by the exponential-race trick: category c gets the key
// E_c / w_c with E_c ~ Exp(1), and the numSamples smallest keys win; this draws a sequence with
// exactly the probabilities of sampling one category at a time and renormalizing.
#include "runtime/ops/random.h"
#include "runtime/ops/random_impl.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace kiln::ops {

namespace {

void checkMultinomialArgs(const Tensor &probs, int64_t numSamples, bool replacement) {
  KILN_CHECK(probs.dim() == 1 || probs.dim() == 2,
             "multinomial: prob_dist must be 1 or 2 dim, got a tensor of shape {}",
             probs.shapeStr());
  KILN_CHECK(isFloating(probs.dtype()),
             "multinomial only supports floating-point dtypes for input, got: {}",
             dtypeName(probs.dtype()));
  KILN_CHECK(numSamples > 0, "multinomial: cannot sample n_sample <= 0 samples (got {})",
             numSamples);
  KILN_CHECK(probs.size(-1) > 0,
             "multinomial: the probability tensor of shape {} has no categories", probs.shapeStr());
  KILN_CHECK(replacement || numSamples <= probs.size(-1),
             "multinomial: cannot sample n_sample > prob_dist.size(-1) samples without "
             "replacement (n_sample={}, {} categories)",
             numSamples, probs.size(-1));
}

/// Validates one row's weights; returns its number of non-zero categories.
int64_t checkRow(const double *w, int64_t n, bool replacement, int64_t numSamples) {
  double sum = 0;
  int64_t nonzero = 0;
  for (int64_t c = 0; c < n; ++c) {
    KILN_CHECK(std::isfinite(w[c]) && w[c] >= 0,
               "multinomial: probability tensor contains either `inf`, `nan` or element < 0 "
               "(found {})",
               w[c]);
    sum += w[c];
    nonzero += w[c] > 0;
  }
  KILN_CHECK(sum > 0, "multinomial: invalid multinomial distribution (sum of probabilities <= 0)");
  KILN_CHECK(replacement || nonzero >= numSamples,
             "multinomial: invalid multinomial distribution (with replacement=False, not enough "
             "non-negative category to sample): {} non-zero categories for {} samples",
             nonzero, numSamples);
  return nonzero;
}

void sampleWithReplacement(const double *w, int64_t n, int64_t numSamples, const PhiloxStream &s,
                           uint64_t base, int64_t *out) {
  std::vector<double> cdf(n);
  std::partial_sum(w, w + n, cdf.begin());
  const double total = cdf.back();
  int64_t last = n - 1;
  while (w[last] == 0)
    --last;
  for (int64_t k = 0; k < numSamples; ++k) {
    auto r = s.block(base + static_cast<uint64_t>(k));
    double target = uniformDouble(r[0], r[1]) * total;
    auto it = std::upper_bound(cdf.begin(), cdf.end(), target);
    // Rounding can put the target at the very top: that belongs to the last non-zero category.
    out[k] = std::min<int64_t>(it - cdf.begin(), last);
  }
}

void sampleWithoutReplacement(const double *w, int64_t n, int64_t numSamples, const PhiloxStream &s,
                              uint64_t base, int64_t *out) {
  std::vector<double> keys(n);
  for (int64_t c = 0; c < n; ++c) {
    auto r = s.block(base + static_cast<uint64_t>(c));
    double e = -std::log(1.0 - uniformDouble(r[0], r[1])); // Exp(1); 1 - u is in (0, 1]
    keys[c] = w[c] > 0 ? e / w[c] : std::numeric_limits<double>::infinity();
  }
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), int64_t{0});
  auto less = [&](int64_t a, int64_t b) {
    return keys[a] < keys[b] || (keys[a] == keys[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + numSamples, idx.end(), less);
  std::copy(idx.begin(), idx.begin() + numSamples, out);
}

} // namespace

Tensor multinomial(const Tensor &probs, int64_t numSamples, bool replacement, Generator *gen) {
  checkMultinomialArgs(probs, numSamples, replacement);
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  const int64_t n = probs.size(-1);
  Tensor w = probs.to(DType::Float64).contiguous();
  const double *wp = w.data<double>();
  for (int64_t r = 0; r < rows; ++r)
    checkRow(wp + r * n, n, replacement, numSamples);

  Shape outShape = probs.dim() == 2 ? Shape{rows, numSamples} : Shape{numSamples};
  Tensor out = Tensor::empty(outShape, DType::Int64);
  int64_t *op = out.data<int64_t>();
  // Row r owns counters [r * perRow, (r + 1) * perRow): rows are independent of each other and
  // of how they are split over threads.
  const int64_t perRow = replacement ? numSamples : n;
  PhiloxStream s = generatorOrDefault(gen).reserve(static_cast<uint64_t>(rows * perRow));
  int64_t grain = std::max<int64_t>(1, detail::kRandomGrain / std::max(n, numSamples));
  parallelFor(0, rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      uint64_t base = static_cast<uint64_t>(r * perRow);
      if (replacement)
        sampleWithReplacement(wp + r * n, n, numSamples, s, base, op + r * numSamples);
      else
        sampleWithoutReplacement(wp + r * n, n, numSamples, s, base, op + r * numSamples);
    }
  });
  return out;
}

} // namespace kiln::ops

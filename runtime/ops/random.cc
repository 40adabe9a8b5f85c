// Continuous samplers (uniform, normal, exponential), Bernoulli sampling and dropout.
#include "runtime/ops/random.h"

#include "runtime/ops/elementwise.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/random_impl.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::ops {

using detail::dispatchFloating;
using detail::fillContiguous;
using detail::sampleInPlace;

Tensor &uniform_(Tensor &self, double from, double to, Generator *gen) {
  KILN_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from={} > to={}",
             from, to);
  dispatchFloating(self.dtype(), "uniform_", [&]<typename T>() {
    sampleInPlace(self, gen, [&](const Tensor &dst, const PhiloxStream &s) {
      using Acc = detail::SampleAcc<T>;
      const Acc lo = static_cast<Acc>(from), width = static_cast<Acc>(to - from);
      fillContiguous<T>(dst, [&](int64_t i) {
        return static_cast<T>(lo + width * detail::uniformSample<T>(s.block(i)));
      });
    });
  });
  return self;
}

Tensor &normal_(Tensor &self, double mean, double std, Generator *gen) {
  KILN_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std {}", std);
  dispatchFloating(self.dtype(), "normal_", [&]<typename T>() {
    sampleInPlace(self, gen, [&](const Tensor &dst, const PhiloxStream &s) {
      using Acc = detail::SampleAcc<T>;
      constexpr int kPer = detail::kNormalsPerBlock<T>;
      const Acc m = static_cast<Acc>(mean), sd = static_cast<Acc>(std);
      T *p = dst.data<T>();
      const int64_t n = dst.numel();
      // Block j fills elements [j * kPer, (j + 1) * kPer): still a function of the index only.
      parallelFor(0, (n + kPer - 1) / kPer, detail::kRandomGrain / kPer, [&](int64_t b, int64_t e) {
        Acc z[kPer];
        for (int64_t j = b; j < e; ++j) {
          detail::boxMuller<T>(s.block(static_cast<uint64_t>(j)), z);
          const int64_t base = j * kPer, count = std::min<int64_t>(kPer, n - base);
          for (int64_t k = 0; k < count; ++k)
            p[base + k] = static_cast<T>(m + sd * z[k]);
        }
      });
    });
  });
  return self;
}

Tensor &exponential_(Tensor &self, double lambd, Generator *gen) {
  KILN_CHECK(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda={}", lambd);
  dispatchFloating(self.dtype(), "exponential_", [&]<typename T>() {
    sampleInPlace(self, gen, [&](const Tensor &dst, const PhiloxStream &s) {
      using Acc = detail::SampleAcc<T>;
      const Acc rate = static_cast<Acc>(lambd);
      fillContiguous<T>(dst, [&](int64_t i) {
        // 1 - u is in (0, 1]: the logarithm is finite.
        return static_cast<T>(-std::log(Acc(1) - detail::uniformSample<T>(s.block(i))) / rate);
      });
    });
  });
  return self;
}

Tensor rand(IntList sizes, DType dtype, Generator *gen) {
  detail::dispatchFloating(dtype, "rand", []<typename T>() {});
  Tensor out = empty(sizes, dtype);
  return uniform_(out, 0.0, 1.0, gen);
}

Tensor randn(IntList sizes, DType dtype, Generator *gen) {
  detail::dispatchFloating(dtype, "randn", []<typename T>() {});
  Tensor out = empty(sizes, dtype);
  return normal_(out, 0.0, 1.0, gen);
}

Tensor &bernoulli_(Tensor &self, double p, Generator *gen) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "bernoulli_ expects p to be in [0, 1], but got p={}", p);
  return sampleInPlace(self, gen, [&](const Tensor &dst, const PhiloxStream &s) {
    dispatchAll(dst.dtype(), [&]<typename T>() {
      fillContiguous<T>(dst, [&](int64_t i) {
        auto r = s.block(i);
        return convertValue<T>(uniformDouble(r[0], r[1]) < p ? 1 : 0);
      });
    });
  });
}

Tensor &bernoulli_(Tensor &self, const Tensor &p, Generator *gen) {
  KILN_CHECK_KIND(NotImplemented, isFloating(p.dtype()),
                  "bernoulli_: not implemented for probability tensors of dtype '{}' (expected a "
                  "floating point dtype)",
                  dtypeName(p.dtype()));
  Shape b = broadcastShapes(self.sizes(), p.sizes(), "bernoulli_");
  KILN_CHECK(b == self.sizes(),
             "bernoulli_: probability tensor of shape {} cannot be broadcast "
             "to the output shape {}",
             p.shapeStr(), self.shapeStr());
  Tensor probs = p.to(DType::Float64).expand(self.sizes()).contiguous();
  const double *pp = probs.data<double>();
  for (int64_t i = 0, n = probs.numel(); i < n; ++i)
    KILN_CHECK(pp[i] >= 0.0 && pp[i] <= 1.0,
               "bernoulli: expected all probabilities to be in [0, 1], but found {}", pp[i]);
  return sampleInPlace(self, gen, [&](const Tensor &dst, const PhiloxStream &s) {
    dispatchAll(dst.dtype(), [&]<typename T>() {
      fillContiguous<T>(dst, [&](int64_t i) {
        auto r = s.block(i);
        return convertValue<T>(uniformDouble(r[0], r[1]) < pp[i] ? 1 : 0);
      });
    });
  });
}

Tensor bernoulli(const Tensor &probs, Generator *gen) {
  KILN_CHECK_KIND(NotImplemented, isFloating(probs.dtype()),
                  "bernoulli: not implemented for '{}' (expected a floating point tensor of "
                  "probabilities)",
                  dtypeName(probs.dtype()));
  Tensor out = Tensor::empty(probs.sizes(), probs.dtype());
  return bernoulli_(out, probs, gen);
}

Tensor normal(const Tensor &mean, const Tensor &std, Generator *gen) {
  // As in torch, the result takes mean's dtype (std's when mean is a Python number).
  DType dt = mean.isWrappedNumber() ? std.dtype() : mean.dtype();
  KILN_CHECK_KIND(NotImplemented, isFloating(dt),
                  "normal: not implemented for '{}' (the result takes the dtype of mean, or of "
                  "std when mean is a number; got mean {} and std {})",
                  dtypeName(dt), dtypeName(mean.dtype()), dtypeName(std.dtype()));
  Shape shape = broadcastShapes(mean.sizes(), std.sizes(), "normal");
  Tensor sd = std.to(DType::Float64).contiguous();
  const double *sp = sd.data<double>();
  for (int64_t i = 0, n = sd.numel(); i < n; ++i)
    KILN_CHECK(sp[i] >= 0.0, "normal expects all elements of std >= 0.0, but found std {}", sp[i]);
  // Scale and shift in the compute type of the result, then round once.
  DType acc = computeDType(dt);
  Tensor z = randn(shape, acc, gen);
  return add(mul(z, std.to(acc)), mean.to(acc)).to(dt);
}

Tensor dropoutMask(const Tensor &input, double p, Generator *gen) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout probability has to be between 0 and 1, but got {}", p);
  KILN_CHECK(isFloating(input.dtype()),
             "dropout: expected a floating point input, got {} (result type Float can't be cast "
             "to the desired output type {})",
             dtypeName(input.dtype()), dtypeName(input.dtype()));
  // The mask holds 0 or 1 / (1 - p); multiplying (rather than selecting) propagates NaN and inf
  // from dropped elements exactly as torch does.
  const double keep = 1.0 - p;
  const double scale = p < 1.0 ? 1.0 / keep : 0.0;
  Tensor mask = Tensor::empty(input.sizes(), input.dtype());
  sampleInPlace(mask, gen, [&](const Tensor &dst, const PhiloxStream &s) {
    dispatchFloating(dst.dtype(), "dropout", [&]<typename T>() {
      const T kept = static_cast<T>(static_cast<detail::SampleAcc<T>>(scale));
      fillContiguous<T>(dst, [&](int64_t i) {
        auto r = s.block(i);
        return uniformDouble(r[0], r[1]) < keep ? kept : static_cast<T>(0.0f);
      });
    });
  });
  return mask;
}

Tensor dropout(const Tensor &input, double p, bool train, Generator *gen) {
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout probability has to be between 0 and 1, but got {}", p);
  if (!train || p == 0.0)
    return input;
  // The mask is drawn on the host (one Philox stream for every device) and moved to the input.
  return mul(input, dropoutMask(input, p, gen).to(input.device()));
}

Tensor &dropout_(Tensor &input, double p, bool train, Generator *gen) {
  Tensor result = dropout(input, p, train, gen);
  if (!result.isSameAs(input)) {
    copyInto(input, result);
    input.bumpVersion();
  }
  return input;
}

} // namespace kiln::ops

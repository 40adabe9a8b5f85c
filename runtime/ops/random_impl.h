#pragma once
/// Internal helpers of the random ops: the parallel fill of a contiguous tensor from a reserved
/// Philox stream, the in-place wrapper for non-contiguous tensors, and per-dtype conversions of
/// random words into uniform and normal samples. Not part of the public op API.

#include "runtime/copy.h"
#include "runtime/error.h"
#include "runtime/generator.h"
#include "runtime/tensor.h"
#include "runtime/thread_pool.h"

#include <cmath>
#include <numbers>

namespace kiln::ops::detail {

/// A Philox block costs more than an add, so random fills split into smaller chunks.
constexpr int64_t kRandomGrain = 8192;

/// out[i] = f(i) over a contiguous tensor of C++ type T, in parallel. f must depend on i only
/// (through stream.block(i)), so the result is the same for every thread count.
template <typename T, typename F> void fillContiguous(const Tensor &out, F f) {
  T *p = out.data<T>();
  parallelFor(0, out.numel(), kRandomGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      p[i] = f(i);
  });
}

/// Reserves self.numel() counters and runs fill(dst, stream) with dst contiguous: self itself,
/// or a temporary copied back (elements are numbered in row-major order either way).
template <typename Fill> Tensor &sampleInPlace(Tensor &self, Generator *gen, Fill fill) {
  Tensor dst = self.isContiguous() ? self : Tensor::empty(self.sizes(), self.dtype());
  PhiloxStream stream = generatorOrDefault(gen).reserve(static_cast<uint64_t>(dst.numel()));
  if (dst.numel() > 0)
    fill(dst, stream);
  if (!dst.isSameAs(self))
    copyInto(self, dst);
  self.bumpVersion();
  return self;
}

/// Calls fn.template operator()<T>() for a floating dtype; NotImplementedError naming `op`
/// otherwise (torch: "normal_kernel_cpu" not implemented for 'Long').
template <typename Fn> void dispatchFloating(DType t, const char *op, Fn &&fn) {
  switch (t) {
  case DType::Float16:
    return fn.template operator()<Half>();
  case DType::BFloat16:
    return fn.template operator()<BFloat16>();
  case DType::Float32:
    return fn.template operator()<float>();
  case DType::Float64:
    return fn.template operator()<double>();
  default:
    fail(ErrorKind::NotImplemented,
         "{}: not implemented for '{}' (expected a floating point dtype: float16, bfloat16, "
         "float32 or float64)",
         op, dtypeName(t));
  }
}

/// The type samples of T are computed in: double for double, float otherwise.
template <typename T>
using SampleAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// Significand bits of T: a uniform sample with this many bits is exact in T and below 1.
template <typename T>
constexpr int kSignificandBits = std::is_same_v<T, double>  ? 53
                                 : std::is_same_v<T, float> ? 24
                                 : std::is_same_v<T, Half>  ? 11
                                                            : 8;

/// A uniform sample in [0, 1) for elements of type T.
template <typename T> SampleAcc<T> uniformSample(const std::array<uint32_t, 4> &r) {
  if constexpr (std::is_same_v<T, double>)
    return uniformDouble(r[0], r[1]);
  else
    return uniformFloat(r[0], kSignificandBits<T>);
}

/// Standard normal samples per Philox block: Box-Muller turns two uniforms into two normals
/// (cos and sin branches), so a block gives 4 float or 2 double samples.
template <typename T> constexpr int kNormalsPerBlock = std::is_same_v<T, double> ? 2 : 4;

/// Writes kNormalsPerBlock<T> standard normals from one block into z. The first uniform of each
/// pair is kept in (0, 1] so the logarithm stays finite.
template <typename T>
void boxMuller(const std::array<uint32_t, 4> &r, SampleAcc<T> (&z)[kNormalsPerBlock<T>]) {
  using Acc = SampleAcc<T>;
  constexpr Acc kTwoPi = Acc(2) * std::numbers::pi_v<Acc>;
  for (int k = 0; k < kNormalsPerBlock<T> / 2; ++k) {
    Acc u1, u2;
    if constexpr (std::is_same_v<T, double>) {
      u1 = 1.0 - uniformDouble(r[0], r[1]);
      u2 = uniformDouble(r[2], r[3]);
    } else {
      u1 = 1.0f - uniformFloat(r[2 * k]);
      u2 = uniformFloat(r[2 * k + 1]);
    }
    Acc radius = std::sqrt(Acc(-2) * std::log(u1));
    z[2 * k] = radius * std::cos(kTwoPi * u2);
    z[2 * k + 1] = radius * std::sin(kTwoPi * u2);
  }
}

} // namespace kiln::ops::detail

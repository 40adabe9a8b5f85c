// F.normalize: x / max(||x||_p, eps) along one dim. The input is viewed as (outer, D, inner);
// norms of all `inner` positions of one outer index are accumulated together, so the loops run
// over contiguous memory whichever dim is normalized.
#include "runtime/ops/norm.h"

#include "runtime/ops/norm_impl.h"

#include <limits>

namespace kiln::ops {

using namespace detail;

namespace {

enum class PNorm { L2, L1, Inf, NegInf, Zero, General };

PNorm classify(double p) {
  if (p == 2.0)
    return PNorm::L2;
  if (p == 1.0)
    return PNorm::L1;
  if (p == 0.0)
    return PNorm::Zero;
  if (std::isinf(p))
    return p > 0 ? PNorm::Inf : PNorm::NegInf;
  return PNorm::General;
}

template <PNorm K> double initial() {
  return K == PNorm::NegInf ? std::numeric_limits<double>::infinity() : 0.0;
}

template <PNorm K> double combine(double acc, double v, double p) {
  double a = std::fabs(v);
  if constexpr (K == PNorm::L2)
    return acc + a * a;
  else if constexpr (K == PNorm::L1)
    return acc + a;
  else if constexpr (K == PNorm::Inf)
    return std::isnan(a) || a > acc ? a : acc;
  else if constexpr (K == PNorm::NegInf)
    return std::isnan(a) || a < acc ? a : acc;
  else if constexpr (K == PNorm::Zero)
    return acc + (v != 0.0 ? 1.0 : 0.0);
  else
    return acc + std::pow(a, p);
}

template <PNorm K> double finish(double acc, double p) {
  if constexpr (K == PNorm::L2)
    return std::sqrt(acc);
  else if constexpr (K == PNorm::General)
    return std::pow(acc, 1.0 / p);
  else
    return acc;
}

template <PNorm K, typename T>
void normalizeKernel(const T *x, T *y, int64_t outer, int64_t dimSize, int64_t inner, double p,
                     double eps) {
  using A = NormAcc<T>;
  parallelFor(0, outer, rowGrain(dimSize * inner), [&](int64_t o0, int64_t o1) {
    std::vector<double> acc(inner);
    std::vector<A> denom(inner);
    for (int64_t o = o0; o < o1; ++o) {
      const T *xo = x + o * dimSize * inner;
      T *yo = y + o * dimSize * inner;
      std::fill(acc.begin(), acc.end(), initial<K>());
      for (int64_t d = 0; d < dimSize; ++d)
        for (int64_t i = 0; i < inner; ++i)
          acc[i] = combine<K>(acc[i], widen(xo[d * inner + i]), p);
      // torch stores the norm in the input dtype before dividing by it.
      for (int64_t i = 0; i < inner; ++i)
        denom[i] = static_cast<A>(static_cast<T>(std::max(finish<K>(acc[i], p), eps)));
      for (int64_t d = 0; d < dimSize; ++d)
        for (int64_t i = 0; i < inner; ++i)
          yo[d * inner + i] = static_cast<T>(static_cast<A>(xo[d * inner + i]) / denom[i]);
    }
  });
}

} // namespace

Tensor normalize(const Tensor &input, double p, int64_t dim, double eps) {
  const char *op = "normalize";
  KILN_CHECK(isFloating(input.dtype()),
             "{}: expected a floating point tensor as input (the p-norm is only defined for "
             "floating types), but got {}",
             op, dtypeName(input.dtype()));
  int64_t d = wrapDim(dim, input.dim(), op);
  int64_t outer = 1, inner = 1;
  int64_t dimSize = input.dim() == 0 ? 1 : input.size(d);
  for (int64_t k = 0; k < d && k < input.dim(); ++k)
    outer *= input.size(k);
  for (int64_t k = d + 1; k < input.dim(); ++k)
    inner *= input.size(k);
  Tensor out = Tensor::empty(input.sizes(), input.dtype(), input.device());
  if (out.numel() == 0)
    return out;
  Tensor x = input.contiguous();
  dispatchNormFloat(op, input.dtype(), [&]<typename T>() {
    const T *xd = x.data<T>();
    T *yd = out.data<T>();
    switch (classify(p)) {
    case PNorm::L2:
      return normalizeKernel<PNorm::L2>(xd, yd, outer, dimSize, inner, p, eps);
    case PNorm::L1:
      return normalizeKernel<PNorm::L1>(xd, yd, outer, dimSize, inner, p, eps);
    case PNorm::Inf:
      return normalizeKernel<PNorm::Inf>(xd, yd, outer, dimSize, inner, p, eps);
    case PNorm::NegInf:
      return normalizeKernel<PNorm::NegInf>(xd, yd, outer, dimSize, inner, p, eps);
    case PNorm::Zero:
      return normalizeKernel<PNorm::Zero>(xd, yd, outer, dimSize, inner, p, eps);
    case PNorm::General:
      return normalizeKernel<PNorm::General>(xd, yd, outer, dimSize, inner, p, eps);
    }
  });
  return out;
}

} // namespace kiln::ops

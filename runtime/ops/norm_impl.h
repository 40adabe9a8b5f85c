#pragma once
/// Internal helpers shared by the normalization kernels (layer/rms/group/batch/instance norm):
/// floating-dtype dispatch, parameter checks and the vectorizable row primitives. Statistics are
/// accumulated in double with several independent lanes, so long rows stay accurate and the
/// compiler can still vectorize the sums.

#include "runtime/error.h"
#include "runtime/tensor.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <type_traits>
#include <vector>

namespace kiln::ops::detail {

/// The type a normalization kernel computes element values in: double for double, else float
/// (float16/bfloat16 are widened once per element and rounded once on store).
template <typename T> using NormAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

/// Calls fn.template operator()<T>() for a floating input dtype; other dtypes raise
/// NotImplementedError naming `op`, as torch does for its floating-only kernels.
template <typename Fn> decltype(auto) dispatchNormFloat(const char *op, DType t, Fn &&fn) {
  switch (t) {
  case DType::Float32:
    return fn.template operator()<float>();
  case DType::Float64:
    return fn.template operator()<double>();
  case DType::Float16:
    return fn.template operator()<Half>();
  case DType::BFloat16:
    return fn.template operator()<BFloat16>();
  default:
    fail(ErrorKind::NotImplemented,
         "{}: not implemented for dtype {}: expected a floating point input (float16, bfloat16, "
         "float32 or float64)",
         op, dtypeName(t));
  }
}

/// Rejects non-floating inputs up front (before parameter checks) with torch's error kind.
inline void checkFloatInput(const char *op, const Tensor &input) {
  KILN_CHECK_KIND(NotImplemented, isFloating(input.dtype()),
                  "{}: not implemented for dtype {}: expected a floating point input (float16, "
                  "bfloat16, float32 or float64)",
                  op, dtypeName(input.dtype()));
}

/// A stored element as double (float16/bfloat16 go through their float conversion).
template <typename T> inline double widen(T v) {
  if constexpr (std::is_same_v<T, double>)
    return v;
  else
    return static_cast<double>(static_cast<float>(v));
}

/// Sum of the n values at x, in double with 8 independent lanes (vectorizable, and a shorter
/// rounding chain than one running sum).
template <typename T> double sumWide(const T *x, int64_t n) {
  double lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k)
      lanes[k] += widen(x[i + k]);
  double s = 0;
  for (; i < n; ++i)
    s += widen(x[i]);
  for (double l : lanes)
    s += l;
  return s;
}

/// Sum of (x - center)^2 over n values (the second pass of a two-pass variance).
template <typename T> double sumSqDevWide(const T *x, int64_t n, double center) {
  double lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      double d = widen(x[i + k]) - center;
      lanes[k] += d * d;
    }
  double s = 0;
  for (; i < n; ++i) {
    double d = widen(x[i]) - center;
    s += d * d;
  }
  for (double l : lanes)
    s += l;
  return s;
}

/// y[i] = (x[i] - center) * scale + shift: the per-channel affine every norm ends with.
/// Subtracting the center first avoids the cancellation of x * scale - mean * scale when the
/// mean is large compared with the spread.
template <typename T>
void affineRun(const T *x, T *y, int64_t n, NormAcc<T> center, NormAcc<T> scale, NormAcc<T> shift) {
  using A = NormAcc<T>;
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<T>((static_cast<A>(x[i]) - center) * scale + shift);
}

/// Per-parameter sums (a gradient accumulated in double) as a tensor of `sizes` and `dtype`.
inline Tensor fromDoubles(const std::vector<double> &v, IntList sizes, DType dtype) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::Float64);
  std::copy(v.begin(), v.end(), t.data<double>());
  return t.to(dtype).view(sizes);
}

/// An optional parameter as a contiguous tensor of the compute type A (undefined stays
/// undefined); parameters are small (one value per channel or per normalized element).
inline Tensor paramAs(const Tensor &p, DType acc) {
  return p.defined() ? p.to(acc).contiguous() : Tensor();
}
template <typename A> const A *paramData(const Tensor &p) {
  return p.defined() ? p.data<A>() : nullptr;
}

/// torch's CPU rule for normalization parameters (weight, bias, running stats): each has the
/// input's dtype, or float32 when the input is float16/bfloat16, and all of them agree.
inline void checkParamDTypes(const char *op, const Tensor &input,
                             std::initializer_list<std::pair<const char *, Tensor>> params) {
  const char *firstName = nullptr;
  DType first = input.dtype();
  for (const auto &[name, p] : params) {
    if (!p.defined())
      continue;
    bool ok = p.dtype() == input.dtype() ||
              (isReducedFloat(input.dtype()) && p.dtype() == DType::Float32);
    KILN_CHECK(ok, "{}: mixed dtype (CPU): expected {} to have dtype {}{}, but got {}", op, name,
               dtypeName(input.dtype()), isReducedFloat(input.dtype()) ? " or float32" : "",
               dtypeName(p.dtype()));
    if (firstName)
      KILN_CHECK(p.dtype() == first,
                 "{}: mixed dtype (CPU): all parameters must share one dtype, but {} is {} and {} "
                 "is {}",
                 op, firstName, dtypeName(first), name, dtypeName(p.dtype()));
    firstName = name;
    first = p.dtype();
  }
}

/// Checks a per-channel parameter holds exactly `channels` elements (torch's batch_norm wording).
inline void checkChannelParam(const char *op, const char *name, const Tensor &p, int64_t channels) {
  if (p.defined())
    KILN_CHECK(p.numel() == channels, "{}: {} should contain {} elements not {} (shape {})", op,
               name, channels, p.numel(), p.shapeStr());
}

/// The (N, C, HW) geometry of a channel-first input of at least two dims.
struct ChannelGeom {
  int64_t n, c, hw;
};

inline ChannelGeom channelGeom(const char *op, const Tensor &input) {
  KILN_CHECK(input.dim() >= 2,
             "{}: expected at least 2 dimensions for input tensor (N, C, *), but received {} "
             "(input of shape {})",
             op, input.dim(), input.shapeStr());
  int64_t hw = 1;
  for (int64_t d = 2; d < input.dim(); ++d)
    hw *= input.size(d);
  return {input.size(0), input.size(1), hw};
}

/// The rows of a row-wise kernel each chunk of parallelFor gets: about 32K elements of work.
inline int64_t rowGrain(int64_t rowLen) {
  return std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(rowLen, 1));
}

/// running = (1 - momentum) * running + momentum * stat, in place (any float dtype and strides);
/// computed in double and rounded once into the running tensor's dtype.
inline void updateRunningStat(const Tensor &running, const std::vector<double> &stat,
                              double momentum) {
  Tensor old = running.to(DType::Float64).contiguous();
  Tensor upd = Tensor::empty({static_cast<int64_t>(stat.size())}, DType::Float64);
  const double *o = old.data<double>();
  double *u = upd.data<double>();
  for (size_t c = 0; c < stat.size(); ++c)
    u[c] = (1.0 - momentum) * o[c] + momentum * stat[c];
  Tensor dst = running;
  dst.copy_(upd.view(running.sizes()));
}

} // namespace kiln::ops::detail

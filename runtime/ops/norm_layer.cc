// layer_norm and rms_norm: row-wise normalization over the trailing dims, one fused pass per row
// (statistics, then normalize + affine while the row is still in cache).
#include "runtime/device_ops.h"
#include "runtime/ops/norm.h"

#include <fmt/ranges.h>

#include "runtime/ops/norm_impl.h"

#include <limits>

namespace kiln::ops {

using namespace detail;

namespace {

std::string trailingPattern(IntList normalizedShape) {
  std::string s = "[*";
  for (int64_t d : normalizedShape)
    s += ", " + std::to_string(d);
  return s + "]";
}

/// Checks the input ends with normalizedShape; returns the row length (its element count).
int64_t checkTrailing(const char *op, const Tensor &input, IntList normalizedShape) {
  KILN_CHECK(!normalizedShape.empty(),
             "{}: expected normalized_shape to be at least 1-dimensional, i.e., containing at "
             "least one element, but got normalized_shape = []",
             op);
  const int64_t nd = static_cast<int64_t>(normalizedShape.size());
  bool ok = input.dim() >= nd;
  for (int64_t i = 0; ok && i < nd; ++i)
    ok = input.size(input.dim() - nd + i) == normalizedShape[i];
  KILN_CHECK(ok,
             "{}: given normalized_shape={}, expected input with shape {}, but got input of size "
             "{}",
             op, shapeToString(normalizedShape), trailingPattern(normalizedShape),
             input.shapeStr());
  return numelOf(normalizedShape);
}

void checkElementParam(const char *op, const char *name, const Tensor &p, IntList normalizedShape) {
  if (!p.defined())
    return;
  bool same = p.dim() == static_cast<int64_t>(normalizedShape.size()) &&
              std::equal(normalizedShape.begin(), normalizedShape.end(), p.sizes().begin());
  KILN_CHECK(same,
             "{}: expected {} to be of same shape as normalized_shape, but got {} of shape {} and "
             "normalized_shape = {}",
             op, name, name, p.shapeStr(), shapeToString(normalizedShape));
}

/// One row of layer_norm: y = (x - mean) * rstd * w + b, with w/b known at compile time.
template <bool HasW, bool HasB, typename T, typename A = NormAcc<T>>
void layerNormApply(const T *x, T *y, int64_t n, A mean, A rstd, const A *w, const A *b) {
  for (int64_t i = 0; i < n; ++i) {
    A v = (static_cast<A>(x[i]) - mean) * rstd;
    if constexpr (HasW)
      v *= w[i];
    if constexpr (HasB)
      v += b[i];
    y[i] = static_cast<T>(v);
  }
}

template <typename T>
void layerNormKernel(const Tensor &x, const Tensor &y, int64_t n, const Tensor &weight,
                     const Tensor &bias, double eps) {
  using A = NormAcc<T>;
  const int64_t rows = x.numel() / n;
  const T *xd = x.data<T>();
  T *yd = y.data<T>();
  const A *w = paramData<A>(weight);
  const A *b = paramData<A>(bias);
  parallelFor(0, rows, rowGrain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T *xr = xd + r * n;
      T *yr = yd + r * n;
      double mean = sumWide(xr, n) / static_cast<double>(n);
      double var = sumSqDevWide(xr, n, mean) / static_cast<double>(n);
      A rstd = static_cast<A>(1.0 / std::sqrt(var + eps));
      A m = static_cast<A>(mean);
      if (w && b)
        layerNormApply<true, true>(xr, yr, n, m, rstd, w, b);
      else if (w)
        layerNormApply<true, false>(xr, yr, n, m, rstd, w, b);
      else if (b)
        layerNormApply<false, true>(xr, yr, n, m, rstd, w, b);
      else
        affineRun(xr, yr, n, m, rstd, A(0));
    }
  });
}

template <typename T>
void rmsNormKernel(const Tensor &x, const Tensor &y, int64_t n, const Tensor &weight, double eps) {
  using A = NormAcc<T>;
  const int64_t rows = x.numel() / n;
  const T *xd = x.data<T>();
  T *yd = y.data<T>();
  const A *w = paramData<A>(weight);
  parallelFor(0, rows, rowGrain(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T *xr = xd + r * n;
      T *yr = yd + r * n;
      A scale = static_cast<A>(1.0 / std::sqrt(sumSqDevWide(xr, n, 0.0) / n + eps));
      if (!w) {
        affineRun(xr, yr, n, A(0), scale, A(0));
        continue;
      }
      // torch rounds x * rsqrt(...) to the input dtype before applying the weight.
      for (int64_t i = 0; i < n; ++i)
        yr[i] =
            static_cast<T>(static_cast<A>(static_cast<T>(static_cast<A>(xr[i]) * scale)) * w[i]);
    }
  });
}

} // namespace

Tensor layerNorm(const Tensor &input, IntList normalizedShape, const Tensor &weight,
                 const Tensor &bias, double eps) {
  const char *op = "layer_norm";
  if (onDevice({&input, &weight, &bias})) {
    KILN_CHECK_KIND(NotImplemented, weight.defined() == bias.defined(),
                    "kiln: layer_norm with a weight but no bias (or the reverse) has no CUDA "
                    "implementation yet");
    std::string attrs =
        fmt::format("normalized_shape = [{}], eps = {}", fmt::join(normalizedShape, ", "), eps);
    return weight.defined() ? deviceOp(op, {input, weight, bias}, attrs)
                            : deviceOp(op, {input}, attrs);
  }
  int64_t n = checkTrailing(op, input, normalizedShape);
  checkElementParam(op, "weight", weight, normalizedShape);
  checkElementParam(op, "bias", bias, normalizedShape);
  Tensor out = Tensor::empty(input.sizes(), input.dtype(), input.device());
  dispatchNormFloat(op, input.dtype(), [&]<typename T>() {
    checkParamDTypes(op, input, {{"weight", weight}, {"bias", bias}});
    if (out.numel() == 0)
      return;
    DType acc = dtypeOf<NormAcc<T>>();
    layerNormKernel<T>(input.contiguous(), out, n, paramAs(weight, acc), paramAs(bias, acc), eps);
  });
  return out;
}

Tensor rmsNorm(const Tensor &input, IntList normalizedShape, const Tensor &weight,
               std::optional<double> eps) {
  const char *op = "rms_norm";
  int64_t n = checkTrailing(op, input, normalizedShape);
  checkElementParam(op, "weight", weight, normalizedShape);
  Tensor out = Tensor::empty(input.sizes(), input.dtype(), input.device());
  dispatchNormFloat(op, input.dtype(), [&]<typename T>() {
    using A = NormAcc<T>;
    if (weight.defined())
      KILN_CHECK_KIND(Type, isFloating(weight.dtype()),
                      "{}: expected a floating point weight, but got {}", op,
                      dtypeName(weight.dtype()));
    if (out.numel() == 0)
      return;
    double e = eps.value_or(std::numeric_limits<A>::epsilon());
    rmsNormKernel<T>(input.contiguous(), out, n, paramAs(weight, dtypeOf<A>()), e);
  });
  return out;
}

} // namespace kiln::ops

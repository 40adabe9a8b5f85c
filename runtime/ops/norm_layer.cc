// layer_norm and rms_norm: row-wise normalization over the trailing dims, one fused pass per row
// (statistics, then normalize + affine while the row is still in cache).
#include "runtime/device_ops.h"
#include "runtime/ops/norm.h"

#include <fmt/ranges.h>

#include "runtime/ops/norm_impl.h"

#include <limits>
#include <mutex>
#include <utility>
#include <vector>

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

/// Sums of a[i] and a[i] * b[i] in double with 8 independent lanes (vectorizable).
template <typename A> std::pair<double, double> sumAndDot(const A *a, const A *b, int64_t n) {
  double s[8] = {}, d[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) {
      s[k] += a[i + k];
      d[k] += static_cast<double>(a[i + k]) * b[i + k];
    }
  double ss = 0, dd = 0;
  for (; i < n; ++i) {
    ss += a[i];
    dd += static_cast<double>(a[i]) * b[i];
  }
  for (int k = 0; k < 8; ++k) {
    ss += s[k];
    dd += d[k];
  }
  return {ss, dd};
}

/// One row's share of layer_norm's backward: dx = rstd * (g w - mean(g w) - xhat mean(g w xhat)),
/// and g xhat, g added into this chunk's dw, db. `xhat` and `gw` are scratch rows.
template <bool HasW, typename T, typename A = NormAcc<T>>
void layerNormBackwardRow(const T *x, const T *g, T *dx, int64_t n, double eps, const A *w,
                          double *dw, double *db, A *xhat, A *gw) {
  double mean = sumWide(x, n) / static_cast<double>(n);
  A r = static_cast<A>(1.0 / std::sqrt(sumSqDevWide(x, n, mean) / static_cast<double>(n) + eps));
  A m = static_cast<A>(mean);
  for (int64_t i = 0; i < n; ++i) {
    xhat[i] = (static_cast<A>(x[i]) - m) * r;
    if constexpr (HasW)
      gw[i] = static_cast<A>(g[i]) * w[i];
    else
      gw[i] = static_cast<A>(g[i]);
  }
  if (dx) {
    auto [s1, s2] = sumAndDot(gw, xhat, n);
    A m1 = static_cast<A>(s1 / static_cast<double>(n));
    A m2 = static_cast<A>(s2 / static_cast<double>(n));
    for (int64_t i = 0; i < n; ++i)
      dx[i] = static_cast<T>(r * (gw[i] - m1 - xhat[i] * m2));
  }
  if (dw)
    for (int64_t i = 0; i < n; ++i)
      dw[i] += static_cast<double>(static_cast<A>(g[i]) * xhat[i]);
  if (db)
    for (int64_t i = 0; i < n; ++i)
      db[i] += static_cast<double>(g[i]);
}

template <typename T>
void layerNormBackwardKernel(const Tensor &g, const Tensor &x, int64_t n, const Tensor &weight,
                             double eps, Tensor *dx, std::vector<double> *dw,
                             std::vector<double> *db) {
  using A = NormAcc<T>;
  const int64_t rows = x.numel() / n;
  const T *xd = x.data<T>(), *gd = g.data<T>();
  T *dxd = dx ? dx->data<T>() : nullptr;
  const A *w = paramData<A>(weight);
  std::mutex merge;
  parallelFor(0, rows, rowGrain(n), [&](int64_t r0, int64_t r1) {
    // Each chunk sums its rows' parameter gradients, then adds them in once.
    std::vector<double> cw(dw ? n : 0), cb(db ? n : 0);
    std::vector<A> xhat(n), gw(n);
    for (int64_t r = r0; r < r1; ++r) {
      T *dxr = dxd ? dxd + r * n : nullptr;
      double *pw = dw ? cw.data() : nullptr, *pb = db ? cb.data() : nullptr;
      if (w)
        layerNormBackwardRow<true, T>(xd + r * n, gd + r * n, dxr, n, eps, w, pw, pb, xhat.data(),
                                      gw.data());
      else
        layerNormBackwardRow<false, T>(xd + r * n, gd + r * n, dxr, n, eps, w, pw, pb, xhat.data(),
                                       gw.data());
    }
    std::lock_guard<std::mutex> lock(merge);
    for (int64_t i = 0; dw && i < n; ++i)
      (*dw)[i] += cw[i];
    for (int64_t i = 0; db && i < n; ++i)
      (*db)[i] += cb[i];
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

LayerNormGrads layerNormBackward(const Tensor &grad, const Tensor &input, IntList normalizedShape,
                                 const Tensor &weight, double eps, bool needInput, bool needWeight,
                                 bool needBias) {
  const char *op = "layer_norm_backward";
  KILN_CHECK_KIND(NotImplemented, input.isCpu() && grad.isCpu(),
                  "{}: the fused kernel runs on CPU tensors", op);
  int64_t n = checkTrailing(op, input, normalizedShape);
  KILN_CHECK(grad.sizes() == input.sizes(), "{}: grad of shape {} for an input of shape {}", op,
             grad.shapeStr(), input.shapeStr());
  LayerNormGrads out;
  std::vector<double> dw(needWeight && weight.defined() ? n : 0), db(needBias ? n : 0);
  if (needInput)
    out.input = Tensor::empty(input.sizes(), input.dtype());
  dispatchNormFloat(op, input.dtype(), [&]<typename T>() {
    if (input.numel() == 0)
      return;
    layerNormBackwardKernel<T>(grad.to(input.dtype()).contiguous(), input.contiguous(), n,
                               paramAs(weight, dtypeOf<NormAcc<T>>()), eps,
                               needInput ? &out.input : nullptr, dw.empty() ? nullptr : &dw,
                               db.empty() ? nullptr : &db);
  });
  if (!dw.empty())
    out.weight = fromDoubles(dw, normalizedShape, weight.dtype());
  if (!db.empty())
    out.bias = fromDoubles(db, normalizedShape, input.dtype());
  return out;
}

} // namespace kiln::ops

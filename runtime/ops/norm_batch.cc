// batch_norm: per-channel statistics over the batch and spatial dims of an (N, C, *) input, and
// the running-statistics update torch's training mode performs.
#include "runtime/device_ops.h"
#include "runtime/ops/norm.h"

#include "runtime/ops/norm_impl.h"

#include <optional>
#include <vector>

namespace kiln::ops {

using namespace detail;

namespace {

/// Mean and biased variance of each channel of x (N, C, HW contiguous), two passes in double.
template <typename T>
void channelStats(const T *x, ChannelGeom g, std::vector<double> &mean, std::vector<double> &var) {
  const double count = static_cast<double>(g.n * g.hw);
  if (g.hw == 1) {
    // (N, C): accumulate whole rows so the inner loop runs over contiguous channels.
    std::fill(mean.begin(), mean.end(), 0.0);
    std::fill(var.begin(), var.end(), 0.0);
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t c = 0; c < g.c; ++c)
        mean[c] += widen(x[n * g.c + c]);
    for (int64_t c = 0; c < g.c; ++c)
      mean[c] /= count;
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t c = 0; c < g.c; ++c) {
        double d = widen(x[n * g.c + c]) - mean[c];
        var[c] += d * d;
      }
    for (int64_t c = 0; c < g.c; ++c)
      var[c] /= count;
    return;
  }
  parallelFor(0, g.c, rowGrain(g.n * g.hw), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0;
      for (int64_t n = 0; n < g.n; ++n)
        s += sumWide(x + (n * g.c + c) * g.hw, g.hw);
      double m = s / count;
      double q = 0;
      for (int64_t n = 0; n < g.n; ++n)
        q += sumSqDevWide(x + (n * g.c + c) * g.hw, g.hw, m);
      mean[c] = m;
      var[c] = q / count;
    }
  });
}

/// Per-channel affine of a batch norm: y = (x - center[c]) * scale[c] + shift[c].
template <typename T> struct ChannelAffine {
  std::vector<NormAcc<T>> center, scale, shift;
};

/// Applies `aff` to every channel of x (N, C, HW contiguous).
template <typename T>
void channelAffine(const T *x, T *y, ChannelGeom g, const ChannelAffine<T> &aff) {
  using A = NormAcc<T>;
  if (g.hw == 1) {
    const A *ce = aff.center.data();
    const A *sc = aff.scale.data();
    const A *sh = aff.shift.data();
    parallelFor(0, g.n, rowGrain(g.c), [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n)
        for (int64_t c = 0; c < g.c; ++c)
          y[n * g.c + c] = static_cast<T>((static_cast<A>(x[n * g.c + c]) - ce[c]) * sc[c] + sh[c]);
    });
    return;
  }
  parallelFor(0, g.n * g.c, rowGrain(g.hw), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = r % g.c;
      affineRun(x + r * g.hw, y + r * g.hw, g.hw, aff.center[c], aff.scale[c], aff.shift[c]);
    }
  });
}

std::vector<double> toDoubles(const Tensor &t) {
  Tensor d = t.to(DType::Float64).contiguous();
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

template <typename T>
void batchNormKernel(const Tensor &x, const Tensor &y, ChannelGeom g, const Tensor &weight,
                     const Tensor &bias, const Tensor &runningMean, const Tensor &runningVar,
                     bool training, double momentum, double eps) {
  using A = NormAcc<T>;
  std::vector<double> mean(g.c), var(g.c);
  if (training) {
    channelStats(x.data<T>(), g, mean, var);
    if (runningMean.defined()) {
      double count = static_cast<double>(g.n * g.hw);
      std::vector<double> unbiased(g.c);
      for (int64_t c = 0; c < g.c; ++c)
        unbiased[c] = var[c] * count / (count - 1.0);
      updateRunningStat(runningMean, mean, momentum);
      updateRunningStat(runningVar, unbiased, momentum);
    }
  } else {
    mean = toDoubles(runningMean);
    var = toDoubles(runningVar);
  }
  std::vector<double> w = weight.defined() ? toDoubles(weight) : std::vector<double>(g.c, 1.0);
  std::vector<double> b = bias.defined() ? toDoubles(bias) : std::vector<double>(g.c, 0.0);
  ChannelAffine<T> aff{std::vector<A>(g.c), std::vector<A>(g.c), std::vector<A>(g.c)};
  for (int64_t c = 0; c < g.c; ++c) {
    aff.center[c] = static_cast<A>(mean[c]);
    aff.scale[c] = static_cast<A>(w[c] / std::sqrt(var[c] + eps));
    aff.shift[c] = static_cast<A>(b[c]);
  }
  channelAffine(x.data<T>(), y.data<T>(), g, aff);
}

/// Sums over one contiguous run of a channel: of g, and of g * (x - mean), in double lanes.
template <typename T>
void gradSums(const T *g, const T *x, int64_t len, double mean, double &sg, double &sgx) {
  double a[8] = {}, b[8] = {};
  int64_t i = 0;
  for (; i + 8 <= len; i += 8)
    for (int k = 0; k < 8; ++k) {
      double gv = widen(g[i + k]);
      a[k] += gv;
      b[k] += gv * (widen(x[i + k]) - mean);
    }
  for (; i < len; ++i) {
    double gv = widen(g[i]);
    sg += gv;
    sgx += gv * (widen(x[i]) - mean);
  }
  for (int k = 0; k < 8; ++k) {
    sg += a[k];
    sgx += b[k];
  }
}

/// batch_norm's gradients per channel (parallel over channels): the statistics, then the sums
/// of g and g * (x - mean), then dx in one more pass.
template <typename T>
void batchNormBackwardKernel(const T *g, const T *x, ChannelGeom geo, const std::vector<double> &w,
                             const std::vector<double> *runMean, const std::vector<double> *runVar,
                             double eps, T *dx, std::vector<double> &dw, std::vector<double> &db) {
  using A = NormAcc<T>;
  const double count = static_cast<double>(geo.n * geo.hw);
  parallelFor(0, geo.c, rowGrain(geo.n * geo.hw), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      auto run = [&](int64_t n) { return (n * geo.c + c) * geo.hw; };
      double mean, var;
      if (runMean) {
        mean = (*runMean)[c];
        var = (*runVar)[c];
      } else {
        double s = 0, q = 0;
        for (int64_t n = 0; n < geo.n; ++n)
          s += sumWide(x + run(n), geo.hw);
        mean = s / count;
        for (int64_t n = 0; n < geo.n; ++n)
          q += sumSqDevWide(x + run(n), geo.hw, mean);
        var = q / count;
      }
      const double rstd = 1.0 / std::sqrt(var + eps);
      double sg = 0, sgx = 0;
      for (int64_t n = 0; n < geo.n; ++n)
        gradSums(g + run(n), x + run(n), geo.hw, mean, sg, sgx);
      dw[c] = sgx * rstd;
      db[c] = sg;
      if (!dx)
        continue;
      // Batch statistics: dx = w rstd (g - mean(g) - (x - mean) rstd^2 mean(g (x - mean))).
      const A scale = static_cast<A>(w[c] * rstd);
      const A mg = runMean ? A(0) : static_cast<A>(sg / count);
      const A k = runMean ? A(0) : static_cast<A>(rstd * rstd * sgx / count);
      const A m = static_cast<A>(mean);
      for (int64_t n = 0; n < geo.n; ++n) {
        const T *gr = g + run(n), *xr = x + run(n);
        T *dr = dx + run(n);
        for (int64_t i = 0; i < geo.hw; ++i)
          dr[i] = static_cast<T>(scale *
                                 (static_cast<A>(gr[i]) - mg - (static_cast<A>(xr[i]) - m) * k));
      }
    }
  });
}

} // namespace

Tensor batchNorm(const Tensor &input, const Tensor &weight, const Tensor &bias,
                 const Tensor &runningMean, const Tensor &runningVar, bool training,
                 double momentum, double eps) {
  const char *op = "batch_norm";
  if (onDevice({&input, &weight, &bias, &runningMean, &runningVar})) {
    KILN_CHECK_KIND(NotImplemented,
                    !training && runningMean.defined() && runningVar.defined() &&
                        (weight.defined() || !bias.defined()),
                    "kiln: batch_norm in training mode (or without running statistics) has no "
                    "CUDA implementation yet");
    std::vector<DeviceOperand> operands{input, runningMean, runningVar};
    if (weight.defined())
      operands.emplace_back(weight);
    if (bias.defined())
      operands.emplace_back(bias);
    return runDeviceOp(op, operands, fmt::format("eps = {}", eps)).at(0);
  }
  ChannelGeom g = channelGeom(op, input);
  checkFloatInput(op, input);
  KILN_CHECK_KIND(Value, runningMean.defined() == runningVar.defined(),
                  "{}: running_mean and running_var must either both be None or neither be None",
                  op);
  KILN_CHECK(training || runningMean.defined(),
             "{}: running_mean and running_var must be defined in evaluation mode "
             "(training=False)",
             op);
  checkChannelParam(op, "weight", weight, g.c);
  checkChannelParam(op, "bias", bias, g.c);
  checkChannelParam(op, "running_mean", runningMean, g.c);
  checkChannelParam(op, "running_var", runningVar, g.c);
  checkParamDTypes(op, input,
                   {{"weight", weight},
                    {"bias", bias},
                    {"running_mean", runningMean},
                    {"running_var", runningVar}});
  Tensor out = Tensor::empty(input.sizes(), input.dtype(), input.device());
  if (input.numel() == 0)
    return out; // no statistics to take: running stats stay as they are, like torch
  dispatchNormFloat(op, input.dtype(), [&]<typename T>() {
    batchNormKernel<T>(input.contiguous(), out, g, weight, bias, runningMean, runningVar, training,
                       momentum, eps);
  });
  return out;
}

BatchNormGrads batchNormBackward(const Tensor &grad, const Tensor &input, const Tensor &weight,
                                 const Tensor &runningMean, const Tensor &runningVar, double eps,
                                 bool needInput, bool needWeight, bool needBias) {
  const char *op = "batch_norm_backward";
  KILN_CHECK_KIND(NotImplemented, input.isCpu() && grad.isCpu(),
                  "{}: the fused kernel runs on CPU tensors", op);
  KILN_CHECK(grad.sizes() == input.sizes(), "{}: grad of shape {} for an input of shape {}", op,
             grad.shapeStr(), input.shapeStr());
  ChannelGeom geo = channelGeom(op, input);
  std::vector<double> w = weight.defined() ? toDoubles(weight) : std::vector<double>(geo.c, 1.0);
  std::vector<double> dw(geo.c), db(geo.c);
  std::optional<std::vector<double>> rm, rv;
  if (runningMean.defined()) {
    rm = toDoubles(runningMean);
    rv = toDoubles(runningVar);
  }
  BatchNormGrads out;
  if (needInput)
    out.input = Tensor::empty(input.sizes(), input.dtype());
  dispatchNormFloat(op, input.dtype(), [&]<typename T>() {
    if (input.numel() == 0)
      return;
    Tensor x = input.contiguous(), g = grad.to(input.dtype()).contiguous();
    batchNormBackwardKernel<T>(g.data<T>(), x.data<T>(), geo, w, rm ? &*rm : nullptr,
                               rv ? &*rv : nullptr, eps, needInput ? out.input.data<T>() : nullptr,
                               dw, db);
  });
  if (needWeight && weight.defined())
    out.weight = fromDoubles(dw, {geo.c}, weight.dtype());
  if (needBias)
    out.bias = fromDoubles(db, {geo.c}, input.dtype());
  return out;
}

} // namespace kiln::ops

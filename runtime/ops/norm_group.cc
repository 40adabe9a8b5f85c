// group_norm and instance_norm: statistics per (sample, group of channels), which are contiguous
// rows of the (N, C, *) input, and a per-channel affine applied to each channel's spatial run.
#include "runtime/ops/norm.h"

#include "runtime/ops/norm_impl.h"

namespace kiln::ops {

using namespace detail;

namespace {

/// Normalizes each (sample, group) row of x (N, C, HW contiguous) into y and applies the
/// per-channel affine. Writes each row's mean and biased variance when `means` is non-null.
template <typename T>
void groupNormKernel(const Tensor &x, const Tensor &y, ChannelGeom g, int64_t groups,
                     const Tensor &weight, const Tensor &bias, double eps, double *means,
                     double *vars) {
  using A = NormAcc<T>;
  const int64_t cpg = g.c / groups;
  const int64_t rowLen = cpg * g.hw;
  const T *xd = x.data<T>();
  T *yd = y.data<T>();
  const A *w = paramData<A>(weight);
  const A *b = paramData<A>(bias);
  parallelFor(0, g.n * groups, rowGrain(rowLen), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T *xr = xd + r * rowLen;
      T *yr = yd + r * rowLen;
      double mean = rowLen ? sumWide(xr, rowLen) / rowLen : 0.0;
      double var = rowLen ? sumSqDevWide(xr, rowLen, mean) / rowLen : 0.0;
      if (means) {
        means[r] = mean;
        vars[r] = var;
      }
      double rstd = 1.0 / std::sqrt(var + eps);
      const int64_t c0 = (r % groups) * cpg;
      for (int64_t k = 0; k < cpg; ++k) {
        A scale = static_cast<A>(rstd * (w ? static_cast<double>(w[c0 + k]) : 1.0));
        A shift = b ? b[c0 + k] : A(0);
        affineRun(xr + k * g.hw, yr + k * g.hw, g.hw, static_cast<A>(mean), scale, shift);
      }
    }
  });
}

void checkGroupParam(const char *op, const char *name, const Tensor &p, const Tensor &input) {
  if (p.defined())
    KILN_CHECK(p.dim() == 1 && p.numel() == input.size(1),
               "{}: expected {} to be a vector of size equal to the number of channels in input, "
               "but got {} of shape {} and input of shape {}",
               op, name, name, p.shapeStr(), input.shapeStr());
}

/// Runs the group kernel for any float dtype; `means`/`vars` as in groupNormKernel.
Tensor runGroupNorm(const char *op, const Tensor &input, ChannelGeom g, int64_t groups,
                    const Tensor &weight, const Tensor &bias, double eps, double *means,
                    double *vars) {
  Tensor out = Tensor::empty(input.sizes(), input.dtype(), input.device());
  dispatchNormFloat(op, input.dtype(), [&]<typename T>() {
    checkParamDTypes(op, input, {{"weight", weight}, {"bias", bias}});
    if (g.n * g.c == 0)
      return;
    DType acc = dtypeOf<NormAcc<T>>();
    groupNormKernel<T>(input.contiguous(), out, g, groups, paramAs(weight, acc), paramAs(bias, acc),
                       eps, means, vars);
  });
  return out;
}

} // namespace

Tensor groupNorm(const Tensor &input, int64_t numGroups, const Tensor &weight, const Tensor &bias,
                 double eps) {
  const char *op = "group_norm";
  ChannelGeom g = channelGeom(op, input);
  checkFloatInput(op, input);
  KILN_CHECK_KIND(Value, numGroups > 0, "{}: num_groups must be positive, but got {}", op,
                  numGroups);
  KILN_CHECK(g.c % numGroups == 0,
             "{}: expected number of channels in input to be divisible by num_groups, but got "
             "input of shape {} and num_groups={}",
             op, input.shapeStr(), numGroups);
  checkGroupParam(op, "weight", weight, input);
  checkGroupParam(op, "bias", bias, input);
  return runGroupNorm(op, input, g, numGroups, weight, bias, eps, nullptr, nullptr);
}

Tensor instanceNorm(const Tensor &input, const Tensor &weight, const Tensor &bias,
                    const Tensor &runningMean, const Tensor &runningVar, bool useInputStats,
                    double momentum, double eps) {
  const char *op = "instance_norm";
  ChannelGeom g = channelGeom(op, input);
  checkFloatInput(op, input);
  KILN_CHECK(runningMean.defined() == runningVar.defined(),
             "{}: running_mean and running_var must either both be None or neither be None", op);
  if (!useInputStats) {
    KILN_CHECK(runningMean.defined(),
               "{}: expected running_mean and running_var to be defined when use_input_stats is "
               "false",
               op);
    return batchNorm(input, weight, bias, runningMean, runningVar, false, momentum, eps);
  }
  checkChannelParam(op, "weight", weight, g.c);
  checkChannelParam(op, "bias", bias, g.c);
  checkChannelParam(op, "running_mean", runningMean, g.c);
  checkChannelParam(op, "running_var", runningVar, g.c);
  checkParamDTypes(op, input, {{"running_mean", runningMean}, {"running_var", runningVar}});
  const bool update = runningMean.defined() && g.n * g.c > 0;
  std::vector<double> means(update ? g.n * g.c : 0), vars(update ? g.n * g.c : 0);
  Tensor out = runGroupNorm(op, input, g, g.c, weight.defined() ? weight.reshape({g.c}) : weight,
                            bias.defined() ? bias.reshape({g.c}) : bias, eps,
                            update ? means.data() : nullptr, update ? vars.data() : nullptr);
  if (update) {
    // The running stats take the batch average of each sample's (unbiased) statistics.
    std::vector<double> meanAvg(g.c, 0.0), varAvg(g.c, 0.0);
    const double unbias = static_cast<double>(g.hw) / static_cast<double>(g.hw - 1);
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t c = 0; c < g.c; ++c) {
        meanAvg[c] += means[n * g.c + c] / g.n;
        varAvg[c] += vars[n * g.c + c] * unbias / g.n;
      }
    updateRunningStat(runningMean, meanAvg, momentum);
    updateRunningStat(runningVar, varAvg, momentum);
  }
  return out;
}

} // namespace kiln::ops

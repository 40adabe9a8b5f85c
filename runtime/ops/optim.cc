#include "runtime/ops/optim.h"

#include "runtime/error.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <cmath>

namespace kiln::ops {
namespace {

/// One element range of the update; the options are template flags so the loop has no branch
/// and vectorizes (runtime checks of them kept it scalar: 2.8 ns per parameter).
template <typename T, bool Maximize, bool Decay, bool Decoupled, bool Ams>
void adamRange(T *__restrict p, const T *__restrict g, T *__restrict m, T *__restrict v,
               T *__restrict vmax, int64_t begin, int64_t end, T decay, T wd, T w1, T b2, T w2,
               T eps, T bc2Sqrt, T negStep) {
  for (int64_t i = begin; i < end; ++i) {
    T grad = Maximize ? -g[i] : g[i];
    T param = p[i];
    if constexpr (Decay) {
      if constexpr (Decoupled)
        param = param * decay;
      else
        grad = grad + wd * param;
    }
    T mi = m[i] + w1 * (grad - m[i]); // lerp toward the gradient
    T vi = v[i] * b2 + w2 * grad * grad;
    m[i] = mi;
    v[i] = vi;
    T second = vi;
    if constexpr (Ams) {
      second = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = second;
    }
    T denom = std::sqrt(second) / bc2Sqrt + eps;
    p[i] = param + negStep * (mi / denom);
  }
}

/// Every other flag combination (maximize, amsgrad): one instantiation per combination.
template <typename T>
void dispatchGeneral(T *p, const T *g, T *m, T *v, T *vmax, int64_t n, const AdamOptions &o,
                     T decay, T wd, T w1, T b2, T w2, T eps, T bc2Sqrt, T negStep) {
  const bool dc = o.weightDecay != 0, dd = o.decoupledWeightDecay;
  parallelFor(0, n, 1 << 14, [&](int64_t begin, int64_t end) {
    auto go = [&]<bool Mx, bool Dc, bool Dd, bool Am>() {
      adamRange<T, Mx, Dc, Dd, Am>(p, g, m, v, vmax, begin, end, decay, wd, w1, b2, w2, eps,
                                   bc2Sqrt, negStep);
    };
    auto withAms = [&]<bool Mx, bool Dc, bool Dd>() {
      if (vmax)
        go.template operator()<Mx, Dc, Dd, true>();
      else
        go.template operator()<Mx, Dc, Dd, false>();
    };
    auto withDecay = [&]<bool Mx>() {
      if (!dc)
        withAms.template operator()<Mx, false, false>();
      else if (dd)
        withAms.template operator()<Mx, true, true>();
      else
        withAms.template operator()<Mx, true, false>();
    };
    if (o.maximize)
      withDecay.template operator()<true>();
    else
      withDecay.template operator()<false>();
  });
}

template <typename T>
void adamKernel(T *p, const T *g, T *m, T *v, T *vmax, int64_t n, double step,
                const AdamOptions &o) {
  // Scalars rounded to the element type once, as the single-tensor update's Python numbers are.
  const double bc1 = 1.0 - std::pow(o.beta1, step), bc2 = 1.0 - std::pow(o.beta2, step);
  const T decay = static_cast<T>(1.0 - o.lr * o.weightDecay), wd = static_cast<T>(o.weightDecay);
  const T w1 = static_cast<T>(1.0 - o.beta1), b2 = static_cast<T>(o.beta2),
          w2 = static_cast<T>(1.0 - o.beta2), eps = static_cast<T>(o.eps);
  const T bc2Sqrt = static_cast<T>(std::sqrt(bc2)), negStep = static_cast<T>(-(o.lr / bc1));
  auto run = [&]<bool Mx, bool Dc, bool Dd, bool Am>() {
    parallelFor(0, n, 1 << 14, [&](int64_t begin, int64_t end) {
      adamRange<T, Mx, Dc, Dd, Am>(p, g, m, v, vmax, begin, end, decay, wd, w1, b2, w2, eps,
                                   bc2Sqrt, negStep);
    });
  };
  // The common cases get their own loops; the rest share the general one.
  const bool decay_ = o.weightDecay != 0;
  if (!o.maximize && !vmax && decay_ && o.decoupledWeightDecay)
    run.template operator()<false, true, true, false>(); // AdamW
  else if (!o.maximize && !vmax && !decay_)
    run.template operator()<false, false, false, false>(); // Adam
  else if (!o.maximize && !vmax && decay_)
    run.template operator()<false, true, false, false>(); // Adam with L2 decay
  else
    dispatchGeneral(p, g, m, v, vmax, n, o, decay, wd, w1, b2, w2, eps, bc2Sqrt, negStep);
}

void checkState(const char *name, const Tensor &t, const Tensor &param) {
  KILN_CHECK(t.defined() && t.isCpu() && t.isContiguous() && t.dtype() == param.dtype() &&
                 t.sizes() == param.sizes(),
             "adam step: {} must be a contiguous CPU tensor of the parameter's dtype and shape "
             "({} {}), got {}",
             name, dtypeName(param.dtype()), param.shapeStr(),
             t.defined() ? fmt::format("{} {}", dtypeName(t.dtype()), t.shapeStr())
                         : std::string("none"));
}
} // namespace

void adamStep_(Tensor &param, const Tensor &grad, Tensor &expAvg, Tensor &expAvgSq,
               Tensor &maxExpAvgSq, double step, const AdamOptions &opts) {
  KILN_CHECK(param.isCpu() && param.isContiguous() &&
                 (param.dtype() == DType::Float32 || param.dtype() == DType::Float64),
             "adam step: the parameter must be a contiguous float32/float64 CPU tensor");
  checkState("grad", grad, param);
  checkState("exp_avg", expAvg, param);
  checkState("exp_avg_sq", expAvgSq, param);
  if (opts.amsgrad)
    checkState("max_exp_avg_sq", maxExpAvgSq, param);
  auto run = [&]<typename T>() {
    adamKernel<T>(param.data<T>(), grad.data<T>(), expAvg.data<T>(), expAvgSq.data<T>(),
                  opts.amsgrad ? maxExpAvgSq.data<T>() : nullptr, param.numel(), step, opts);
  };
  if (param.dtype() == DType::Float32)
    run.operator()<float>();
  else
    run.operator()<double>();
  for (Tensor *t : {&param, &expAvg, &expAvgSq})
    t->bumpVersion();
  if (opts.amsgrad)
    maxExpAvgSq.bumpVersion();
}

} // namespace kiln::ops

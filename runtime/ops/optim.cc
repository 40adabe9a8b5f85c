#include "runtime/ops/optim.h"

#include "runtime/error.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

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

/// Parameter i's Adam scalars, rounded to the element type once, as the single-tensor update's
/// Python numbers are.
template <typename T> struct AdamScalars {
  T decay, wd, w1, b2, w2, eps, bc2Sqrt, negStep;
  AdamScalars(const AdamOptions &o, double step) {
    const double bc1 = 1.0 - std::pow(o.beta1, step), bc2 = 1.0 - std::pow(o.beta2, step);
    decay = static_cast<T>(1.0 - o.lr * o.weightDecay);
    wd = static_cast<T>(o.weightDecay);
    w1 = static_cast<T>(1.0 - o.beta1);
    b2 = static_cast<T>(o.beta2);
    w2 = static_cast<T>(1.0 - o.beta2);
    eps = static_cast<T>(o.eps);
    bc2Sqrt = static_cast<T>(std::sqrt(bc2));
    negStep = static_cast<T>(-(o.lr / bc1));
  }
};

/// fn.template operator()<F...>() with each runtime flag of `flags` as a template argument, so
/// that an update loop instantiated per combination has no branch.
template <bool... Fixed, typename Fn> void withFlags(Fn &&fn) {
  fn.template operator()<Fixed...>();
}
template <bool... Fixed, typename Fn, typename... Rest>
void withFlags(Fn &&fn, bool flag, Rest... rest) {
  if (flag)
    withFlags<Fixed..., true>(fn, rest...);
  else
    withFlags<Fixed..., false>(fn, rest...);
}

/// Elements [begin, end) of one parameter, the option flags turned into template arguments.
template <typename T>
void adamChunk(T *p, const T *g, T *m, T *v, T *vmax, int64_t begin, int64_t end,
               const AdamOptions &o, const AdamScalars<T> &c) {
  const bool decay = o.weightDecay != 0;
  withFlags(
      [&]<bool Mx, bool Dc, bool Dd, bool Am>() {
        adamRange<T, Mx, Dc, Dd, Am>(p, g, m, v, vmax, begin, end, c.decay, c.wd, c.w1, c.b2, c.w2,
                                     c.eps, c.bc2Sqrt, c.negStep);
      },
      o.maximize, decay, decay && o.decoupledWeightDecay, vmax != nullptr);
}

/// fn(i, begin, end) over the elements of every tensor of a group (numels[i] each) as one
/// parallel loop; a chunk that spans two tensors is split at their boundary.
template <typename Fn> void parallelOverGroup(std::span<const int64_t> numels, Fn fn) {
  std::vector<int64_t> start(numels.size() + 1, 0);
  for (size_t i = 0; i < numels.size(); ++i)
    start[i + 1] = start[i] + numels[i];
  parallelFor(0, start.back(), 1 << 14, [&](int64_t b, int64_t e) {
    size_t i = std::upper_bound(start.begin(), start.end(), b) - start.begin() - 1;
    for (; i < numels.size() && start[i] < e; ++i) {
      int64_t lo = std::max(b, start[i]) - start[i], hi = std::min(e, start[i + 1]) - start[i];
      if (lo < hi)
        fn(i, lo, hi);
    }
  });
}

/// One element range of the SGD update, each option a template flag (no branch in the loop).
/// Each `a + alpha * b` of torch's single-tensor update (add with alpha) is one fma, as torch's
/// vectorized add computes it, and `buf * momentum` is rounded on its own (torch's mul_).
template <typename T, bool Maximize, bool Decay, bool Momentum, bool First, bool Nesterov>
void sgdRange(T *__restrict p, const T *__restrict g, T *__restrict b, int64_t begin, int64_t end,
              T wd, T momentum, T keep, T negLr) {
  for (int64_t i = begin; i < end; ++i) {
    T grad = Maximize ? -g[i] : g[i];
    if constexpr (Decay)
      grad = std::fma(p[i], wd, grad);
    if constexpr (Momentum) {
      T bi = First ? grad : std::fma(grad, keep, b[i] * momentum);
      b[i] = bi;
      grad = Nesterov ? std::fma(bi, momentum, grad) : bi;
    }
    p[i] = std::fma(grad, negLr, p[i]);
  }
}

/// Elements [begin, end) of one parameter, the option flags turned into template arguments.
template <typename T>
void sgdChunk(T *p, const T *g, T *b, int64_t begin, int64_t end, bool first, const SgdOptions &o) {
  const T wd = static_cast<T>(o.weightDecay), momentum = static_cast<T>(o.momentum);
  const T keep = static_cast<T>(1.0 - o.dampening), negLr = static_cast<T>(-o.lr);
  const bool withMomentum = o.momentum != 0;
  withFlags(
      [&]<bool Mx, bool Dc, bool Mo, bool Fi, bool Ne>() {
        sgdRange<T, Mx, Dc, Mo, Fi, Ne>(p, g, b, begin, end, wd, momentum, keep, negLr);
      },
      o.maximize, o.weightDecay != 0, withMomentum, withMomentum && first,
      withMomentum && o.nesterov);
}

/// One element range of the RMSprop update (torch's single-tensor order: addcmul as one fma of
/// value * t1 and t2, lerp by torch's two-sided formula, addcdiv as a product then a quotient).
template <typename T, bool Maximize, bool Decay, bool Centered, bool Momentum>
void rmspropRange(T *__restrict p, const T *__restrict g, T *__restrict sq, T *__restrict ga,
                  T *__restrict b, int64_t begin, int64_t end, T wd, T alpha, T keep, T eps,
                  T momentum, T negLr) {
  for (int64_t i = begin; i < end; ++i) {
    T grad = Maximize ? -g[i] : g[i];
    if constexpr (Decay)
      grad = std::fma(p[i], wd, grad);
    T s = std::fma(keep * grad, grad, sq[i] * alpha);
    sq[i] = s;
    T avg;
    if constexpr (Centered) {
      T x = ga[i];
      T a = std::abs(keep) < T(0.5) ? x + keep * (grad - x) : grad - (grad - x) * (T(1) - keep);
      ga[i] = a;
      avg = std::sqrt(std::fma(-a, a, s));
    } else {
      avg = std::sqrt(s);
    }
    avg = avg + eps;
    if constexpr (Momentum) {
      T bi = std::fma(b[i], momentum, T(-0.0)) + grad / avg; // torch's mul_ rounds on its own
      b[i] = bi;
      p[i] = std::fma(bi, negLr, p[i]);
    } else {
      p[i] = p[i] + grad * negLr / avg;
    }
  }
}

template <typename T>
void rmspropChunk(T *p, const T *g, T *sq, T *ga, T *b, int64_t begin, int64_t end,
                  const RmspropOptions &o) {
  const T wd = static_cast<T>(o.weightDecay), alpha = static_cast<T>(o.alpha);
  const T keep = static_cast<T>(1.0 - o.alpha), eps = static_cast<T>(o.eps);
  const T momentum = static_cast<T>(o.momentum), negLr = static_cast<T>(-o.lr);
  withFlags(
      [&]<bool Mx, bool Dc, bool Ce, bool Mo>() {
        rmspropRange<T, Mx, Dc, Ce, Mo>(p, g, sq, ga, b, begin, end, wd, alpha, keep, eps, momentum,
                                        negLr);
      },
      o.maximize, o.weightDecay != 0, o.centered, o.momentum > 0);
}

/// One element range of the Adagrad update: the sum gains grad^2 (one fma), then
/// p += (grad * -clr) / (sqrt(sum) + eps).
template <typename T, bool Maximize, bool Decay>
void adagradRange(T *__restrict p, const T *__restrict g, T *__restrict sum, int64_t begin,
                  int64_t end, T wd, T eps, T negClr) {
  for (int64_t i = begin; i < end; ++i) {
    T grad = Maximize ? -g[i] : g[i];
    if constexpr (Decay)
      grad = std::fma(p[i], wd, grad);
    T s = std::fma(grad, grad, sum[i]);
    sum[i] = s;
    p[i] = p[i] + grad * negClr / (std::sqrt(s) + eps);
  }
}

template <typename T>
void adagradChunk(T *p, const T *g, T *sum, int64_t begin, int64_t end, double step,
                  const AdagradOptions &o) {
  const T wd = static_cast<T>(o.weightDecay), eps = static_cast<T>(o.eps);
  const T negClr = static_cast<T>(-(o.lr / (1 + (step - 1) * o.lrDecay)));
  withFlags(
      [&]<bool Mx, bool Dc>() { adagradRange<T, Mx, Dc>(p, g, sum, begin, end, wd, eps, negClr); },
      o.maximize, o.weightDecay != 0);
}

void checkState(const char *who, const char *name, const Tensor &t, const Tensor &param) {
  KILN_CHECK(t.defined() && t.isCpu() && t.isContiguous() && t.dtype() == param.dtype() &&
                 t.sizes() == param.sizes(),
             "{}: {} must be a contiguous CPU tensor of the parameter's dtype and shape "
             "({} {}), got {}",
             who, name, dtypeName(param.dtype()), param.shapeStr(),
             t.defined() ? fmt::format("{} {}", dtypeName(t.dtype()), t.shapeStr())
                         : std::string("none"));
}

void checkParam(const char *who, const Tensor &param) {
  KILN_CHECK(param.isCpu() && param.isContiguous() &&
                 (param.dtype() == DType::Float32 || param.dtype() == DType::Float64),
             "{}: a parameter must be a contiguous float32/float64 CPU tensor, got {} {}", who,
             dtypeName(param.dtype()), param.shapeStr());
}

/// Calls fn.template operator()<T>() for parameter `param`'s element type.
template <typename Fn> void dispatchParam(const Tensor &param, Fn &&fn) {
  if (param.dtype() == DType::Float32)
    fn.template operator()<float>();
  else
    fn.template operator()<double>();
}

} // namespace

void adamMultiStep_(std::span<Tensor> params, std::span<const Tensor> grads,
                    std::span<Tensor> expAvgs, std::span<Tensor> expAvgSqs,
                    std::span<Tensor> maxExpAvgSqs, std::span<const double> steps,
                    const AdamOptions &opts) {
  const size_t n = params.size();
  KILN_CHECK(grads.size() == n && expAvgs.size() == n && expAvgSqs.size() == n &&
                 steps.size() == n && maxExpAvgSqs.size() == (opts.amsgrad ? n : 0),
             "adam step: the parameter, gradient and state lists differ in length");
  std::vector<int64_t> numels(n);
  for (size_t i = 0; i < n; ++i) {
    checkParam("adam step", params[i]);
    checkState("adam step", "grad", grads[i], params[i]);
    checkState("adam step", "exp_avg", expAvgs[i], params[i]);
    checkState("adam step", "exp_avg_sq", expAvgSqs[i], params[i]);
    if (opts.amsgrad)
      checkState("adam step", "max_exp_avg_sq", maxExpAvgSqs[i], params[i]);
    numels[i] = params[i].numel();
  }
  std::vector<AdamScalars<float>> f32;
  std::vector<AdamScalars<double>> f64;
  for (size_t i = 0; i < n; ++i) {
    f32.emplace_back(opts, steps[i]);
    f64.emplace_back(opts, steps[i]);
  }
  parallelOverGroup(numels, [&](size_t i, int64_t begin, int64_t end) {
    dispatchParam(params[i], [&]<typename T>() {
      const AdamScalars<T> &c = [&]() -> const AdamScalars<T> & {
        if constexpr (std::is_same_v<T, float>)
          return f32[i];
        else
          return f64[i];
      }();
      adamChunk<T>(params[i].data<T>(), grads[i].data<T>(), expAvgs[i].data<T>(),
                   expAvgSqs[i].data<T>(), opts.amsgrad ? maxExpAvgSqs[i].data<T>() : nullptr,
                   begin, end, opts, c);
    });
  });
  for (size_t i = 0; i < n; ++i) {
    for (Tensor *t : {&params[i], &expAvgs[i], &expAvgSqs[i]})
      t->bumpVersion();
    if (opts.amsgrad)
      maxExpAvgSqs[i].bumpVersion();
  }
}

void sgdMultiStep_(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> bufs,
                   std::span<const uint8_t> firstStep, const SgdOptions &opts) {
  const size_t n = params.size();
  const bool momentum = opts.momentum != 0;
  KILN_CHECK(grads.size() == n && bufs.size() == n && firstStep.size() == n,
             "sgd step: the parameter, gradient and buffer lists differ in length");
  std::vector<int64_t> numels(n);
  for (size_t i = 0; i < n; ++i) {
    checkParam("sgd step", params[i]);
    checkState("sgd step", "grad", grads[i], params[i]);
    if (momentum)
      checkState("sgd step", "momentum_buffer", bufs[i], params[i]);
    numels[i] = params[i].numel();
  }
  parallelOverGroup(numels, [&](size_t i, int64_t begin, int64_t end) {
    dispatchParam(params[i], [&]<typename T>() {
      sgdChunk<T>(params[i].data<T>(), grads[i].data<T>(), momentum ? bufs[i].data<T>() : nullptr,
                  begin, end, firstStep[i] != 0, opts);
    });
  });
  for (size_t i = 0; i < n; ++i) {
    params[i].bumpVersion();
    if (momentum)
      bufs[i].bumpVersion();
  }
}

void rmspropMultiStep_(std::span<Tensor> params, std::span<const Tensor> grads,
                       std::span<Tensor> squareAvgs, std::span<Tensor> gradAvgs,
                       std::span<Tensor> bufs, const RmspropOptions &opts) {
  const size_t n = params.size();
  const bool momentum = opts.momentum > 0;
  KILN_CHECK(grads.size() == n && squareAvgs.size() == n &&
                 gradAvgs.size() == (opts.centered ? n : 0) && bufs.size() == (momentum ? n : 0),
             "rmsprop step: the parameter, gradient and state lists differ in length");
  std::vector<int64_t> numels(n);
  for (size_t i = 0; i < n; ++i) {
    checkParam("rmsprop step", params[i]);
    checkState("rmsprop step", "grad", grads[i], params[i]);
    checkState("rmsprop step", "square_avg", squareAvgs[i], params[i]);
    if (opts.centered)
      checkState("rmsprop step", "grad_avg", gradAvgs[i], params[i]);
    if (momentum)
      checkState("rmsprop step", "momentum_buffer", bufs[i], params[i]);
    numels[i] = params[i].numel();
  }
  parallelOverGroup(numels, [&](size_t i, int64_t begin, int64_t end) {
    dispatchParam(params[i], [&]<typename T>() {
      rmspropChunk<T>(params[i].data<T>(), grads[i].data<T>(), squareAvgs[i].data<T>(),
                      opts.centered ? gradAvgs[i].data<T>() : nullptr,
                      momentum ? bufs[i].data<T>() : nullptr, begin, end, opts);
    });
  });
  for (size_t i = 0; i < n; ++i) {
    params[i].bumpVersion();
    squareAvgs[i].bumpVersion();
    if (opts.centered)
      gradAvgs[i].bumpVersion();
    if (momentum)
      bufs[i].bumpVersion();
  }
}

void adagradMultiStep_(std::span<Tensor> params, std::span<const Tensor> grads,
                       std::span<Tensor> sums, std::span<const double> steps,
                       const AdagradOptions &opts) {
  const size_t n = params.size();
  KILN_CHECK(grads.size() == n && sums.size() == n && steps.size() == n,
             "adagrad step: the parameter, gradient and state lists differ in length");
  std::vector<int64_t> numels(n);
  for (size_t i = 0; i < n; ++i) {
    checkParam("adagrad step", params[i]);
    checkState("adagrad step", "grad", grads[i], params[i]);
    checkState("adagrad step", "sum", sums[i], params[i]);
    numels[i] = params[i].numel();
  }
  parallelOverGroup(numels, [&](size_t i, int64_t begin, int64_t end) {
    dispatchParam(params[i], [&]<typename T>() {
      adagradChunk<T>(params[i].data<T>(), grads[i].data<T>(), sums[i].data<T>(), begin, end,
                      steps[i], opts);
    });
  });
  for (size_t i = 0; i < n; ++i) {
    params[i].bumpVersion();
    sums[i].bumpVersion();
  }
}

} // namespace kiln::ops

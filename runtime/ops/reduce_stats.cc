// Statistical reductions: var/std (and their _mean forms), logsumexp, vector norms.
#include "runtime/device_ops.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/elementwise_impl.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/reduce_impl.h"
#include "runtime/ops/softmax_impl.h"

#include <cmath>
#include <limits>

namespace kiln::ops {

using namespace detail;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// Welford's running mean and sum of squared deviations; partial results merge with Chan's
/// formula. Numerically sound even when the mean is large compared to the spread.
template <typename T> struct WelfordReducer {
  struct Acc {
    double n = 0, mean = 0, m2 = 0;
  };
  using In = T;
  static constexpr int kLanes = 4;
  T *var;  // variance or standard deviation
  T *mean; // may be null
  double correction;
  bool takeSqrt;

  Acc identity() const { return {}; }
  void add(Acc &a, T v, int64_t) const {
    double x = double(v);
    a.n += 1;
    double d = x - a.mean;
    a.mean += d / a.n;
    a.m2 += d * (x - a.mean);
  }
  void merge(Acc &a, const Acc &b) const {
    if (b.n == 0)
      return;
    if (a.n == 0) {
      a = b;
      return;
    }
    double n = a.n + b.n, d = b.mean - a.mean;
    a.mean += d * (b.n / n);
    a.m2 += b.m2 + d * d * (a.n * b.n / n);
    a.n = n;
  }
  void store(int64_t o, const Acc &a) const {
    double v = a.m2 / std::max(0.0, a.n - correction);
    var[o] = static_cast<T>(takeSqrt ? std::sqrt(v) : v);
    if (mean)
      mean[o] = static_cast<T>(a.n > 0 ? a.mean : kNaN);
  }
};

enum class NormKind { L2, L1, Inf, NegInf, Zero, P };

template <typename T, NormKind K> struct NormReducer {
  using In = T;
  using Acc = double;
  static constexpr int kLanes = 16;
  T *out;
  double p;

  Acc identity() const { return K == NormKind::Inf ? 0.0 : K == NormKind::NegInf ? kInf : 0.0; }
  void add(Acc &a, T v, int64_t) const {
    double x = std::abs(double(v));
    if constexpr (K == NormKind::L2)
      a += x * x;
    else if constexpr (K == NormKind::L1)
      a += x;
    else if constexpr (K == NormKind::Zero)
      a += x != 0 ? 1.0 : 0.0;
    else if constexpr (K == NormKind::P)
      a += std::pow(x, p);
    else
      merge(a, x);
  }
  void merge(Acc &a, const Acc &b) const {
    if constexpr (K == NormKind::Inf)
      a = (b > a || b != b) ? b : a;
    else if constexpr (K == NormKind::NegInf)
      a = (b < a || b != b) ? b : a;
    else
      a += b;
  }
  void store(int64_t o, const Acc &a) const {
    double r = K == NormKind::L2 ? std::sqrt(a) : K == NormKind::P ? std::pow(a, 1.0 / p) : a;
    out[o] = static_cast<T>(r);
  }
};

void checkFloating(const char *op, const Tensor &a, const char *what) {
  KILN_CHECK(isFloating(a.dtype()), "{}: {}. Got {}", op, what, dtypeName(a.dtype()));
}

template <typename F> Tensor runFloat(const Tensor &in, const ReducePlan &plan, F makeAndRun) {
  Tensor out = Tensor::empty(plan.outSizes, in.dtype(), in.device());
  if (in.dtype() == DType::Float64)
    makeAndRun(out.data<double>());
  else
    makeAndRun(out.data<float>());
  return out;
}

} // namespace

std::pair<Tensor, Tensor> varMean(const Tensor &a, const DimList &dims, double correction,
                                  bool keepdim, bool takeSqrt) {
  const char *op = takeSqrt ? "std" : "var";
  KILN_CHECK(isFloating(a.dtype()),
             "{}(): std and var only support floating point and complex "
             "dtypes, got {}",
             op, dtypeName(a.dtype()));
  auto mask = reduceMask(op, a.dim(), dims);
  Tensor in = a.to(computeDType(a.dtype()));
  ReducePlan plan = makeReducePlan(in, mask);
  Tensor mean = Tensor::empty(plan.outSizes, in.dtype(), a.device());
  Tensor var = runFloat(in, plan, [&]<typename T>(T *out) {
    runReduce(WelfordReducer<T>{out, mean.data<T>(), correction, takeSqrt}, plan, in);
  });
  return {finishReduce(var, a, mask, keepdim, a.dtype()),
          finishReduce(mean, a, mask, keepdim, a.dtype())};
}

Tensor var(const Tensor &a, const DimList &dims, double correction, bool keepdim) {
  if (onDevice({&a}))
    return deviceOp("var", {a},
                    joinAttrs({dimsAttr("dim", dims), fmt::format("correction = {}", correction),
                               keepdim ? "keepdim = true" : ""}));
  return varMean(a, dims, correction, keepdim, false).first;
}

Tensor stdDev(const Tensor &a, const DimList &dims, double correction, bool keepdim) {
  return varMean(a, dims, correction, keepdim, true).first;
}

Tensor logsumexp(const Tensor &a, const DimList &dims, bool keepdim) {
  if (onDevice({&a}))
    return deviceOp("logsumexp", {a},
                    joinAttrs({dimsAttr("dim", dims), keepdim ? "keepdim = true" : ""}));
  auto mask = reduceMask("logsumexp", a.dim(), dims);
  DType result = floatResult(a.dtype());
  Tensor in = a.to(computeDType(result));
  Tensor out = Tensor::empty(reducedShape(a.sizes(), mask, true), in.dtype(), a.device());
  if (in.numel() == 0) {
    fillInto(out, Scalar(-kInf)); // the log of an empty sum
  } else {
    // log(sum(exp(x - m))) + m with m the line's max, so exp cannot overflow. An infinite max
    // shifts by 0 instead, so all -inf lines give -inf and +inf lines +inf (not inf - inf).
    Tensor m = amax(in, dims, true);
    auto run = [&]<typename T>() {
      T *mp = m.data<T>();
      for (int64_t i = 0, n = m.numel(); i < n; ++i)
        mp[i] = std::isinf(mp[i]) ? T(0) : mp[i];
      // A fresh contiguous tensor, so exp runs in place as one flat (vectorized) loop.
      Tensor e = sub(in, m).contiguous();
      T *ep = e.data<T>();
      parallelFor(0, e.numel(), kElementwiseGrain, [ep](int64_t b, int64_t end) {
        for (int64_t i = b; i < end; ++i)
          ep[i] = fastExp(ep[i]);
      });
      Tensor s = sum(e, dims, true);
      const T *sp = s.data<T>();
      T *op = out.data<T>();
      for (int64_t i = 0, n = out.numel(); i < n; ++i)
        op[i] = static_cast<T>(std::log(double(sp[i]))) + mp[i];
    };
    if (in.dtype() == DType::Float64)
      run.template operator()<double>();
    else
      run.template operator()<float>();
  }
  return (keepdim ? out : out.view(reducedShape(a.sizes(), mask, false))).to(result);
}

Tensor vectorNorm(const Tensor &a, double ord, const DimList &dims, bool keepdim,
                  std::optional<DType> dtype) {
  const char *op = "linalg.vector_norm";
  checkFloating(op, a, "Expected a floating point or complex tensor as input");
  if (dtype)
    KILN_CHECK(isFloating(*dtype), "{}: dtype should be floating point or complex, but got {}", op,
               dtypeName(*dtype));
  auto mask = reduceMask(op, a.dim(), dims);
  if (std::isinf(ord))
    for (size_t d = 0; d < mask.size(); ++d)
      KILN_CHECK(!mask[d] || a.size(d) != 0,
                 "{} cannot compute the {} norm on an empty tensor because the operation does not "
                 "have an identity",
                 op, ord > 0 ? "inf" : "-inf");
  DType result = dtype.value_or(a.dtype());
  Tensor in = a.to(result).to(computeDType(result));
  ReducePlan plan = makeReducePlan(in, mask);
  NormKind kind = ord == 2.0     ? NormKind::L2
                  : ord == 1.0   ? NormKind::L1
                  : ord == 0.0   ? NormKind::Zero
                  : ord == kInf  ? NormKind::Inf
                  : ord == -kInf ? NormKind::NegInf
                                 : NormKind::P;
  Tensor out = runFloat(in, plan, [&]<typename T>(T *o) {
    switch (kind) {
    case NormKind::L2:
      return runReduce(NormReducer<T, NormKind::L2>{o, ord}, plan, in);
    case NormKind::L1:
      return runReduce(NormReducer<T, NormKind::L1>{o, ord}, plan, in);
    case NormKind::Zero:
      return runReduce(NormReducer<T, NormKind::Zero>{o, ord}, plan, in);
    case NormKind::Inf:
      return runReduce(NormReducer<T, NormKind::Inf>{o, ord}, plan, in);
    case NormKind::NegInf:
      return runReduce(NormReducer<T, NormKind::NegInf>{o, ord}, plan, in);
    case NormKind::P:
      return runReduce(NormReducer<T, NormKind::P>{o, ord}, plan, in);
    }
  });
  return finishReduce(out, a, mask, keepdim, result);
}

} // namespace kiln::ops

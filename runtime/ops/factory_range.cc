// arange, linspace and logspace: each element is computed from its index alone, so the fill is a
// plain parallel loop with no carried sum (no drift over long ranges).
#include "runtime/copy.h"
#include "runtime/error.h"
#include "runtime/ops/factory.h"
#include "runtime/thread_pool.h"

#include <cmath>

namespace kiln::ops {

namespace {

/// Runs out[i] = f(i) over a fresh contiguous tensor, in parallel for long ranges.
template <typename T, typename F> void fillByIndex(const Tensor &out, F f) {
  T *p = out.data<T>();
  parallelFor(0, out.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      p[i] = f(i);
  });
}

void checkNotBool(const char *op, DType dtype) {
  KILN_CHECK_KIND(NotImplemented, dtype != DType::Bool, "\"{}\" not implemented for 'bool'", op);
}

/// torch's element count: int64 ranges use truncated bounds and integer math, others ceil in
/// double.
int64_t arangeSize(const Scalar &start, const Scalar &end, const Scalar &step, DType dtype) {
  double s = start.toDouble(), e = end.toDouble(), st = step.toDouble();
  KILN_CHECK(std::isfinite(s) && std::isfinite(e), "arange: unsupported range: {} -> {}", s, e);
  KILN_CHECK(st != 0, "arange: step must be nonzero");
  KILN_CHECK((st > 0 && e >= s) || (st < 0 && e <= s),
             "arange: upper bound and lower bound inconsistent with step sign (start={}, end={}, "
             "step={})",
             s, e, st);
  double size;
  if (dtype == DType::Int64) {
    int64_t xs = start.toInt(), xe = end.toInt(), xst = step.toInt();
    KILN_CHECK(xst != 0, "arange: step must be nonzero (step {} truncates to 0 for int64)", st);
    int64_t sgn = (xst > 0) - (xst < 0);
    size = static_cast<double>((xe - xs + xst - sgn) / xst);
  } else {
    size = std::ceil((e - s) / st);
  }
  KILN_CHECK(size < 0x1p62,
             "arange: invalid size {} for range {} -> {} step {}, possible "
             "overflow?",
             size, s, e, st);
  return std::max<int64_t>(0, static_cast<int64_t>(size));
}

} // namespace

Tensor arange(const Scalar &start, const Scalar &end, const Scalar &step, DType dtype) {
  checkNotBool("arange", dtype);
  int64_t n = arangeSize(start, end, step, dtype);
  Tensor out = Tensor::empty({n}, dtype);
  dispatchAll(dtype, [&]<typename T>() {
    if constexpr (std::is_integral_v<T>) {
      // Integer ranges accumulate in int64 (torch's accscalar), so a float step truncates.
      int64_t xs = start.toInt(), xst = step.toInt();
      KILN_CHECK(xst != 0, "arange: step must be nonzero (step {} truncates to 0 for {})",
                 step.toDouble(), dtypeName(dtype));
      fillByIndex<T>(out, [=](int64_t i) { return static_cast<T>(xs + i * xst); });
    } else {
      double s = start.toDouble(), st = step.toDouble();
      fillByIndex<T>(out,
                     [=](int64_t i) { return convertValue<T>(s + static_cast<double>(i) * st); });
    }
  });
  return out;
}

Tensor linspace(const Scalar &start, const Scalar &end, int64_t steps, DType dtype) {
  KILN_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got {}", steps);
  checkNotBool("linspace", dtype);
  Tensor out = Tensor::empty({steps}, dtype);
  if (steps == 1) {
    fillInto(out, start);
    return out;
  }
  const int64_t halfway = steps / 2;
  dispatchAll(dtype, [&]<typename T>() {
    // torch's arithmetic: integers convert the bounds to T and step in double; floats compute in
    // T itself, so float16/bfloat16 round every intermediate (emulated with `r`). The second
    // half counts back from `end` so that it is hit exactly.
    using Acc =
        std::conditional_t<std::is_same_v<T, double> || std::is_integral_v<T>, double, float>;
    auto r = [](Acc v) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
        return static_cast<Acc>(static_cast<float>(T(v)));
      else
        return v;
    };
    using Bound = std::conditional_t<std::is_integral_v<T>, T, Acc>;
    Acc s = r(static_cast<Acc>(start.to<Bound>())), e = r(static_cast<Acc>(end.to<Bound>()));
    Acc st = r(r(e - s) / r(static_cast<Acc>(steps - 1)));
    fillByIndex<T>(out, [=](int64_t i) {
      Acc v = i < halfway ? r(s + r(st * r(static_cast<Acc>(i))))
                          : r(e - r(st * r(static_cast<Acc>(steps - i - 1))));
      return convertValue<T>(v);
    });
  });
  return out;
}

Tensor logspace(const Scalar &start, const Scalar &end, int64_t steps, double base, DType dtype) {
  KILN_CHECK(steps >= 0, "logspace: number of steps must be non-negative, got {}", steps);
  checkNotBool("logspace", dtype);
  Tensor out = Tensor::empty({steps}, dtype);
  const int64_t halfway = steps / 2;
  const double s = start.toDouble(), e = end.toDouble();
  if (steps == 1) {
    fillInto(out, Scalar(std::pow(base, s)));
    return out;
  }
  const double st = steps > 1 ? (e - s) / static_cast<double>(steps - 1) : 0.0;
  dispatchAll(dtype, [&]<typename T>() {
    fillByIndex<T>(out, [=](int64_t i) {
      double x = i < halfway ? s + st * static_cast<double>(i)
                             : e - st * static_cast<double>(steps - i - 1);
      return convertValue<T>(std::pow(base, x));
    });
  });
  return out;
}

} // namespace kiln::ops

#pragma once
/// Internal helpers shared by the loss kernels: reductions of per-element losses, dtype rules and
/// the error wording torch uses. Reuses the floating dispatch and row sums of the norm kernels.

#include "runtime/loops.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/norm_impl.h"

#include <limits>
#include <vector>

namespace kiln::ops::detail {

/// torch.can_cast: no float -> integral, no non-bool -> bool.
inline bool lossCanCast(DType from, DType to) {
  if (isFloating(from) && !isFloating(to))
    return false;
  return from == DType::Bool || to != DType::Bool;
}

/// Sum of n contiguous values in double. Fixed chunks (not one per thread) so the result does
/// not depend on the thread count.
template <typename T> double sumContiguous(const T *x, int64_t n) {
  constexpr int64_t kChunk = 1 << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks <= 1)
    return sumWide(x, n);
  std::vector<double> partial(chunks);
  parallelFor(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      partial[c] = sumWide(x + c * kChunk, std::min(kChunk, n - c * kChunk));
  });
  double s = 0;
  for (double p : partial)
    s += p;
  return s;
}

/// A 0-d tensor of dtype `out` holding v.
inline Tensor scalarResult(double v, DType out) { return Tensor::scalarTensor(Scalar(v), out); }

/// Sum or mean (sum / divisor) of a contiguous floating tensor of per-element losses; None
/// returns the values unchanged. A zero divisor gives NaN, as torch's mean of nothing.
inline Tensor reduceLoss(const char *op, const Tensor &values, Reduction reduction,
                         double divisor) {
  if (reduction == Reduction::None)
    return values;
  double s = dispatchNormFloat(op, values.dtype(), [&]<typename T>() {
    return sumContiguous(values.data<T>(), values.numel());
  });
  if (reduction == Reduction::Mean)
    s = divisor == 0 ? std::numeric_limits<double>::quiet_NaN() : s / divisor;
  return scalarResult(s, values.dtype());
}

/// Per-row (per-sample) losses in double to a tensor of `shape` and dtype `out`.
inline Tensor rowsToTensor(const std::vector<double> &rows, IntList shape, DType out) {
  Tensor t = Tensor::empty({static_cast<int64_t>(rows.size())}, DType::Float64);
  std::copy(rows.begin(), rows.end(), t.data<double>());
  return t.view(shape).to(out);
}

/// A weight (or pos_weight) must broadcast to `shape` without enlarging it.
inline void checkBroadcastsTo(const char *op, const char *name, const Tensor &t, IntList shape) {
  if (!t.defined())
    return;
  Shape b = broadcastShapes(t.sizes(), shape, op);
  KILN_CHECK(std::equal(b.begin(), b.end(), shape.begin(), shape.end()),
             "{}: {} of shape {} must broadcast to the input's shape {}, but the broadcast shape "
             "is {}",
             op, name, t.shapeStr(), shapeToString(shape), shapeToString(b));
}

/// Per-element losses f(x, t) over the broadcast of input and target, computed in `compute`
/// (float32, float64, or int64 when AllowInt) and returned as a contiguous tensor of dtype `out`
/// (float16/bfloat16 results are rounded once, as torch stores its loss tensor). f is a generic
/// callable (T, T) -> T.
template <bool AllowInt = false, typename F>
Tensor elementwiseLoss(const char *op, const Tensor &input, const Tensor &target, DType compute,
                       DType out, F f) {
  Shape shape = broadcastShapes(input.sizes(), target.sizes(), op);
  Tensor res = Tensor::empty(shape, compute, input.device());
  auto run = [&]<typename T>() {
    Tensor ins[2] = {input.to(compute).expand(shape), target.to(compute).expand(shape)};
    cpuKernel<T, T, T>(res, ins, [f](T x, T t) -> T { return f(x, t); });
  };
  if (res.numel() > 0) {
    if (compute == DType::Float32)
      run.template operator()<float>();
    else if (compute == DType::Float64)
      run.template operator()<double>();
    else if (AllowInt && compute == DType::Int64) {
      if constexpr (AllowInt)
        run.template operator()<int64_t>();
    } else
      fail(ErrorKind::NotImplemented, "{}: not implemented for dtype {}", op, dtypeName(compute));
  }
  return res.to(out);
}

} // namespace kiln::ops::detail

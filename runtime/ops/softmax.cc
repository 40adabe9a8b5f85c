// softmax / log_softmax: one pass for the max, one for the sum of exponentials, one to write.
#include "runtime/ops/softmax.h"
#include "runtime/device_ops.h"

#include "runtime/error.h"
#include "runtime/ops/softmax_impl.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kiln::ops {

using namespace detail;

namespace {

/// Inner-dim columns normalized together when softmax's dim is not the last one.
constexpr int64_t kSoftmaxBlock = 256;
constexpr int64_t kSoftmaxGrain = 32768;

/// Normalizes one row of n unit-stride elements. A NaN anywhere reaches every output through
/// the sum, as in torch.
template <typename T> void softmaxRow(const T *x, T *y, int64_t n, bool log) {
  const T mx = rowMax(x, n);
  for (int64_t i = 0; i < n; ++i)
    y[i] = fastExp(x[i] - mx);
  const double sum = rowSum(y, n);
  if (log) {
    // (x - max) - log(sum), not x - (max + log(sum)): the latter rounds at max's magnitude.
    const T logSum = static_cast<T>(std::log(sum));
    for (int64_t i = 0; i < n; ++i)
      y[i] = (x[i] - mx) - logSum;
  } else {
    const T scale = static_cast<T>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i)
      y[i] *= scale;
  }
}

/// Normalizes w columns (stride `inner`) of an n-row block at once: unit-stride row updates.
template <typename T>
void softmaxColumns(const T *x, T *y, int64_t n, int64_t inner, int64_t w, bool log) {
  T mx[kSoftmaxBlock];
  double sum[kSoftmaxBlock];
  for (int64_t j = 0; j < w; ++j) {
    mx[j] = -std::numeric_limits<T>::infinity();
    sum[j] = 0;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) {
      T v = x[i * inner + j];
      mx[j] = v > mx[j] ? v : mx[j];
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) {
      T e = fastExp(x[i * inner + j] - mx[j]);
      y[i * inner + j] = e; // log_softmax overwrites it below
      sum[j] += e;
    }
  T post[kSoftmaxBlock]; // log(sum) for log_softmax, 1 / sum for softmax
  for (int64_t j = 0; j < w; ++j)
    post[j] = static_cast<T>(log ? std::log(sum[j]) : 1.0 / sum[j]);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < w; ++j) {
      int64_t p = i * inner + j;
      y[p] = log ? (x[p] - mx[j]) - post[j] : y[p] * post[j];
    }
}

Tensor softmaxImpl(const char *op, const Tensor &a, int64_t dim, std::optional<DType> dtype,
                   bool log) {
  int64_t d = wrapDim(dim, a.dim(), op);
  DType result = dtype.value_or(a.dtype());
  KILN_CHECK_KIND(NotImplemented, isFloating(result),
                  "{}: not implemented for '{}' (softmax needs a floating point input; pass "
                  "dtype= to compute in a floating type)",
                  op, dtypeName(result));
  Tensor in = a.to(result).to(computeDType(result)).contiguous();
  Tensor out = Tensor::empty(a.sizes(), in.dtype(), a.device());
  int64_t outer = 1, n = a.dim() == 0 ? 1 : a.size(d), inner = 1;
  for (int64_t k = 0; k < d; ++k)
    outer *= a.size(k);
  for (int64_t k = d + 1; k < a.dim(); ++k)
    inner *= a.size(k);
  auto run = [&]<typename T>() {
    const T *x = in.data<T>();
    T *y = out.data<T>();
    if (inner == 1) {
      parallelFor(0, outer, std::max<int64_t>(1, kSoftmaxGrain / std::max<int64_t>(n, 1)),
                  [&](int64_t b, int64_t e) {
                    for (int64_t o = b; o < e; ++o)
                      softmaxRow(x + o * n, y + o * n, n, log);
                  });
      return;
    }
    int64_t width = std::min(inner, kSoftmaxBlock), blocks = (inner + width - 1) / width;
    int64_t grain = std::max<int64_t>(1, kSoftmaxGrain / std::max<int64_t>(n * width, 1));
    parallelFor(0, outer * blocks, grain, [&](int64_t b, int64_t e) {
      for (int64_t it = b; it < e; ++it) {
        int64_t o = it / blocks, c0 = (it % blocks) * width;
        int64_t off = o * n * inner + c0;
        softmaxColumns(x + off, y + off, n, inner, std::min(width, inner - c0), log);
      }
    });
  };
  if (numelOf(a.sizes()) > 0) {
    if (in.dtype() == DType::Float64)
      run.template operator()<double>();
    else
      run.template operator()<float>();
  }
  return out.to(result);
}

} // namespace

Tensor softmaxBackward(const Tensor &grad, const Tensor &output, int64_t dim, bool log) {
  int64_t d = wrapDim(dim, std::max<int64_t>(output.dim(), 1), "softmax_backward");
  if (!output.isCpu() || output.dim() == 0 || d != output.dim() - 1 ||
      grad.sizes() != output.sizes())
    return Tensor();
  DType compute = computeDType(output.dtype());
  Tensor g = grad.to(compute).contiguous(), y = output.to(compute).contiguous();
  Tensor out = Tensor::empty(output.sizes(), compute);
  const int64_t n = output.size(d), rows = output.numel() / std::max<int64_t>(n, 1);
  auto run = [&]<typename T>() {
    const T *gp = g.data<T>(), *yp = y.data<T>();
    T *op = out.data<T>();
    parallelFor(0, rows, std::max<int64_t>(1, kSoftmaxGrain / std::max<int64_t>(n, 1)),
                [&](int64_t b, int64_t e) {
                  for (int64_t r = b; r < e; ++r) {
                    const T *gr = gp + r * n, *yr = yp + r * n;
                    T *orow = op + r * n;
                    double acc = 0;
                    for (int64_t i = 0; i < n; ++i)
                      acc += log ? static_cast<double>(gr[i])
                                 : static_cast<double>(gr[i]) * static_cast<double>(yr[i]);
                    const T s = static_cast<T>(acc);
                    for (int64_t i = 0; i < n; ++i)
                      orow[i] = log ? gr[i] - std::exp(yr[i]) * s : yr[i] * (gr[i] - s);
                  }
                });
  };
  if (output.numel() > 0) {
    if (compute == DType::Float64)
      run.template operator()<double>();
    else
      run.template operator()<float>();
  }
  return out.to(output.dtype());
}

Tensor softmax(const Tensor &a, int64_t dim, std::optional<DType> dtype) {
  if (onDevice({&a}))
    return deviceOp(
        "softmax", {a},
        joinAttrs({fmt::format("dim = {}", dim), dtype ? dtypeAttr("dtype", *dtype) : ""}));
  return softmaxImpl("softmax", a, dim, dtype, false);
}

Tensor logSoftmax(const Tensor &a, int64_t dim, std::optional<DType> dtype) {
  if (onDevice({&a}))
    return deviceOp(
        "log_softmax", {a},
        joinAttrs({fmt::format("dim = {}", dim), dtype ? dtypeAttr("dtype", *dtype) : ""}));
  return softmaxImpl("log_softmax", a, dim, dtype, true);
}

} // namespace kiln::ops

// Scans along a dim: cumsum, cumprod, cummax, cummin, logcumsumexp.
#include "runtime/ops/scan.h"

#include "runtime/device_ops.h"
#include "runtime/error.h"
#include "runtime/ops/reduce_impl.h"
#include "runtime/ops/shape_ops.h"

#include <cmath>
#include <memory>

namespace kiln::ops {

using namespace detail;

namespace {

/// Inner-dim columns one work unit scans together (their accumulators stay in L1).
constexpr int64_t kScanBlock = 256;

/// Scans every line of a contiguous [outer, n, inner] input: for each line, acc = init, then
/// step(acc, x_i, i) and store(position, acc) for i = 0..n-1. With inner > 1 a block of lines
/// advances together, one unit-stride row at a time.
template <typename In, typename Acc, typename Step, typename Store>
void scanLines(const In *in, int64_t outer, int64_t n, int64_t inner, Acc init, Step step,
               Store store) {
  const int64_t width = std::min(std::max<int64_t>(inner, 1), kScanBlock);
  const int64_t blocks = ceilDiv(inner, width);
  const int64_t grain = std::max<int64_t>(1, kReduceChunk / std::max<int64_t>(n * width, 1));
  parallelFor(0, outer * blocks, grain, [&](int64_t b, int64_t e) {
    Acc acc[kScanBlock];
    for (int64_t item = b; item < e; ++item) {
      int64_t o = item / blocks, c0 = (item % blocks) * width, w = std::min(width, inner - c0);
      int64_t base = o * n * inner + c0;
      for (int64_t j = 0; j < w; ++j)
        acc[j] = init;
      for (int64_t i = 0; i < n; ++i) {
        int64_t row = base + i * inner;
        for (int64_t j = 0; j < w; ++j) {
          step(acc[j], in[row + j], i);
          store(row + j, acc[j]);
        }
      }
    }
  });
}

struct LineShape {
  int64_t outer = 1, n = 1, inner = 1;
};

LineShape lineShape(const Tensor &a, int64_t dim) {
  LineShape s;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (d < dim)
      s.outer *= a.size(d);
    else if (d == dim)
      s.n = a.size(d);
    else
      s.inner *= a.size(d);
  }
  return s;
}

/// cumsum/cumprod: the input cast to `dtype` then to its compute dtype, scanned in SumAcc.
Tensor cumulative(const char *op, bool isProd, const Tensor &a, int64_t dim,
                  std::optional<DType> dtype) {
  int64_t d = wrapDim(dim, a.dim(), op);
  DType target = dtype.value_or(a.dtype());
  DType result = dtype ? *dtype : isIntegral(a.dtype(), true) ? DType::Int64 : a.dtype();
  Tensor in = a.to(target).to(computeDType(target)).contiguous();
  DType kernelOut = isFloating(in.dtype()) ? in.dtype() : DType::Int64;
  Tensor out = Tensor::empty(a.sizes(), kernelOut, a.device());
  LineShape s = lineShape(a, d);
  dispatchCompute(in.dtype(), [&]<typename T>() {
    using Acc = SumAcc<T>;
    auto *o = out.data<SumOut<T>>();
    auto store = [o](int64_t p, Acc acc) { o[p] = static_cast<SumOut<T>>(acc); };
    if (isProd)
      scanLines(
          in.data<T>(), s.outer, s.n, s.inner, Acc(1),
          [](Acc &acc, T v, int64_t) { acc *= Acc(v); }, store);
    else
      scanLines(
          in.data<T>(), s.outer, s.n, s.inner, Acc(0),
          [](Acc &acc, T v, int64_t) { acc += Acc(v); }, store);
  });
  return out.to(result);
}

/// cummax/cummin, torch's rule: a new element replaces the running value when it is NaN, or
/// when the running value is not NaN and the element is >= (<=) it, so ties take the latest
/// index.
template <bool kMax>
std::pair<Tensor, Tensor> cumExtreme(const char *op, const Tensor &a, int64_t dim) {
  int64_t d = wrapDim(dim, a.dim(), op);
  Tensor in = a.to(computeDType(a.dtype())).contiguous();
  Tensor values = Tensor::empty(a.sizes(), in.dtype(), a.device());
  Tensor indices = Tensor::empty(a.sizes(), DType::Int64, a.device());
  LineShape s = lineShape(a, d);
  dispatchCompute(in.dtype(), [&]<typename T>() {
    struct Acc {
      T value;
      int64_t index;
    };
    T *v = values.data<T>();
    int64_t *ix = indices.data<int64_t>();
    scanLines(
        in.data<T>(), s.outer, s.n, s.inner, Acc{T(), -1},
        [](Acc &acc, T x, int64_t i) {
          bool take = acc.index < 0 || isNan(x) ||
                      (!isNan(acc.value) && (kMax ? x >= acc.value : x <= acc.value));
          if (take)
            acc = {x, i};
        },
        [v, ix](int64_t p, const Acc &acc) {
          v[p] = acc.value;
          ix[p] = acc.index;
        });
  });
  return {values.to(a.dtype()), indices};
}

/// log(exp(x) + exp(y)) without overflow; equal infinities stay themselves.
template <typename T> T logAddExp(T x, T y) {
  if (isNan(x) || isNan(y))
    return x + y;
  T lo = std::min(x, y), hi = std::max(x, y);
  if (lo == hi && std::isinf(lo))
    return lo;
  return hi + std::log1p(std::exp(lo - hi));
}

} // namespace

Tensor cumsum(const Tensor &a, int64_t dim, std::optional<DType> dtype) {
  if (onDevice({&a}))
    return deviceOp("cumsum", {a},
                    joinAttrs({fmt::format("dim = {}", dim),
                               dtype ? dtypeAttr("dtype", *dtype) : std::string()}));
  return cumulative("cumsum", false, a, dim, dtype);
}

Tensor cumprod(const Tensor &a, int64_t dim, std::optional<DType> dtype) {
  if (onDevice({&a}))
    return deviceOp("cumprod", {a},
                    joinAttrs({fmt::format("dim = {}", dim),
                               dtype ? dtypeAttr("dtype", *dtype) : std::string()}));
  return cumulative("cumprod", true, a, dim, dtype);
}

namespace {

/// The gradient of cumprod along the last dim of contiguous [lines, n] doubles, exact with
/// zeros: grad_i = (x_0 ... x_{i-1}) * Q_i, where Q_i = g_i + x_{i+1} Q_{i+1} gathers every later
/// output's share (a reverse linear scan, no division).
void cumprodGradLines(const double *x, const double *g, double *out, int64_t lines, int64_t n) {
  for (int64_t l = 0; l < lines; ++l, x += n, g += n, out += n) {
    double q = 0;
    for (int64_t i = n - 1; i >= 0; --i) {
      q = g[i] + (i + 1 < n ? x[i + 1] * q : 0.0);
      out[i] = q;
    }
    double before = 1;
    for (int64_t i = 0; i < n; ++i) {
      out[i] *= before;
      before *= x[i];
    }
  }
}

} // namespace

Tensor cumprodBackward(const Tensor &x, const Tensor &g, int64_t dim) {
  if (x.dim() == 0)
    return g.to(x.dtype());
  if (dim < 0)
    dim += x.dim();
  int64_t last = x.dim() - 1;
  Tensor xs = movedim(x, {dim}, {last}).to(DType::Float64).contiguous();
  Tensor gs = movedim(g, {dim}, {last}).to(DType::Float64).contiguous();
  Tensor out = Tensor::empty(xs.sizes(), DType::Float64);
  int64_t n = xs.size(last);
  cumprodGradLines(xs.data<double>(), gs.data<double>(), out.data<double>(), n ? xs.numel() / n : 0,
                   n);
  return movedim(out, {last}, {dim}).to(x.dtype()).contiguous();
}

std::pair<Tensor, Tensor> cummax(const Tensor &a, int64_t dim) {
  return cumExtreme<true>("cummax", a, dim);
}

std::pair<Tensor, Tensor> cummin(const Tensor &a, int64_t dim) {
  return cumExtreme<false>("cummin", a, dim);
}

Tensor logcumsumexp(const Tensor &a, int64_t dim) {
  int64_t d = wrapDim(dim, a.dim(), "logcumsumexp");
  KILN_CHECK_KIND(NotImplemented, isFloating(a.dtype()),
                  "logcumsumexp: not implemented for '{}' (expected a floating point input)",
                  dtypeName(a.dtype()));
  Tensor in = a.to(computeDType(a.dtype())).contiguous();
  Tensor out = Tensor::empty(a.sizes(), in.dtype(), a.device());
  LineShape s = lineShape(a, d);
  auto run = [&]<typename T>() {
    T *o = out.data<T>();
    scanLines(
        in.data<T>(), s.outer, s.n, s.inner, -std::numeric_limits<double>::infinity(),
        [](double &acc, T v, int64_t) { acc = logAddExp(acc, double(v)); },
        [o](int64_t p, double acc) { o[p] = static_cast<T>(acc); });
  };
  if (in.dtype() == DType::Float64)
    run.template operator()<double>();
  else
    run.template operator()<float>();
  return out.to(a.dtype());
}

} // namespace kiln::ops

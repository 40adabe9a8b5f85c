// Window max/average kernels behind every pooling op, parallel over planes.
#include "runtime/fast_math.h"
#include "runtime/ops/pool_impl.h"

#include "runtime/thread_pool.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>

namespace kiln::ops::detail {

AxisWindows slidingWindows(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                           int64_t dilation) {
  AxisWindows w;
  w.step = dilation;
  for (int64_t o = 0; o < out; ++o) {
    int64_t start = o * stride - padding;
    int64_t end = start + (kernel - 1) * dilation + 1;
    // The first tap at or after 0, keeping the dilation grid.
    int64_t lo = start >= 0 ? start : start + ((-start + dilation - 1) / dilation) * dilation;
    w.lo.push_back(lo);
    w.hi.push_back(std::max(lo, std::min(end, in)));
    // torch's avg_pool counts padding up to the padded edge only: min(start + k, in + pad).
    w.padded.push_back(std::min(start + kernel, in + padding) - start);
  }
  return w;
}

AxisWindows adaptiveWindows(int64_t in, int64_t out) {
  AxisWindows w;
  for (int64_t o = 0; o < out; ++o) {
    int64_t lo = (o * in) / out;
    int64_t hi = ((o + 1) * in + out - 1) / out;
    w.lo.push_back(lo);
    w.hi.push_back(hi);
    w.padded.push_back(hi - lo);
  }
  return w;
}

namespace {

/// Runs fn(plane) over all planes, in parallel when the work is large.
template <typename Fn> void forEachPlane(const PoolGeometry &g, Fn &&fn) {
  int64_t taps = 1;
  for (const AxisWindows &a : g.axes)
    taps *= std::max<int64_t>(1, a.size() ? (a.hi[0] - a.lo[0]) / a.step + 1 : 1);
  int64_t work = std::max<int64_t>(1, g.outVolume() * taps);
  int64_t grain = std::max<int64_t>(1, kElementwiseGrain / work);
  parallelFor(0, g.planes, grain, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p)
      fn(p);
  });
}

/// Calls fn(outIndex, d, h, w windows) for each output position of a plane.
template <typename Fn> void forEachWindow(const PoolGeometry &g, Fn &&fn) {
  const AxisWindows &ad = g.axes[0], &ah = g.axes[1], &aw = g.axes[2];
  int64_t o = 0;
  for (int64_t od = 0; od < ad.size(); ++od)
    for (int64_t oh = 0; oh < ah.size(); ++oh)
      for (int64_t ow = 0; ow < aw.size(); ++ow)
        fn(o++, od, oh, ow);
}

} // namespace

/// The tiling width of an axis whose windows are [k*o, k*o + k) with no dilation (a pool with
/// stride == kernel, no padding: max_pool2d(x, 2)), or 0.
int64_t tileWidth(const AxisWindows &a) {
  if (a.step != 1 || a.size() == 0)
    return 0;
  int64_t k = a.hi[0] - a.lo[0];
  for (int64_t o = 0; o < a.size(); ++o)
    if (a.lo[o] != o * k || a.hi[o] != o * k + k)
      return 0;
  return k;
}

/// best, bestAt = v, at when v > best or v is NaN (torch's choice: NaN wins, a later NaN over an
/// earlier one), as bit selects: GCC turns a `?:` back into a branch, which data mispredicts half
/// the time (the tiled pool below spent 60 % of its time on those).
template <typename T>
[[gnu::always_inline]] inline void takeIfGreater(T v, int64_t at, T &best, int64_t &bestAt) {
  bool take = v > best;
  if constexpr (std::is_floating_point_v<T>)
    take = take | (v != v);
  if constexpr (std::is_same_v<T, float>) {
    best = selectBits(-static_cast<int32_t>(take), v, best);
  } else if constexpr (std::is_same_v<T, double>) {
    const int64_t m = -static_cast<int64_t>(take);
    best = std::bit_cast<double>((std::bit_cast<int64_t>(v) & m) |
                                 (std::bit_cast<int64_t>(best) & ~m));
  } else {
    best = take ? v : best;
  }
  const int64_t m = -static_cast<int64_t>(take);
  bestAt = (at & m) | (bestAt & ~m);
}

/// windowMax of 2-D windows that tile the plane: each output row reads k input rows straight
/// through (the generic loop's per-window bookkeeping made a 2 x 2 pool cost 5 ns per input
/// element). Same comparison and index choice as the generic loop.
template <typename T>
void tiledWindowMax(const PoolGeometry &g, int64_t kh, int64_t kw, const T *in, T *out,
                    int64_t *indices) {
  const int64_t outH = g.axes[1].size(), outW = g.axes[2].size(), wSize = g.in[2];
  forEachPlane(g, [&](int64_t p) {
    const T *src = in + p * g.inVolume();
    T *dst = out + p * g.outVolume();
    int64_t *idx = indices ? indices + p * g.outVolume() : nullptr;
    for (int64_t oh = 0; oh < outH; ++oh) {
      for (int64_t ow = 0; ow < outW; ++ow) {
        T best = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                      : std::numeric_limits<T>::lowest();
        int64_t bestAt = oh * kh * wSize + ow * kw;
        for (int64_t h = oh * kh; h < oh * kh + kh; ++h) {
          const int64_t row = h * wSize;
          for (int64_t w = ow * kw; w < ow * kw + kw; ++w)
            takeIfGreater(src[row + w], row + w, best, bestAt);
        }
        dst[oh * outW + ow] = best;
        if (idx)
          idx[oh * outW + ow] = bestAt;
      }
    }
  });
}

template <typename T> void windowMax(const PoolGeometry &g, const T *in, T *out, int64_t *indices) {
  const AxisWindows &ad = g.axes[0], &ah = g.axes[1], &aw = g.axes[2];
  if (g.in[0] == 1 && ad.size() == 1 && ad.lo[0] == 0 && ad.hi[0] == 1) {
    int64_t kh = tileWidth(ah), kw = tileWidth(aw);
    if (kh > 0 && kw > 0)
      return tiledWindowMax(g, kh, kw, in, out, indices);
  }
  const int64_t hSize = g.in[1], wSize = g.in[2];
  forEachPlane(g, [&](int64_t p) {
    const T *src = in + p * g.inVolume();
    T *dst = out + p * g.outVolume();
    int64_t *idx = indices ? indices + p * g.outVolume() : nullptr;
    forEachWindow(g, [&](int64_t o, int64_t od, int64_t oh, int64_t ow) {
      T best = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                    : std::numeric_limits<T>::lowest();
      int64_t bestAt = (ad.lo[od] * hSize + ah.lo[oh]) * wSize + aw.lo[ow];
      // NaN beats everything, and a later NaN beats an earlier one (torch's index choice).
      for (int64_t d = ad.lo[od]; d < ad.hi[od]; d += ad.step)
        for (int64_t h = ah.lo[oh]; h < ah.hi[oh]; h += ah.step) {
          int64_t row = (d * hSize + h) * wSize;
          for (int64_t w = aw.lo[ow]; w < aw.hi[ow]; w += aw.step)
            takeIfGreater(src[row + w], row + w, best, bestAt);
        }
      dst[o] = best;
      if (idx)
        idx[o] = bestAt;
    });
  });
}

template <typename T>
void windowAvg(const PoolGeometry &g, const T *in, T *out, const AvgDivisor &divisor) {
  const AxisWindows &ad = g.axes[0], &ah = g.axes[1], &aw = g.axes[2];
  const int64_t hSize = g.in[1], wSize = g.in[2];
  using Acc = std::conditional_t<std::is_floating_point_v<T>, T, int64_t>;
  forEachPlane(g, [&](int64_t p) {
    const T *src = in + p * g.inVolume();
    T *dst = out + p * g.outVolume();
    forEachWindow(g, [&](int64_t o, int64_t od, int64_t oh, int64_t ow) {
      int64_t count = (ad.hi[od] - ad.lo[od]) * (ah.hi[oh] - ah.lo[oh]) * (aw.hi[ow] - aw.lo[ow]);
      if (count <= 0) {
        dst[o] = T(0);
        return;
      }
      Acc sum = 0;
      for (int64_t d = ad.lo[od]; d < ad.hi[od]; ++d)
        for (int64_t h = ah.lo[oh]; h < ah.hi[oh]; ++h) {
          const T *row = src + (d * hSize + h) * wSize;
          for (int64_t w = aw.lo[ow]; w < aw.hi[ow]; ++w)
            sum += row[w];
        }
      int64_t div = divisor.override          ? *divisor.override
                    : divisor.countIncludePad ? ad.padded[od] * ah.padded[oh] * aw.padded[ow]
                                              : count;
      dst[o] = static_cast<T>(sum / static_cast<Acc>(div));
    });
  });
}

#define KILN_INSTANTIATE_POOL(T)                                                                   \
  template void windowMax<T>(const PoolGeometry &, const T *, T *, int64_t *);                     \
  template void windowAvg<T>(const PoolGeometry &, const T *, T *, const AvgDivisor &);
KILN_INSTANTIATE_POOL(uint8_t)
KILN_INSTANTIATE_POOL(int8_t)
KILN_INSTANTIATE_POOL(int16_t)
KILN_INSTANTIATE_POOL(int32_t)
KILN_INSTANTIATE_POOL(int64_t)
KILN_INSTANTIATE_POOL(float)
KILN_INSTANTIATE_POOL(double)
#undef KILN_INSTANTIATE_POOL

} // namespace kiln::ops::detail

#pragma once
/// Internal window kernels shared by the pooling ops. Every pool (max/avg, fixed/adaptive,
/// 1-D/2-D/3-D) is described per spatial axis by the input range each output position reads,
/// so one max kernel and one average kernel serve them all. Not part of the public op API.

#include "runtime/tensor.h"

#include <array>
#include <optional>
#include <vector>

namespace kiln::ops::detail {

/// The input positions each output position of one axis reads: lo, lo + step, ... < hi.
/// `padded` is the window length counting padding (avg_pool's count_include_pad divisor).
struct AxisWindows {
  std::vector<int64_t> lo, hi, padded;
  int64_t step = 1;
  int64_t size() const { return static_cast<int64_t>(lo.size()); }
};

/// Windows of a strided (optionally dilated, padded) pool along an axis of length `in`.
AxisWindows slidingWindows(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                           int64_t dilation);
/// Windows of an adaptive pool: [floor(o * in / out), ceil((o + 1) * in / out)).
AxisWindows adaptiveWindows(int64_t in, int64_t out);

/// A pool over `planes` contiguous images of size in[0] x in[1] x in[2] (size-1 leading axes
/// for 1-D and 2-D pools).
struct PoolGeometry {
  int64_t planes = 0;
  std::array<int64_t, 3> in{1, 1, 1};
  std::array<AxisWindows, 3> axes;
  int64_t outVolume() const { return axes[0].size() * axes[1].size() * axes[2].size(); }
  int64_t inVolume() const { return in[0] * in[1] * in[2]; }
};

/// Max over each window (NaN wins, like torch); indices (may be null) get the flat position of
/// the max within its input plane.
template <typename T> void windowMax(const PoolGeometry &g, const T *in, T *out, int64_t *indices);

/// How avg_pool divides a window's sum.
struct AvgDivisor {
  bool countIncludePad = true;
  std::optional<int64_t> override;
};

/// Mean over each window; an empty window gives 0. Integer types divide with truncation.
template <typename T>
void windowAvg(const PoolGeometry &g, const T *in, T *out, const AvgDivisor &divisor);

} // namespace kiln::ops::detail

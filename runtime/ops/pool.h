#pragma once
/// Eager pooling with PyTorch semantics: F.max_poolNd, F.avg_poolNd, F.adaptive_avg_poolNd and
/// F.adaptive_max_poolNd for 1 to 3 spatial dims, batched ([N, C, *spatial]) or unbatched
/// ([C, *spatial]). Dtypes follow torch's CPU kernels (floating types everywhere; integers for
/// max_pool2d/3d and int64 for avg_pool); float16/bfloat16 are computed in float32.

#include "runtime/tensor.h"

#include <optional>
#include <utility>
#include <vector>

namespace kiln::ops {

/// Options of max/avg pooling; each list holds one value or one per spatial dim. An empty
/// `stride` means stride = kernelSize (torch's default). avg_pool ignores `dilation`.
struct PoolOptions {
  Shape kernelSize;
  Shape stride;
  Shape padding{0};
  Shape dilation{1};
  bool ceilMode = false;
};

/// F.max_poolNd: the values and, when withIndices, int64 indices of each max within its
/// flattened input plane (an undefined Tensor otherwise).
std::pair<Tensor, Tensor> maxPool(int64_t nd, const Tensor &input, const PoolOptions &opts,
                                  bool withIndices);

/// The input gradient of a max pooling from its output gradient and the indices it returned:
/// each output's gradient added at its max's position in the flattened input plane. Planes are
/// the leading dims (all but the last `spatialDims` of inputSizes). CPU, float types.
Tensor maxPoolBackward(const Tensor &grad, const Tensor &indices, IntList inputSizes,
                       int64_t spatialDims);

/// F.avg_poolNd with count_include_pad and an optional divisor_override.
Tensor avgPool(int64_t nd, const Tensor &input, const PoolOptions &opts, bool countIncludePad,
               std::optional<int64_t> divisorOverride);

/// One output size per spatial dim; nullopt keeps that dim's input size (torch's None).
using AdaptiveSize = std::vector<std::optional<int64_t>>;

/// F.adaptive_avg_poolNd.
Tensor adaptiveAvgPool(int64_t nd, const Tensor &input, const AdaptiveSize &outputSize);
/// F.adaptive_max_poolNd: values and (when withIndices) int64 indices, like maxPool.
std::pair<Tensor, Tensor> adaptiveMaxPool(int64_t nd, const Tensor &input,
                                          const AdaptiveSize &outputSize, bool withIndices);

} // namespace kiln::ops

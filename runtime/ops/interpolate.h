#pragma once
/// Eager resampling behind F.interpolate: nearest / nearest-exact and (bi/tri)linear modes over
/// [N, C, *spatial] inputs with 1 to 3 spatial dims. Source coordinates follow torch's CPU
/// kernels exactly (including the user's scale factors when given), so results match torch.

#include "runtime/tensor.h"

#include <optional>
#include <vector>

namespace kiln::ops {

/// Per spatial dim, the user's scale factor if one was given (torch maps output to input
/// coordinates with 1 / scale then, rather than with in / out).
using UpsampleScales = std::vector<std::optional<double>>;

/// 'nearest' (src = floor(dst * scale)) or, when `exact`, 'nearest-exact'
/// (src = floor((dst + 0.5) * scale)). Floating types and uint8.
Tensor upsampleNearest(const Tensor &input, IntList outputSize, const UpsampleScales &scales,
                       bool exact);

/// 'linear' / 'bilinear' / 'trilinear' for 1 / 2 / 3 spatial dims, with torch's align_corners
/// rule. Floating types, and uint8 for bilinear.
Tensor upsampleLinear(const Tensor &input, IntList outputSize, bool alignCorners,
                      const UpsampleScales &scales);

/// The gradients of the input of upsampleNearest / upsampleLinear (of sizes `inputSize`) from
/// the output's `grad`: each output gradient added back to the inputs it read, with its weights.
Tensor upsampleNearestBackward(const Tensor &grad, IntList inputSize, const UpsampleScales &scales,
                               bool exact);
Tensor upsampleLinearBackward(const Tensor &grad, IntList inputSize, bool alignCorners,
                              const UpsampleScales &scales);

} // namespace kiln::ops

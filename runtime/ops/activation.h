#pragma once
/// Eager activation functions (torch.nn.functional's elementwise ones). Most are defined for
/// floating dtypes only, as in torch; relu, relu6, hardtanh and threshold also accept integers.
/// float16/bfloat16 are computed in float32.

#include "runtime/tensor.h"

#include <string>

namespace kiln::ops {

/// max(a, 0); NaN stays NaN; integers allowed, bool rejected.
Tensor relu(const Tensor &a);
/// min(max(a, 0), 6).
Tensor relu6(const Tensor &a);
/// Clamps to [minVal, maxVal]; integers allowed (unsigned only with non-negative limits).
Tensor hardtanh(const Tensor &a, const Scalar &minVal = Scalar(-1.0),
                const Scalar &maxVal = Scalar(1.0));
/// a > threshold ? a : value.
Tensor threshold(const Tensor &a, const Scalar &threshold, const Scalar &value);
/// approximate: "none" (exact, with erf) or "tanh".
Tensor gelu(const Tensor &a, const std::string &approximate = "none");
/// The gradient of gelu at x times grad, in one pass (the eager backward's fused rule).
Tensor geluBackward(const Tensor &grad, const Tensor &x, const std::string &approximate = "none");
/// a * sigmoid(a).
Tensor silu(const Tensor &a);
/// log(1 + exp(beta * a)) / beta, linear where beta * a > threshold.
Tensor softplus(const Tensor &a, double beta = 1.0, double threshold = 20.0);
Tensor leakyRelu(const Tensor &a, double negativeSlope = 0.01);
/// a > 0 ? a : alpha * (exp(a) - 1).
Tensor elu(const Tensor &a, double alpha = 1.0);
/// Scaled elu with the self-normalizing constants.
Tensor selu(const Tensor &a);
/// max(0, a) + min(0, alpha * (exp(a / alpha) - 1)).
Tensor celu(const Tensor &a, double alpha = 1.0);
/// relu6(a + 3) / 6.
Tensor hardsigmoid(const Tensor &a);
/// a * relu6(a + 3) / 6.
Tensor hardswish(const Tensor &a);
/// a * tanh(softplus(a)).
Tensor mish(const Tensor &a);
/// log(sigmoid(a)), computed without overflow.
Tensor logsigmoid(const Tensor &a);
/// a / (1 + |a|); integers promote to float.
Tensor softsign(const Tensor &a);
/// a - tanh(a); integers promote to float.
Tensor tanhshrink(const Tensor &a);
/// a where |a| > lambd, else 0.
Tensor hardshrink(const Tensor &a, double lambd = 0.5);
/// a - lambd, a + lambd or 0, shrinking a toward 0 by lambd.
Tensor softshrink(const Tensor &a, double lambd = 0.5);

} // namespace kiln::ops

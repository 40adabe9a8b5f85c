#pragma once
/// Eager loss functions with PyTorch semantics (the forms of torch.nn.functional).
///
/// Optional tensors (weight, pos_weight) are undefined Tensors when absent. Every loss reduces
/// with `Reduction`: None keeps one value per element (or per sample for the class losses),
/// Sum and Mean return 0-d tensors; the mean of zero elements is NaN, as in torch. Sums are
/// accumulated in double (int64 for l1_loss on integers).

#include "runtime/tensor.h"

#include <cstdint>

namespace kiln::ops {

/// torch's reduction enum (torch.nn._reduction.get_enum): the values are part of the API of
/// torch.kl_div and torch.binary_cross_entropy_with_logits.
enum class Reduction : int64_t { None = 0, Mean = 1, Sum = 2 };

/// Reduction from torch's integer code; anything else raises ValueError naming `op`.
Reduction reductionFromInt(int64_t code, const char *op);

/// Negative log likelihood of log-probabilities input (C), (N, C) or (N, C, d1, ...) at the
/// class indices in target (int64 or uint8). Targets equal to ignoreIndex contribute nothing;
/// Mean divides by the summed weight of the counted targets.
Tensor nllLoss(const Tensor &input, const Tensor &target, const Tensor &weight, Reduction reduction,
               int64_t ignoreIndex);

/// log_softmax over the class dim (dim 1, or 0 for unbatched input) fused with nll_loss for
/// class-index targets, or with -sum(target * log_softmax) for class-probability targets (a
/// floating target of the input's shape). labelSmoothing in [0, 1] mixes in the uniform target.
Tensor crossEntropy(const Tensor &input, const Tensor &target, const Tensor &weight,
                    Reduction reduction, int64_t ignoreIndex, double labelSmoothing);

/// (input - target)^2, broadcast; with a weight (input's shape), Mean is sum(w*l) / sum(w).
Tensor mseLoss(const Tensor &input, const Tensor &target, const Tensor &weight,
               Reduction reduction);
/// |input - target|, broadcast; integers are allowed for None and Sum (Sum gives int64).
Tensor l1Loss(const Tensor &input, const Tensor &target, const Tensor &weight, Reduction reduction);
/// Quadratic below beta, linear above: 0.5 d^2 / beta if |d| < beta else |d| - 0.5 beta.
Tensor smoothL1Loss(const Tensor &input, const Tensor &target, Reduction reduction, double beta);
/// 0.5 d^2 if |d| <= delta else delta (|d| - 0.5 delta); the result has the input's dtype.
/// With a weight, Mean is mean(w * l).
Tensor huberLoss(const Tensor &input, const Tensor &target, const Tensor &weight,
                 Reduction reduction, double delta);
/// Kullback-Leibler divergence target * (log target - input) (xlogy, so target 0 gives 0), or
/// exp(target) * (target - input) when logTarget.
Tensor klDiv(const Tensor &input, const Tensor &target, Reduction reduction, bool logTarget);

/// -w (t log x + (1 - t) log(1 - x)) for probabilities x in [0, 1]; logs are clamped at -100.
Tensor binaryCrossEntropy(const Tensor &input, const Tensor &target, const Tensor &weight,
                          Reduction reduction);
/// The same on logits, computed stably as (1 - t) x + (1 + (pw - 1) t) softplus(-x), times w.
Tensor binaryCrossEntropyWithLogits(const Tensor &input, const Tensor &target, const Tensor &weight,
                                    const Tensor &posWeight, Reduction reduction);

} // namespace kiln::ops

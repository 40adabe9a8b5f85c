#pragma once
/// Eager normalization ops with PyTorch semantics (torch.layer_norm, torch.rms_norm,
/// torch.group_norm, torch.batch_norm, torch.instance_norm, F.normalize).
///
/// Optional tensor arguments (weight, bias, running stats) are passed as undefined Tensors when
/// absent. Inputs must be floating point; float16/bfloat16 are computed in float32 and rounded
/// once. Statistics use two passes over the data with double accumulation, so results do not
/// degrade for large rows or large means. The output always has the input's dtype.

#include "runtime/tensor.h"

#include <optional>

namespace kiln::ops {

/// Normalizes over the trailing dims given by normalizedShape: (x - mean) / sqrt(var + eps),
/// then * weight + bias (both of shape normalizedShape, optional). var is biased.
Tensor layerNorm(const Tensor &input, IntList normalizedShape, const Tensor &weight,
                 const Tensor &bias, double eps);

/// layer_norm's gradients in one pass per row (mean and rstd recomputed): for the input, the
/// weight and the bias, each only when asked for (undefined otherwise). CPU only.
struct LayerNormGrads {
  Tensor input, weight, bias;
};
LayerNormGrads layerNormBackward(const Tensor &grad, const Tensor &input, IntList normalizedShape,
                                 const Tensor &weight, double eps, bool needInput, bool needWeight,
                                 bool needBias);

/// x / sqrt(mean(x^2) + eps) * weight over the trailing normalizedShape dims. eps defaults to
/// the machine epsilon of the compute type (torch 2.4+ semantics).
Tensor rmsNorm(const Tensor &input, IntList normalizedShape, const Tensor &weight,
               std::optional<double> eps);

/// input (N, C, *): statistics per (sample, group of C/numGroups channels), affine per channel.
Tensor groupNorm(const Tensor &input, int64_t numGroups, const Tensor &weight, const Tensor &bias,
                 double eps);

/// input (N, C, *): per-channel normalization. Training uses the batch's statistics (biased var
/// to normalize) and, when given, updates runningMean/runningVar in place with the unbiased
/// var: r = (1 - momentum) * r + momentum * stat. Evaluation uses the running statistics.
Tensor batchNorm(const Tensor &input, const Tensor &weight, const Tensor &bias,
                 const Tensor &runningMean, const Tensor &runningVar, bool training,
                 double momentum, double eps);

/// batch_norm's gradients per channel in one pass over the data after the statistics: with the
/// batch's statistics (training, or no running stats: pass undefined running tensors) or with the
/// running ones (evaluation, where they are constants). Each only when asked for. CPU only.
struct BatchNormGrads {
  Tensor input, weight, bias;
};
BatchNormGrads batchNormBackward(const Tensor &grad, const Tensor &input, const Tensor &weight,
                                 const Tensor &runningMean, const Tensor &runningVar, double eps,
                                 bool needInput, bool needWeight, bool needBias);

/// input (N, C, *): per-(sample, channel) normalization when useInputStats (running stats, if
/// given, are updated with the batch average of the per-sample stats); otherwise the running
/// stats normalize, as in batchNorm's evaluation mode.
Tensor instanceNorm(const Tensor &input, const Tensor &weight, const Tensor &bias,
                    const Tensor &runningMean, const Tensor &runningVar, bool useInputStats,
                    double momentum, double eps);

/// x / max(||x||_p, eps) along dim (F.normalize); p may be 0, +-inf or any real number.
Tensor normalize(const Tensor &input, double p, int64_t dim, double eps);

} // namespace kiln::ops

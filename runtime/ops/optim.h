#pragma once
/// Optimizer updates of a whole parameter group in one pass (the `foreach`/`fused` paths of
/// kiln.optim): every state tensor is read and written once per element, where the
/// single-tensor formulation makes a temporary per operation, and the group's elements are
/// one parallel loop (one dispatch per step, not one per parameter).

#include "runtime/tensor.h"

#include <span>

namespace kiln::ops {

struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
  bool decoupledWeightDecay = false; // AdamW
  bool amsgrad = false, maximize = false;
};

/// One Adam/AdamW step of every parameter in place, steps[i] being parameter i's step count
/// after this update (1 for the first). Each parameter, its grad, expAvg, expAvgSq (and
/// maxExpAvgSq with amsgrad; else the span is empty) must be contiguous CPU tensors of one
/// floating dtype and shape.
void adamMultiStep_(std::span<Tensor> params, std::span<const Tensor> grads,
                    std::span<Tensor> expAvgs, std::span<Tensor> expAvgSqs,
                    std::span<Tensor> maxExpAvgSqs, std::span<const double> steps,
                    const AdamOptions &opts);

struct SgdOptions {
  double lr = 1e-3, momentum = 0, dampening = 0, weightDecay = 0;
  bool nesterov = false, maximize = false;
};

/// One SGD step of every parameter in place (torch.optim.SGD's update: weight decay, then the
/// momentum buffer, Nesterov, maximize), rounding as torch's single-tensor update does. With
/// momentum, bufs[i] is parameter i's buffer: written with the (decayed) gradient where
/// firstStep[i], updated otherwise. Parameters, grads (and buffers) must be contiguous CPU
/// tensors of one floating dtype and shape.
void sgdMultiStep_(std::span<Tensor> params, std::span<const Tensor> grads, std::span<Tensor> bufs,
                   std::span<const uint8_t> firstStep, const SgdOptions &opts);

struct RmspropOptions {
  double lr = 1e-2, alpha = 0.99, eps = 1e-8, weightDecay = 0, momentum = 0;
  bool centered = false, maximize = false;
};

/// One RMSprop step of every parameter in place (torch.optim.RMSprop's update), rounding as
/// torch's single-tensor update does. gradAvgs (centered) and bufs (momentum > 0) are empty
/// when the option is off.
void rmspropMultiStep_(std::span<Tensor> params, std::span<const Tensor> grads,
                       std::span<Tensor> squareAvgs, std::span<Tensor> gradAvgs,
                       std::span<Tensor> bufs, const RmspropOptions &opts);

struct AdagradOptions {
  double lr = 1e-2, lrDecay = 0, eps = 1e-10, weightDecay = 0;
  bool maximize = false;
};

/// One Adagrad step of every parameter in place, steps[i] being parameter i's step count after
/// this update (it scales the learning rate by 1 / (1 + (step - 1) lr_decay)).
void adagradMultiStep_(std::span<Tensor> params, std::span<const Tensor> grads,
                       std::span<Tensor> sums, std::span<const double> steps,
                       const AdagradOptions &opts);

} // namespace kiln::ops

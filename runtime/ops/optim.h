#pragma once
/// Optimizer updates in one pass over each parameter (the `foreach`/`fused` paths of
/// kiln.optim): every state tensor is read and written once per element, where the
/// single-tensor formulation makes a temporary per operation.

#include "runtime/tensor.h"

namespace kiln::ops {

struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
  bool decoupledWeightDecay = false; // AdamW
  bool amsgrad = false, maximize = false;
};

/// One Adam/AdamW step of `param` in place, `step` being the step count after this update
/// (1 for the first). param, grad, expAvg, expAvgSq (and maxExpAvgSq with amsgrad) must be
/// contiguous CPU tensors of one floating dtype and shape.
void adamStep_(Tensor &param, const Tensor &grad, Tensor &expAvg, Tensor &expAvgSq,
               Tensor &maxExpAvgSq, double step, const AdamOptions &opts);

} // namespace kiln::ops

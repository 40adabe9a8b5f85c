#pragma once
/// Eager softmax and log_softmax along one dim: max-subtracted so large inputs cannot overflow,
/// float16/bfloat16 computed in float32, sums accumulated in double.

#include "runtime/tensor.h"

#include <optional>

namespace kiln::ops {

/// torch.softmax: exp(x - max) / sum(exp(x - max)) along dim; `dtype` casts the input first.
Tensor softmax(const Tensor &a, int64_t dim, std::optional<DType> dtype = {});
/// torch.log_softmax: x - max - log(sum(exp(x - max))) along dim.
Tensor logSoftmax(const Tensor &a, int64_t dim, std::optional<DType> dtype = {});
/// The input gradient of softmax (log: of log_softmax) from its output and the output's
/// gradient, in one pass per row; undefined when dim is not the last one (the caller composes
/// it from ops then).
Tensor softmaxBackward(const Tensor &grad, const Tensor &output, int64_t dim, bool log);

} // namespace kiln::ops

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

} // namespace kiln::ops

#pragma once
/// Eager scans along one dim with PyTorch semantics: cumsum/cumprod (integer and bool inputs
/// accumulate in int64, floats in double), cummax/cummin (values and indices) and logcumsumexp.

#include "runtime/tensor.h"

#include <optional>
#include <utility>

namespace kiln::ops {

/// torch.cumsum: integer and bool inputs give int64; `dtype` casts the input first.
Tensor cumsum(const Tensor &a, int64_t dim, std::optional<DType> dtype = {});
/// torch.cumprod: like cumsum, with products.
Tensor cumprod(const Tensor &a, int64_t dim, std::optional<DType> dtype = {});
/// The gradient of cumprod(x) along dim given the output's gradient `grad`, in x's dtype:
/// exact with zeros (a reverse scan, no division), computed in double.
Tensor cumprodBackward(const Tensor &x, const Tensor &grad, int64_t dim);
/// torch.cummax: running max and the index of its latest occurrence (NaN sticks once seen).
std::pair<Tensor, Tensor> cummax(const Tensor &a, int64_t dim);
/// torch.cummin: running min and the index of its latest occurrence.
std::pair<Tensor, Tensor> cummin(const Tensor &a, int64_t dim);
/// torch.logcumsumexp: log of the running sum of exp, computed without overflow.
Tensor logcumsumexp(const Tensor &a, int64_t dim);

} // namespace kiln::ops

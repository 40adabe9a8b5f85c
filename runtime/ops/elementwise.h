#pragma once
/// Eager elementwise ops with PyTorch semantics: broadcasting, type promotion (Python numbers
/// arrive as wrapped-number tensors, see Tensor::wrapScalar), float16/bfloat16 computed in
/// float32. In-place forms (`add_`) compute out of place and write back under torch's casting rule.

#include "runtime/tensor.h"

namespace kiln::ops {

// Binary arithmetic.
Tensor add(const Tensor &a, const Tensor &b, const Scalar &alpha = Scalar(int64_t{1}));
Tensor sub(const Tensor &a, const Tensor &b, const Scalar &alpha = Scalar(int64_t{1}));
Tensor mul(const Tensor &a, const Tensor &b);
/// roundingMode: "" (true division), "trunc" or "floor".
Tensor div(const Tensor &a, const Tensor &b, const std::string &roundingMode = "");

// Unary.
Tensor neg(const Tensor &a);
Tensor exp(const Tensor &a);

/// In-place: self = result cast to self's dtype; throws when the result type cannot be cast
/// (e.g. a float result into an int tensor), as torch does.
Tensor &inplace(const char *op, Tensor &self, const Tensor &result);

} // namespace kiln::ops

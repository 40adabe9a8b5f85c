#pragma once
/// Eager comparison, logical and bitwise ops. Comparisons compute in the promoted dtype of their
/// operands and return bool; logical ops treat any nonzero as true; bitwise ops are defined for
/// integers and bool only, as in torch.

#include "runtime/tensor.h"

namespace kiln::ops {

// Comparisons (bool results).
Tensor eq(const Tensor &a, const Tensor &b);
Tensor ne(const Tensor &a, const Tensor &b);
Tensor lt(const Tensor &a, const Tensor &b);
Tensor le(const Tensor &a, const Tensor &b);
Tensor gt(const Tensor &a, const Tensor &b);
Tensor ge(const Tensor &a, const Tensor &b);
/// True when a and b have the same shape and equal elements (torch.equal).
bool equal(const Tensor &a, const Tensor &b);
/// |a - b| <= atol + rtol * |b| elementwise (equal infinities are close; NaNs are close to each
/// other only with equalNan). a and b must share a dtype.
Tensor isclose(const Tensor &a, const Tensor &b, double rtol = 1e-5, double atol = 1e-8,
               bool equalNan = false);
/// isclose everywhere.
bool allclose(const Tensor &a, const Tensor &b, double rtol = 1e-5, double atol = 1e-8,
              bool equalNan = false);

// Logical ops (bool results, nonzero is true).
Tensor logicalAnd(const Tensor &a, const Tensor &b);
Tensor logicalOr(const Tensor &a, const Tensor &b);
Tensor logicalXor(const Tensor &a, const Tensor &b);
Tensor logicalNot(const Tensor &a);

// Bitwise ops: integers and bool only (`~` on bool is logical not).
Tensor bitwiseAnd(const Tensor &a, const Tensor &b);
Tensor bitwiseOr(const Tensor &a, const Tensor &b);
Tensor bitwiseXor(const Tensor &a, const Tensor &b);
Tensor bitwiseNot(const Tensor &a);
/// a << b; shifts by a negative amount or by at least the bit width give 0, as in torch.
Tensor bitwiseLeftShift(const Tensor &a, const Tensor &b);
/// a >> b (arithmetic for signed types); out-of-range shifts fill with the sign bit.
Tensor bitwiseRightShift(const Tensor &a, const Tensor &b);

} // namespace kiln::ops

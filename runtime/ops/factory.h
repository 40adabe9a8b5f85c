#pragma once
/// Tensor factories with PyTorch semantics: filled tensors (zeros, ones, full, eye), ranges
/// (arange, linspace, logspace) and the *_like helpers. Every factory validates its shape with
/// torch's message, so a negative size never reaches the allocator.

#include "runtime/tensor.h"

namespace kiln::ops {

/// The dtype torch gives a tensor made from a Python number: bool, int64 or the default float.
DType scalarDefaultDType(const Scalar &s);

/// Throws RuntimeError naming `op` when a size is negative (torch's message).
void checkSizes(const char *op, IntList sizes);

/// Throws RuntimeError ("value cannot be converted to type ... without overflow") when `v` does
/// not fit `dtype` under torch's rules: integers must be in range, except that negative values
/// wrap into unsigned types when their magnitude fits; floats stored into integers must be in
/// range (not NaN or inf); with checkFloatTargets, finite floats must also fit a floating dtype.
void checkFits(const Scalar &v, DType dtype, const char *op, bool checkFloatTargets);

Tensor empty(IntList sizes, DType dtype);
Tensor zeros(IntList sizes, DType dtype);
Tensor ones(IntList sizes, DType dtype);
Tensor full(IntList sizes, const Scalar &value, DType dtype);

/// An uninitialized tensor shaped like `like`. With preserveLayout, a dense input's dim order is
/// kept (torch.preserve_format: empty_like(x.t()) is transposed too); otherwise contiguous.
Tensor emptyLike(const Tensor &like, DType dtype, bool preserveLayout = true);

/// The n x m identity matrix.
Tensor eye(int64_t n, int64_t m, DType dtype);

/// [start, end) in steps of `step`, ceil((end - start) / step) elements, as torch.arange.
Tensor arange(const Scalar &start, const Scalar &end, const Scalar &step, DType dtype);
/// `steps` evenly spaced values from start to end inclusive.
Tensor linspace(const Scalar &start, const Scalar &end, int64_t steps, DType dtype);
/// base ** linspace(start, end, steps).
Tensor logspace(const Scalar &start, const Scalar &end, int64_t steps, double base, DType dtype);

} // namespace kiln::ops

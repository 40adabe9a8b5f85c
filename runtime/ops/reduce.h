#pragma once
/// Eager reductions with PyTorch semantics: any set of dims (nullopt or an empty list reduces
/// every dim), negative dims, keepdim, 0-d and zero-size inputs (identity or torch's error),
/// non-contiguous inputs. Floating sums accumulate in double and integer sums in int64;
/// float16/bfloat16 inputs are computed in float32 and rounded once.

#include "runtime/tensor.h"

#include <optional>
#include <utility>

namespace kiln::ops {

/// The dims a reduction folds: nullopt (or an empty list) means every dim.
using DimList = std::optional<Shape>;

/// torch.sum: integer and bool inputs sum to int64; `dtype` casts the input first.
Tensor sum(const Tensor &a, const DimList &dims = {}, bool keepdim = false,
           std::optional<DType> dtype = {});
/// torch.nansum: sum treating NaN as zero.
Tensor nansum(const Tensor &a, const DimList &dims = {}, bool keepdim = false,
              std::optional<DType> dtype = {});
/// torch.mean: floating inputs (or a floating `dtype`) only; an empty reduction is NaN.
Tensor mean(const Tensor &a, const DimList &dims = {}, bool keepdim = false,
            std::optional<DType> dtype = {});
/// torch.nanmean: mean of the non-NaN elements.
Tensor nanmean(const Tensor &a, const DimList &dims = {}, bool keepdim = false,
               std::optional<DType> dtype = {});
/// torch.prod over one dim, or every element when dim is nullopt.
Tensor prod(const Tensor &a, std::optional<int64_t> dim = {}, bool keepdim = false,
            std::optional<DType> dtype = {});

/// torch.amax/amin: NaN propagates; empty reductions throw (no identity).
Tensor amax(const Tensor &a, const DimList &dims = {}, bool keepdim = false);
Tensor amin(const Tensor &a, const DimList &dims = {}, bool keepdim = false);
/// torch.max(input)/min(input): the extreme element as a 0-d tensor.
Tensor max(const Tensor &a);
Tensor min(const Tensor &a);
/// torch.max(input, dim): values and the index of the first extreme (a NaN counts as extreme).
std::pair<Tensor, Tensor> maxDim(const Tensor &a, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> minDim(const Tensor &a, int64_t dim, bool keepdim = false);
/// torch.argmax/argmin: dim nullopt indexes the flattened input.
Tensor argmax(const Tensor &a, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor argmin(const Tensor &a, std::optional<int64_t> dim = {}, bool keepdim = false);
/// torch.aminmax: (min, max) in one pass.
std::pair<Tensor, Tensor> aminmax(const Tensor &a, std::optional<int64_t> dim = {},
                                  bool keepdim = false);

/// torch.var/std with `correction` (1 = unbiased); Welford accumulation in double.
Tensor var(const Tensor &a, const DimList &dims = {}, double correction = 1.0,
           bool keepdim = false);
Tensor stdDev(const Tensor &a, const DimList &dims = {}, double correction = 1.0,
              bool keepdim = false);
/// torch.var_mean / std_mean (takeSqrt): (var or std, mean) from one pass.
std::pair<Tensor, Tensor> varMean(const Tensor &a, const DimList &dims, double correction,
                                  bool keepdim, bool takeSqrt);
/// torch.logsumexp: max-shifted, so large inputs do not overflow; all -inf gives -inf.
Tensor logsumexp(const Tensor &a, const DimList &dims, bool keepdim = false);

/// torch.all/any: bool results (uint8 for uint8 inputs, as torch does).
Tensor all(const Tensor &a, const DimList &dims = {}, bool keepdim = false);
Tensor any(const Tensor &a, const DimList &dims = {}, bool keepdim = false);
/// torch.count_nonzero: int64 counts.
Tensor countNonzero(const Tensor &a, const DimList &dims = {});
/// torch.linalg.vector_norm: ord 2, 1, inf, -inf, 0 or any other p; floating inputs only.
Tensor vectorNorm(const Tensor &a, double ord = 2.0, const DimList &dims = {}, bool keepdim = false,
                  std::optional<DType> dtype = {});

} // namespace kiln::ops

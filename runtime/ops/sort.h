#pragma once
/// Eager sorting and selection along one dim with PyTorch semantics: NaN orders above every
/// number (last ascending, first descending), indices are int64, float16/bfloat16 are sorted
/// through float32 (exactly: values are only permuted).

#include "runtime/tensor.h"

#include <optional>
#include <utility>

namespace kiln::ops {

/// torch.sort: (values, indices). The sort is always stable, so `stable` only documents intent.
std::pair<Tensor, Tensor> sort(const Tensor &a, int64_t dim = -1, bool descending = false,
                               bool stable = false);
/// torch.argsort: the indices of sort.
Tensor argsort(const Tensor &a, int64_t dim = -1, bool descending = false, bool stable = false);
/// torch.topk: the k largest (or smallest) along dim; ties go to the lower index.
std::pair<Tensor, Tensor> topk(const Tensor &a, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);
/// torch.kthvalue: the k-th smallest (1-based) along dim and its index.
std::pair<Tensor, Tensor> kthvalue(const Tensor &a, int64_t k, int64_t dim = -1,
                                   bool keepdim = false);
/// torch.median(input, dim): the lower median; a line with NaN gives NaN and its first NaN index.
std::pair<Tensor, Tensor> medianDim(const Tensor &a, int64_t dim, bool keepdim = false);
/// torch.nanmedian(input, dim): the lower median of the non-NaN elements.
std::pair<Tensor, Tensor> nanmedianDim(const Tensor &a, int64_t dim, bool keepdim = false);
/// torch.median(input) / nanmedian(input): over every element, as a 0-d tensor.
Tensor median(const Tensor &a);
Tensor nanmedian(const Tensor &a);
/// torch.mode: the most frequent value (the smallest on ties) and its last index.
std::pair<Tensor, Tensor> mode(const Tensor &a, int64_t dim = -1, bool keepdim = false);

/// The parts of torch.unique's result; inverse/counts are undefined unless requested.
struct UniqueResult {
  Tensor values, inverse, counts;
};
/// torch.unique: sorted distinct elements (dim nullopt) or distinct slices along dim.
UniqueResult unique(const Tensor &a, std::optional<int64_t> dim, bool returnInverse,
                    bool returnCounts);
/// torch.unique_consecutive: collapses runs of equal elements (or slices along dim).
UniqueResult uniqueConsecutive(const Tensor &a, std::optional<int64_t> dim, bool returnInverse,
                               bool returnCounts);

} // namespace kiln::ops

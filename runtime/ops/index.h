#pragma once
/// Eager indexing ops with PyTorch semantics: advanced indexing (the engine behind
/// Tensor.__getitem__/__setitem__), gather/scatter, index_select/index_add/take, masks and
/// nonzero. Index tensors are int64 (int32 where torch also accepts it); out-of-range indices
/// raise errors naming the index, the dim and its size.

#include "runtime/tensor.h"

#include <span>
#include <string>
#include <vector>

namespace kiln::ops {

// ---- advanced indexing (index.cc) ---------------------------------------------------------------

/// self[indices] for tensor indices, torch's aten::index: indices[i] indexes dim i of self (an
/// undefined Tensor leaves that dim whole). Integer indices broadcast together; bool masks stand
/// for their nonzero() coordinates. When the indexed dims are not adjacent the result's indexed
/// dims come first, as in NumPy.
Tensor index(const Tensor &self, std::span<const Tensor> indices);
/// self[indices] = values (torch.index_put_): values broadcast to the shape self[indices] has
/// and are cast to self's dtype; accumulate adds instead (duplicates add up). Bumps the version.
Tensor &indexPut_(Tensor &self, std::span<const Tensor> indices, const Tensor &values,
                  bool accumulate = false);
/// Out-of-place index_put.
Tensor indexPut(const Tensor &self, std::span<const Tensor> indices, const Tensor &values,
                bool accumulate = false);

// ---- gather / scatter (index_gather.cc, index_scatter.cc) ---------------------------------------

/// torch.gather: out[i][j] = self[index[i][j]][j] (for dim 0); index is int64.
Tensor gather(const Tensor &self, int64_t dim, const Tensor &index);
/// torch.index_select: the slices of self at `index` (0-d or 1-D int32/int64) along dim.
Tensor indexSelect(const Tensor &self, int64_t dim, const Tensor &index);
/// torch.take: self viewed as 1-D, read at `index` (int64, negatives count from the end).
Tensor take(const Tensor &self, const Tensor &index);

/// torch.Tensor.scatter_: self[index[i][j]][j] = src[i][j] (dim 0). reduce is "" (assign),
/// "add" or "multiply". src must have self's dtype.
Tensor &scatter_(Tensor &self, int64_t dim, const Tensor &index, const Tensor &src,
                 const std::string &reduce = "");
/// scatter_ with a scalar value in place of src.
Tensor &scatterValue_(Tensor &self, int64_t dim, const Tensor &index, const Scalar &value,
                      const std::string &reduce = "");
/// torch.Tensor.scatter_add_: scatter_ with reduce "add".
Tensor &scatterAdd_(Tensor &self, int64_t dim, const Tensor &index, const Tensor &src);
/// torch.Tensor.scatter_reduce_: reduce is "sum", "prod", "mean", "amax" or "amin";
/// includeSelf false ignores self's values at the scattered positions.
Tensor &scatterReduce_(Tensor &self, int64_t dim, const Tensor &index, const Tensor &src,
                       const std::string &reduce, bool includeSelf = true);
/// torch.Tensor.index_add_: self[..., index[i], ...] += alpha * source[..., i, ...] along dim.
Tensor &indexAdd_(Tensor &self, int64_t dim, const Tensor &index, const Tensor &source,
                  const Scalar &alpha = Scalar(int64_t{1}));

// ---- masks (index_mask.cc) ----------------------------------------------------------------------

/// torch.masked_fill: self where mask is false, value where true; self and the bool mask
/// broadcast together. value is a 0-d tensor (a wrapped Python number or a 0-d tensor).
Tensor maskedFill(const Tensor &self, const Tensor &mask, const Tensor &value);
/// In-place form: mask must broadcast to self's shape. Bumps the version.
Tensor &maskedFill_(Tensor &self, const Tensor &mask, const Tensor &value);
/// torch.masked_select: the elements of self (broadcast with mask) where mask is true, as 1-D.
Tensor maskedSelect(const Tensor &self, const Tensor &mask);
/// torch.nonzero: an int64 [n, ndim] tensor of the coordinates of nonzero elements, row-major.
Tensor nonzero(const Tensor &self);
/// torch.nonzero(as_tuple=True): one int64 1-D tensor of coordinates per dim of self.
std::vector<Tensor> nonzeroTuple(const Tensor &self);
/// Tensor.__contains__: whether any element of self equals elem (broadcast).
bool contains(const Tensor &self, const Tensor &elem);

} // namespace kiln::ops

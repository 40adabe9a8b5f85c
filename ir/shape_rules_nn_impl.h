#pragma once
// Private to the verifier and the shape rules: the result sizes of the model-zoo ops (arange,
// batch_norm, the 2-d pools), computed in shape_rules_nn.cc and checked in verifier_rules_nn.cc.

#include "ir/graph.h"
#include "ir/shape_rules.h"

#include <array>

namespace kiln::ir::detail {

/// arange's element count: ceil((end - start) / step), which must not be negative (torch rejects
/// bounds that disagree with the step's sign). A symbolic `end` needs a positive step.
std::vector<SymInt> arangeSizes(const Node &n);
/// The sizes of a full node (its `size` attribute; no negative constants).
std::vector<SymInt> fullSizes(const Node &n);
/// arange's dtype: the `dtype` attribute, else i64 (its bounds are ints).
DType arangeDType(const Node &n);

/// The window parameters of a 2-d pool, each per spatial dim (height, width).
struct PoolWindow {
  std::array<int64_t, 2> kernel, stride, padding, dilation;
  bool ceilMode = false;
};
/// The window of a max_pool2d / avg_pool2d node, checked (positive sizes, padding at most half
/// the kernel).
PoolWindow poolWindow(const Node &n);
/// The result sizes of a max_pool2d, avg_pool2d or adaptive_avg_pool2d node: the leading dims of
/// its 3-d or 4-d input, then the two pooled sizes.
std::vector<SymInt> poolSizes(const Node &n);

// verifier_rules_nn.cc
void checkArange(const Node &n);
void checkFull(const Node &n);
void checkContiguous(const Node &n);
void checkBatchNorm(const Node &n);
void checkPool(const Node &n);
void checkPoolBackward(const Node &n);
void checkConvolutionWeightGrad(const Node &n);

} // namespace kiln::ir::detail

// Shape rules of the scans and sorts (see ops.def), with eager kiln's conditions and words.

#include "ir/shape_rules_sort_impl.h"
#include "ir/verifier_impl.h"

#include <algorithm>

namespace kiln::ir::detail {

namespace {

/// The dim attribute wrapped against `rank` (a 0-d input counts as 1-d, as eager's).
int64_t sortDim(const Node &n, const TensorMeta &in) {
  const Attribute *d = n.attr("dim");
  return wrapDim(d ? d->toInt() : -1, std::max<int64_t>(1, in.rank()), "dim");
}

} // namespace

bool isScanOrSortOp(OpKind op) {
  return op == OpKind::Cumsum || op == OpKind::Cumprod || op == OpKind::Argsort ||
         op == OpKind::TopkIndices;
}

TensorMeta scanOrSortType(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0);
  int64_t dim = sortDim(n, in);
  switch (n.op()) {
  case OpKind::Cumsum:
  case OpKind::Cumprod: {
    const Attribute *d = n.attr("dtype");
    DType dtype = d ? d->toDType() : isFloating(in.dtype) ? in.dtype : DType::Int64;
    return TensorMeta::contiguous(dtype, in.sizes, in.device);
  }
  case OpKind::Argsort:
    return TensorMeta::contiguous(DType::Int64, in.sizes, in.device);
  default: {
    int64_t k = n.attr("k")->toInt();
    SymInt size = in.rank() == 0 ? SymInt(1) : in.sizes[dim];
    std::optional<int64_t> c = size.constant();
    if (k < 0 || (c && k > *c))
      ruleFails("topk: selected index k out of range (k = {}, size {})", k, size.str());
    std::vector<SymInt> sizes = in.sizes;
    if (in.rank() > 0)
      sizes[dim] = k;
    return TensorMeta::contiguous(DType::Int64, sizes, in.device);
  }
  }
}

void checkScanOrSort(const Node &n) {
  TensorMeta want = scanOrSortType(n);
  expectSameDevice(n);
  expectResultDType(n, want.dtype, "the op's rule");
  expectSizes(tensorResult(n).sizes, want.sizes, "the op's rule");
}

} // namespace kiln::ir::detail

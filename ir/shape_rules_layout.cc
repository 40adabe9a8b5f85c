// Shape rules of the layout copies and masks (see ops.def): the result's dtype and sizes and the
// conditions under which eager kiln raises, so a node the verifier accepts is one eager runs.

#include "ir/shape_rules_layout_impl.h"
#include "ir/verifier_impl.h"

#include <set>

namespace kiln::ir::detail {

namespace {

std::vector<int64_t> intsAttrOr(const Node &n, std::string_view name) {
  const Attribute *a = n.attr(name);
  return a ? a->toInts() : std::vector<int64_t>{};
}

std::vector<SymInt> maskedFillSizes(const Node &n, SymAssumptions *assumed) {
  const TensorMeta &in = tensorOperand(n, 0), &mask = tensorOperand(n, 1);
  if (mask.dtype != DType::Bool)
    ruleFails("masked_fill only supports boolean masks, but got mask with dtype {}",
              dtypeShortName(mask.dtype));
  const Value *value = n.operand(2);
  if (value->isTensor() && value->meta().rank() != 0)
    ruleFails("masked_fill only supports a 0-dimensional value tensor, but got tensor with {} "
              "dimension(s)",
              value->meta().rank());
  return broadcastShapes({in.sizes, mask.sizes}, assumed);
}

void checkFlipDims(const Node &n, const TensorMeta &in) {
  std::set<int64_t> seen;
  for (int64_t d : intsAttrOr(n, "dims"))
    if (!seen.insert(wrapDim(d, in.rank(), "dims")).second)
      ruleFails("flip: dim {} appears multiple times in the list of dims", d);
}

void checkRoll(const Node &n, const TensorMeta &in) {
  std::vector<int64_t> shifts = n.attr("shifts")->toInts(), dims = intsAttrOr(n, "dims");
  if (dims.empty()) {
    if (shifts.size() != 1)
      ruleFails("roll: shifts and dimensions must align. shifts: {}, dims:0", shifts.size());
    return;
  }
  if (shifts.size() != dims.size())
    ruleFails("roll: shifts and dimensions must align. shifts: {}, dims:{}", shifts.size(),
              dims.size());
  if (in.rank() == 0)
    ruleFails("roll: Dimension specified as {} but tensor has no dimensions", dims[0]);
  for (int64_t d : dims)
    wrapDim(d, in.rank(), "dims");
}

std::vector<SymInt> repeatSizes(const Node &n, const TensorMeta &in) {
  std::vector<int64_t> repeats = n.attr("repeats")->toInts();
  int64_t nd = static_cast<int64_t>(repeats.size()), lead = nd - in.rank();
  if (lead < 0)
    ruleFails("repeat: Number of dimensions of repeat dims ({}) can not be smaller than number "
              "of dimensions of tensor ({})",
              nd, in.rank());
  std::vector<SymInt> out;
  for (int64_t i = 0; i < nd; ++i) {
    if (repeats[i] < 0)
      ruleFails("repeat: Trying to create tensor with negative dimension {}", repeats[i]);
    out.push_back((i < lead ? SymInt(1) : in.sizes[i - lead]) * repeats[i]);
  }
  return out;
}

std::vector<SymInt> stackSizes(const Node &n) {
  const TensorMeta &first = tensorOperand(n, 0);
  for (int i = 1; i < n.numOperands(); ++i)
    expectSizes(tensorOperand(n, i).sizes, first.sizes,
                "stack expects each tensor to be equal size, as operand 0");
  std::vector<SymInt> out = first.sizes;
  int64_t dim = wrapDim(intAttrOr(n, "dim", 0), first.rank() + 1, "dim");
  out.insert(out.begin() + dim, SymInt(n.numOperands()));
  return out;
}

std::vector<SymInt> padSizes(const Node &n, const TensorMeta &in) {
  std::vector<int64_t> pad = intsAttrOr(n, "pad");
  const Attribute *modeAttr = n.attr("mode");
  std::string mode = modeAttr ? modeAttr->toString() : "constant";
  if (pad.size() % 2 != 0)
    ruleFails("pad: Padding length must be divisible by 2 (got {})", pad.size());
  int64_t k = static_cast<int64_t>(pad.size()) / 2;
  if (k > in.rank())
    ruleFails("pad: Padding length should be less than or equal to two times the input "
              "dimension but got padding length {} and input of dimension {}",
              pad.size(), in.rank());
  if (mode != "constant") {
    if (mode != "reflect" && mode != "replicate" && mode != "circular")
      ruleFails("pad: Unrecognised padding mode {}", mode);
    if (const Attribute *v = n.attr("value"); v && v->toDouble() != 0.0)
      ruleFails("pad: Padding mode \"{}\" doesn't take in value argument", mode);
    if (k < 1 || k > 3 || (in.rank() != k + 1 && in.rank() != k + 2))
      ruleFails("pad: Padding size {} is not supported for {}D input tensor in mode {}", 2 * k,
                in.rank(), mode);
  }
  std::vector<SymInt> out = in.sizes;
  for (int64_t i = 0; i < k; ++i) {
    int64_t d = in.rank() - 1 - i, l = pad[2 * i], r = pad[2 * i + 1];
    std::optional<int64_t> size = in.sizes[d].constant();
    if (size && mode == "reflect" && !(l < *size && r < *size))
      ruleFails("pad: Padding size should be less than the corresponding input dimension, but "
                "got: padding ({}, {}) at dimension {}",
                l, r, d);
    if (size && mode == "circular" && !(l <= *size && r <= *size))
      ruleFails("pad: Padding value causes wrapping around more than once (padding ({}, {}) at "
                "dimension {})",
                l, r, d);
    if (size && mode == "replicate" && *size == 0)
      ruleFails("pad: replicate padding needs a non-empty dimension {}", d);
    if (mode != "constant" && (l < 0 || r < 0))
      ruleFails("pad: negative padding in mode {} is not compiled", mode);
    out[d] = in.sizes[d] + l + r;
    if (std::optional<int64_t> c = out[d].constant(); c && *c < 0)
      ruleFails("pad: The input size {}, plus negative padding {} and {} resulted in a negative "
                "output size, which is invalid. Check dimension {} of your input.",
                in.sizes[d].str(), l, r, d);
  }
  return out;
}

std::vector<SymInt> oneHotSizes(const Node &n, const TensorMeta &in) {
  if (in.dtype != DType::Int64)
    ruleFails("one_hot is only applicable to index tensor of type LongTensor (got {})",
              dtypeShortName(in.dtype));
  const Attribute *c = n.attr("num_classes");
  if (!c || c->toInt() == -1)
    ruleFails("one_hot without num_classes: the result size depends on the index values");
  if (c->toInt() < 0)
    ruleFails("one_hot: num_classes should be -1 or non-negative (got {})", c->toInt());
  std::vector<SymInt> out = in.sizes;
  out.push_back(c->toInt());
  return out;
}

void checkIndexDType(const Node &n, const TensorMeta &index, bool allowInt32) {
  if (index.dtype != DType::Int64 && !(allowInt32 && index.dtype == DType::Int32))
    ruleFails("{}(): expected {} for index, but got {}", n.keyword(),
              allowInt32 ? "dtype int32 or int64" : "dtype int64", dtypeShortName(index.dtype));
}

std::vector<SymInt> gatherSizes(const Node &n, const TensorMeta &in) {
  const TensorMeta &index = tensorOperand(n, 1);
  checkIndexDType(n, index, true);
  int64_t rank = std::max<int64_t>(1, in.rank());
  if (std::max<int64_t>(1, index.rank()) != rank)
    ruleFails("gather(): Index tensor must have the same number of dimensions as input tensor "
              "(index shape {}, input shape {})",
              printSizes(index.sizes), printSizes(in.sizes));
  int64_t dim = wrapDim(n.attr("dim")->toInt(), rank, "dim");
  for (int64_t d = 0; d < index.rank() && in.rank() > 0; ++d) {
    std::optional<int64_t> a = index.sizes[d].constant(), b = in.sizes[d].constant();
    if (d != dim && a && b && *a > *b)
      ruleFails("gather(): Size does not match at dimension {}: expected index {} to be no larger "
                "than self {} apart from dimension {}",
                d, printSizes(index.sizes), printSizes(in.sizes), dim);
  }
  return index.sizes;
}

std::vector<SymInt> indexSelectSizes(const Node &n, const TensorMeta &in) {
  const TensorMeta &index = tensorOperand(n, 1);
  checkIndexDType(n, index, true);
  if (index.rank() > 1)
    ruleFails("index_select(): Index is supposed to be a vector, got a tensor of shape {}",
              printSizes(index.sizes));
  int64_t dim = wrapDim(n.attr("dim")->toInt(), std::max<int64_t>(1, in.rank()), "dim");
  if (in.rank() == 0)
    return {};
  std::vector<SymInt> sizes = in.sizes;
  sizes[dim] = index.rank() == 0 ? SymInt(1) : index.sizes[0];
  return sizes;
}

std::vector<SymInt> indexSizes(const Node &n, const TensorMeta &in) {
  const TensorMeta &index = tensorOperand(n, 1);
  if (index.dtype != DType::Int64 && index.dtype != DType::Int32)
    ruleFails("index: tensors used as indices must be long or int tensors (got {})",
              dtypeShortName(index.dtype));
  if (in.rank() == 0)
    ruleFails("index: too many indices for tensor of dimension 0");
  int64_t dim = wrapDim(n.attr("dim")->toInt(), in.rank(), "dim");
  std::vector<SymInt> sizes(in.sizes.begin(), in.sizes.begin() + dim);
  sizes.insert(sizes.end(), index.sizes.begin(), index.sizes.end());
  sizes.insert(sizes.end(), in.sizes.begin() + dim + 1, in.sizes.end());
  return sizes;
}

} // namespace

bool isLayoutOp(OpKind op) {
  switch (op) {
  case OpKind::MaskedFill:
  case OpKind::Tril:
  case OpKind::Triu:
  case OpKind::Flip:
  case OpKind::Roll:
  case OpKind::Repeat:
  case OpKind::Stack:
  case OpKind::Pad:
  case OpKind::OneHot:
  case OpKind::Gather:
  case OpKind::IndexSelect:
  case OpKind::Index:
    return true;
  default:
    return false;
  }
}

TensorMeta layoutType(const Node &n, SymAssumptions *assumed) {
  const TensorMeta &in = tensorOperand(n, 0);
  auto result = [&](DType dtype, std::vector<SymInt> sizes) {
    return TensorMeta::contiguous(dtype, std::move(sizes), in.device);
  };
  switch (n.op()) {
  case OpKind::MaskedFill:
    return result(in.dtype, maskedFillSizes(n, assumed));
  case OpKind::Tril:
  case OpKind::Triu:
    if (in.rank() < 2)
      ruleFails("{}: input tensor must have at least 2 dimensions (got shape {})", n.keyword(),
                printSizes(in.sizes));
    return result(in.dtype, in.sizes);
  case OpKind::Flip:
    checkFlipDims(n, in);
    return result(in.dtype, in.sizes);
  case OpKind::Roll:
    checkRoll(n, in);
    return result(in.dtype, in.sizes);
  case OpKind::Repeat:
    return result(in.dtype, repeatSizes(n, in));
  case OpKind::Stack:
    return result(promotedDType(n), stackSizes(n));
  case OpKind::Pad:
    return result(in.dtype, padSizes(n, in));
  case OpKind::OneHot:
    return result(DType::Int64, oneHotSizes(n, in));
  case OpKind::Gather:
    return result(in.dtype, gatherSizes(n, in));
  case OpKind::IndexSelect:
    return result(in.dtype, indexSelectSizes(n, in));
  case OpKind::Index:
    return result(in.dtype, indexSizes(n, in));
  default:
    ruleFails("'{}' is not a layout op", n.keyword());
  }
}

void checkLayout(const Node &n) {
  TensorMeta want = layoutType(n, nullptr);
  expectSameDevice(n);
  expectResultDType(n, want.dtype, "the layout op's rule");
  expectSizes(tensorResult(n).sizes, want.sizes, fmt::format("'{}' of its operands", n.keyword()));
}

} // namespace kiln::ir::detail

// Shape rules for elementwise ops, reductions, cat, library calls and composites, and
// inferResultType, which picks the rule of a node. View rules are in shape_rules_view.cc.

#include "ir/shape_rules.h"

#include "ir/shape_rules_layout_impl.h"
#include "ir/shape_rules_loss_impl.h"
#include "ir/shape_rules_nn_impl.h"
#include "ir/shape_rules_random_impl.h"
#include "ir/shape_rules_sort_impl.h"
#include "ir/verifier_impl.h"

#include <algorithm>
#include <set>

namespace kiln::ir {

void SymAssumptions::add(SymRelation r) {
  if (r.staticValue() == true)
    return;
  if (std::find(relations_.begin(), relations_.end(), r) == relations_.end())
    relations_.push_back(std::move(r));
}

std::vector<SymInt> broadcastShapes(const std::vector<std::span<const SymInt>> &shapes,
                                    SymAssumptions *assumed) {
  size_t rank = 0;
  for (auto s : shapes)
    rank = std::max(rank, s.size());
  std::vector<SymInt> out(rank, SymInt(1));
  for (size_t k = 1; k <= rank; ++k) {
    SymInt &dim = out[rank - k];
    for (auto s : shapes) {
      if (k > s.size() || s[s.size() - k] == SymInt(1))
        continue;
      const SymInt &size = s[s.size() - k];
      if (dim == SymInt(1))
        dim = size;
      else if (detail::provablyDifferent(dim, size))
        detail::ruleFails("operand shapes do not broadcast: {} vs {} in dim -{}", dim.str(),
                          size.str(), k);
      else if (assumed && dim != size) // the left size stays; the right one must equal it
        assumed->add(SymRelation{dim, RelOp::Eq, size});
    }
  }
  return out;
}

namespace {

PromotionOperand promotionOf(const Value *v) {
  if (v->isTensor())
    return {v->meta().dtype,
            v->meta().rank() > 0 ? PromotionPriority::Tensor : PromotionPriority::ZeroDim};
  switch (v->type().scalar()) {
  case ScalarType::Int:
    return {DType::Int64, PromotionPriority::Scalar};
  case ScalarType::Float:
    return {DType::Float64, PromotionPriority::Scalar};
  default:
    return {DType::Bool, PromotionPriority::Scalar};
  }
}

} // namespace

DType promotedDType(const Node &n, int first) {
  std::vector<PromotionOperand> ops;
  for (int i = first; i < n.numOperands(); ++i)
    ops.push_back(promotionOf(n.operands()[i]));
  if (n.op() == OpKind::Clamp) // its bounds promote like the Python numbers they were
    for (const char *bound : {"min", "max"})
      if (const Attribute *a = n.attr(bound))
        ops.push_back({a->is<double>() ? DType::Float64
                       : a->is<bool>() ? DType::Bool
                                       : DType::Int64,
                       PromotionPriority::Scalar});
  return resultType(ops);
}

namespace detail {

DType elementwiseDType(const Node &n) {
  if (n.op() == OpKind::Cast)
    return n.attr("dtype")->toDType();
  if (n.hasTrait(trait::Comparison))
    return DType::Bool;
  DType promoted = promotedDType(n, n.op() == OpKind::Where ? 1 : 0);
  return n.hasTrait(trait::FloatResult) && !isFloating(promoted) ? defaultFloatDType() : promoted;
}

DType reductionDType(const Node &n, DType in) {
  const Attribute *dtypeAttr = n.attr("dtype");
  switch (n.op()) {
  case OpKind::Argmax:
  case OpKind::Argmin:
    return DType::Int64;
  case OpKind::Amax:
  case OpKind::Amin:
    return in;
  case OpKind::All:
  case OpKind::Any:
    return in == DType::UInt8 ? DType::UInt8 : DType::Bool;
  case OpKind::Sum:
  case OpKind::Prod:
    return dtypeAttr ? dtypeAttr->toDType() : isIntegral(in, true) ? DType::Int64 : in;
  case OpKind::Logsumexp:
    return isFloating(in) ? in : DType::Float32;
  default: // mean, var, softmax, log_softmax: floating only
    if (dtypeAttr)
      return dtypeAttr->toDType();
    if (!isFloating(in))
      ruleFails("'{}' needs a floating input (or a 'dtype' attribute), got {}", n.keyword(),
                dtypeShortName(in));
    return in;
  }
}

namespace {

/// The reduced dims of a reduction over a tensor of rank `rank`, wrapped and checked.
std::vector<int64_t> reductionDims(const Node &n, int64_t rank) {
  std::vector<int64_t> dims;
  if (const Attribute *a = n.attr("dim"))
    dims = a->is<int64_t>() ? std::vector<int64_t>{a->toInt()} : a->toInts();
  if (dims.empty()) { // no dim (or dim=[]) reduces every dim, as in torch
    for (int64_t d = 0; d < rank; ++d)
      dims.push_back(d);
    return dims;
  }
  std::set<int64_t> seen;
  for (int64_t &d : dims) {
    d = wrapDim(d, rank, "dim");
    if (!seen.insert(d).second)
      ruleFails("dim {} appears more than once", d);
  }
  return dims;
}

} // namespace

std::vector<SymInt> reductionSizes(const Node &n, const TensorMeta &in) {
  if (n.op() == OpKind::Softmax || n.op() == OpKind::LogSoftmax) {
    wrapDim(n.attr("dim")->toInt(), in.rank(), "dim");
    return in.sizes;
  }
  std::vector<int64_t> dims = reductionDims(n, in.rank());
  const Attribute *keep = n.attr("keepdim");
  bool keepdim = keep && keep->toBool();
  std::vector<SymInt> out;
  for (int64_t d = 0; d < in.rank(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced)
      out.push_back(in.sizes[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

std::pair<DType, std::vector<SymInt>> catType(const Node &n, SymAssumptions *assumed) {
  const TensorMeta &first = tensorOperand(n, 0);
  int64_t dim = wrapDim(intAttrOr(n, "dim", 0), first.rank(), "dim");
  if (first.rank() == 0)
    ruleFails("cannot concatenate 0-d tensors");
  std::vector<SymInt> sizes = first.sizes;
  DType dtype = first.dtype;
  for (int i = 1; i < n.numOperands(); ++i) {
    const TensorMeta &m = tensorOperand(n, i);
    if (m.rank() != first.rank())
      ruleFails("cat operands must have one rank, got {} (operand 0) and {} (operand {})",
                first.rank(), m.rank(), i);
    for (int64_t d = 0; d < m.rank(); ++d) {
      if (d == dim)
        continue;
      if (provablyDifferent(m.sizes[d], first.sizes[d]))
        ruleFails("cat operand {} has size {} in dim {}, operand 0 has {}", i, m.sizes[d].str(), d,
                  first.sizes[d].str());
      if (assumed && m.sizes[d] != first.sizes[d])
        assumed->add(SymRelation{first.sizes[d], RelOp::Eq, m.sizes[d]});
    }
    sizes[dim] = sizes[dim] + m.sizes[dim];
    dtype = promoteTypes(dtype, m.dtype);
  }
  return {dtype, sizes};
}

std::vector<SymInt> matmulSizes(const Node &n, SymAssumptions *assumed) {
  const TensorMeta &a = tensorOperand(n, 0), &b = tensorOperand(n, 1);
  if (a.rank() == 0 || b.rank() == 0)
    ruleFails("matmul needs operands of rank >= 1, got ranks {} and {}", a.rank(), b.rank());
  const SymInt &ka = a.sizes.back();
  const SymInt &kb = b.rank() == 1 ? b.sizes[0] : b.sizes[b.rank() - 2];
  if (provablyDifferent(ka, kb))
    ruleFails("matmul shapes {} and {} cannot be multiplied ({} vs {})", printSizes(a.sizes),
              printSizes(b.sizes), ka.str(), kb.str());
  if (assumed && ka != kb)
    assumed->add(SymRelation{ka, RelOp::Eq, kb});
  std::span<const SymInt> batchA(a.sizes.data(), a.rank() > 2 ? a.rank() - 2 : 0);
  std::span<const SymInt> batchB(b.sizes.data(), b.rank() > 2 ? b.rank() - 2 : 0);
  std::vector<SymInt> out = broadcastShapes({batchA, batchB}, assumed);
  if (a.rank() > 1)
    out.push_back(a.sizes[a.rank() - 2]);
  if (b.rank() > 1)
    out.push_back(b.sizes.back());
  return out;
}

std::vector<SymInt> linearSizes(const Node &n) {
  const TensorMeta &x = tensorOperand(n, 0), &w = tensorOperand(n, 1);
  if (x.rank() == 0 || w.rank() != 2)
    ruleFails("linear needs an input of rank >= 1 and a 2-d weight, got ranks {} and {}", x.rank(),
              w.rank());
  if (provablyDifferent(x.sizes.back(), w.sizes[1]))
    ruleFails("linear input has {} features but the weight expects {}", x.sizes.back().str(),
              w.sizes[1].str());
  std::vector<SymInt> out(x.sizes.begin(), x.sizes.end() - 1);
  out.push_back(w.sizes[0]);
  return out;
}

std::vector<SymInt> convSizes(const Node &n) {
  const TensorMeta &x = tensorOperand(n, 0), &w = tensorOperand(n, 1);
  const std::string_view op = n.keyword();
  const int spatial = n.op() == OpKind::Conv3d ? 3 : 2;
  if ((x.rank() != spatial + 1 && x.rank() != spatial + 2) || w.rank() != spatial + 2)
    ruleFails("{} needs a {}-d or {}-d input and a {}-d weight, got ranks {} and {}", op,
              spatial + 1, spatial + 2, spatial + 2, x.rank(), w.rank());
  auto values = [&](std::string_view name, int64_t fallback) {
    const Attribute *a = n.attr(name);
    if (!a)
      return std::vector<int64_t>(spatial, fallback);
    std::vector<int64_t> v = a->toInts();
    if (v.size() != 1 && v.size() != static_cast<size_t>(spatial))
      ruleFails("{} '{}' needs 1 or {} values, got {}", op, name, spatial, a->str());
    return v.size() == 1 ? std::vector<int64_t>(spatial, v[0]) : v;
  };
  std::vector<int64_t> stride = values("stride", 1), padding = values("padding", 0),
                       dilation = values("dilation", 1);
  int64_t groups = intAttrOr(n, "groups", 1);
  if (groups < 1)
    ruleFails("{} groups must be >= 1, got {}", op, groups);
  int64_t c = x.rank() - spatial - 1; // the channel dim
  if (provablyDifferent(x.sizes[c], w.sizes[1] * SymInt(groups)))
    ruleFails("{} input has {} channels but the weight expects {} ({} groups)", op,
              x.sizes[c].str(), (w.sizes[1] * SymInt(groups)).str(), groups);
  std::vector<SymInt> out(x.sizes.begin(), x.sizes.begin() + c);
  out.push_back(w.sizes[0]);
  for (int i = 0; i < spatial; ++i) { // torch: (in + 2p - d(k - 1) - 1) floordiv s + 1
    if (stride[i] < 1)
      ruleFails("{} stride must be >= 1, got {}", op, stride[i]);
    SymInt span = x.sizes[c + 1 + i] + SymInt(2 * padding[i]) -
                  SymInt(dilation[i]) * (w.sizes[2 + i] - SymInt(1)) - SymInt(1);
    out.push_back(floorDiv(span, SymInt(stride[i])) + SymInt(1));
  }
  return out;
}

std::vector<SymInt> attentionSizes(const Node &n) {
  const TensorMeta &q = tensorOperand(n, 0), &k = tensorOperand(n, 1), &v = tensorOperand(n, 2);
  if (q.rank() < 2 || k.rank() < 2 || v.rank() < 2)
    ruleFails("scaled_dot_product_attention needs query, key and value of rank >= 2");
  if (provablyDifferent(q.sizes.back(), k.sizes.back()))
    ruleFails("query has head size {} but key has {}", q.sizes.back().str(), k.sizes.back().str());
  std::vector<SymInt> out(q.sizes.begin(), q.sizes.end() - 1);
  out.push_back(v.sizes.back());
  return out;
}

std::vector<SymInt> embeddingSizes(const Node &n) {
  const TensorMeta &indices = tensorOperand(n, 0), &weight = tensorOperand(n, 1);
  if (weight.rank() != 2)
    ruleFails("embedding weight (operand 1) must be 2-d, got {}", printSizes(weight.sizes));
  std::vector<SymInt> out = indices.sizes;
  out.push_back(weight.sizes[1]);
  return out;
}

namespace {

/// Python number arithmetic (no tensor operand): bool for comparisons, float when a float takes
/// part or the op is a true division or transcendental, bool for max/min/where of bools, else
/// int. `pow` keeps its given type: Python's `2 ** -1` is a float.
ValueType scalarArithmeticType(const Node &n) {
  if (n.hasTrait(trait::Comparison))
    return ScalarType::Bool;
  if (n.op() == OpKind::Pow)
    return n.result(0)->type();
  if (n.op() == OpKind::Cast) {
    DType t = n.attr("dtype")->toDType();
    return isFloating(t)      ? ScalarType::Float
           : t == DType::Bool ? ScalarType::Bool
                              : ScalarType::Int;
  }
  if (n.op() == OpKind::Div || n.hasTrait(trait::FloatResult))
    return ScalarType::Float;
  bool anyFloat = false, allBool = true;
  for (int i = n.op() == OpKind::Where ? 1 : 0; i < n.numOperands(); ++i) {
    ScalarType t = n.operands()[i]->type().scalar();
    anyFloat |= t == ScalarType::Float;
    allBool &= t == ScalarType::Bool;
  }
  bool keepsBool =
      n.op() == OpKind::Maximum || n.op() == OpKind::Minimum || n.op() == OpKind::Where;
  return anyFloat ? ScalarType::Float : allBool && keepsBool ? ScalarType::Bool : ScalarType::Int;
}

/// The device of the first tensor operand (the verifier makes the others agree).
Device operandDevice(const Node &n) {
  for (const Value *v : n.operands())
    if (v->isTensor())
      return v->meta().device;
  return Device{};
}

ValueType elementwiseType(const Node &n, SymAssumptions *assumed) {
  std::vector<std::span<const SymInt>> shapes;
  for (const Value *v : n.operands())
    if (v->isTensor())
      shapes.emplace_back(v->meta().sizes);
  if (shapes.empty() && !n.result(0)->isTensor())
    return scalarArithmeticType(n);
  return TensorMeta::contiguous(elementwiseDType(n), broadcastShapes(shapes, assumed),
                                operandDevice(n));
}

ValueType viewType(const Node &n, SymAssumptions *assumed) {
  const TensorMeta &in = tensorOperand(n, 0);
  if (n.op() == OpKind::Copy) { // the result is operand 0 itself
    viewSizes(n, in, {}, assumed);
    return in;
  }
  std::vector<SymInt> sizes = viewSizes(n, in, {}, assumed);
  std::vector<SymInt> strides = viewResultStrides(n, in, sizes);
  return TensorMeta{in.dtype, std::move(sizes), std::move(strides), in.device};
}

} // namespace

} // namespace detail

std::optional<ValueType> inferResultType(const Node &n, SymAssumptions *assumed) {
  using namespace detail;
  auto contiguous = [&](DType dtype, std::vector<SymInt> sizes) -> ValueType {
    return TensorMeta::contiguous(dtype, std::move(sizes), operandDevice(n));
  };
  switch (n.op()) {
  case OpKind::Input:
  case OpKind::Output:
  case OpKind::Constant:
  case OpKind::Weight: // typed by the weights file, as declared
  case OpKind::SymConstrainRange:
  case OpKind::Call:
    return std::nullopt;
  case OpKind::SymSize: {
    const TensorMeta &in = tensorOperand(n, 0);
    if (in.rank() == 0)
      ruleFails("a 0-d tensor has no sizes");
    wrapDim(n.attr("dim")->toInt(), in.rank(), "dim");
    return ScalarType::Int;
  }
  case OpKind::Cat: {
    auto [dtype, sizes] = catType(n, assumed);
    return contiguous(dtype, std::move(sizes));
  }
  case OpKind::Matmul:
    return contiguous(tensorOperand(n, 0).dtype, matmulSizes(n, assumed));
  case OpKind::Linear:
    return contiguous(tensorOperand(n, 0).dtype, linearSizes(n));
  case OpKind::Conv2d:
  case OpKind::Conv3d:
    return contiguous(tensorOperand(n, 0).dtype, convSizes(n));
  case OpKind::ScaledDotProductAttention:
    return contiguous(tensorOperand(n, 0).dtype, attentionSizes(n));
  case OpKind::LayerNorm:
  case OpKind::RmsNorm:
    return contiguous(tensorOperand(n, 0).dtype, tensorOperand(n, 0).sizes);
  case OpKind::MseLoss:
  case OpKind::L1Loss: {
    const Attribute *r = n.attr("reduction");
    DType in = tensorOperand(n, 0).dtype;
    if (r && r->toString() == "none")
      return contiguous(
          in, broadcastShapes({tensorOperand(n, 0).sizes, tensorOperand(n, 1).sizes}, assumed));
    return contiguous(isFloating(in) ? in : DType::Int64, {}); // an integer sum is int64
  }
  case OpKind::Embedding:
    return contiguous(tensorOperand(n, 1).dtype, embeddingSizes(n));
  case OpKind::Arange:
    return contiguous(arangeDType(n), arangeSizes(n));
  case OpKind::Full:
    return contiguous(n.attr("dtype")->toDType(), fullSizes(n));
  case OpKind::Contiguous:
  case OpKind::BatchNorm:
    return contiguous(tensorOperand(n, 0).dtype, tensorOperand(n, 0).sizes);
  case OpKind::MaxPool2d:
  case OpKind::AvgPool2d:
  case OpKind::AdaptiveAvgPool2d:
    return contiguous(tensorOperand(n, 0).dtype, poolSizes(n));
  case OpKind::MaxPool2dBackward:
    return contiguous(tensorOperand(n, 1).dtype, tensorOperand(n, 0).sizes);
  case OpKind::ConvolutionWeightGrad: {
    std::vector<SymInt> sizes;
    for (int64_t s : n.attr("weight_size")->toInts())
      sizes.push_back(SymInt(s));
    return contiguous(tensorOperand(n, 1).dtype, sizes);
  }
  case OpKind::SliceScatter:
  case OpKind::SelectScatter:
    scatterSourceSizes(n, assumed);
    return contiguous(tensorOperand(n, 0).dtype, tensorOperand(n, 0).sizes);
  default:
    if (isLayoutOp(n.op()))
      return layoutType(n, assumed);
    if (isClassLossOp(n.op()))
      return classLossType(n, assumed);
    if (isScanOrSortOp(n.op()))
      return scanOrSortType(n);
    if (isRandomOp(n.op()))
      return randomType(n);
    break;
  }
  if (n.hasTrait(trait::Elementwise))
    return elementwiseType(n, assumed);
  if (n.hasTrait(trait::Reduction)) {
    const TensorMeta &in = tensorOperand(n, 0);
    return contiguous(reductionDType(n, in.dtype), reductionSizes(n, in));
  }
  if (n.hasTrait(trait::View))
    return viewType(n, assumed);
  return std::nullopt;
}

Value *createTypedBefore(Graph &graph, Node *anchor, OpKind op, std::vector<Value *> operands,
                         Attributes attrs, SourceLoc loc) {
  // The operand's type stands in until the node exists for its rule to read.
  ValueType placeholder = operands[0]->type();
  Node *n = graph.createBefore(anchor, op, std::move(operands), std::move(attrs), {placeholder},
                               std::move(loc));
  n->result()->setType(*inferResultType(*n));
  return n->result();
}

} // namespace kiln::ir

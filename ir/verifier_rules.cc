// Verifier rules for elementwise ops, reductions, constants and the ops of captured programs
// (sym_size, call), plus the shared helpers.

#include "ir/verifier_impl.h"

#include <algorithm>
#include <set>

namespace kiln::ir::detail {

const TensorMeta &tensorOperand(const Node &n, int i) {
  const Value *v = n.operands()[i];
  if (!v->isTensor())
    ruleFails("operand {} must be a tensor, got {}", i, printType(v->type()));
  return v->meta();
}

const TensorMeta &tensorResult(const Node &n) {
  const Value *v = n.result(0);
  if (!v->isTensor())
    ruleFails("the result must be a tensor, got {}", printType(v->type()));
  return v->meta();
}

std::string shapeStr(std::span<const SymInt> sizes) {
  std::string out;
  for (size_t i = 0; i < sizes.size(); ++i)
    out += (i ? ", " : "") + sizes[i].str();
  return "[" + out + "]";
}

bool provablyDifferent(const SymInt &a, const SymInt &b) {
  std::optional<int64_t> d = (a - b).constant();
  return d && *d != 0;
}

void expectSizes(std::span<const SymInt> got, std::span<const SymInt> want, std::string_view why) {
  bool ok = got.size() == want.size();
  for (size_t i = 0; ok && i < got.size(); ++i)
    ok = !provablyDifferent(got[i], want[i]);
  if (!ok)
    ruleFails("result shape {} should be {} ({})", shapeStr(got), shapeStr(want), why);
}

int64_t wrapDim(int64_t dim, int64_t rank, std::string_view what) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r)
    ruleFails("{} {} is out of range for a tensor of rank {} (expected {} to {})", what, dim, rank,
              -r, r - 1);
  return dim < 0 ? dim + r : dim;
}

void expectSameDevice(const Node &n) {
  if (n.numResults() == 0 || !n.result(0)->isTensor())
    return;
  Device want = n.result(0)->meta().device;
  for (int i = 0; i < n.numOperands(); ++i) {
    const Value *v = n.operands()[i];
    if (v->isTensor() && v->meta().device != want)
      ruleFails("operand {} is on {} but the result is on {}", i, v->meta().device.str(),
                want.str());
  }
}

void expectResultDType(const Node &n, DType want, std::string_view why) {
  DType got = tensorResult(n).dtype;
  if (got != want)
    ruleFails("result dtype {} should be {} ({})", dtypeShortName(got), dtypeShortName(want), why);
}

std::vector<SymInt> broadcastShapes(const std::vector<std::span<const SymInt>> &shapes) {
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
      else if (provablyDifferent(dim, size))
        ruleFails("operand shapes do not broadcast: {} vs {} in dim -{}", dim.str(), size.str(), k);
    }
  }
  return out;
}

int64_t intAttrOr(const Node &n, std::string_view name, int64_t fallback) {
  const Attribute *a = n.attr(name);
  return a ? a->toInt() : fallback;
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

bool isBoolValue(const Value *v) {
  return v->isTensor() ? v->meta().dtype == DType::Bool : v->type().scalar() == ScalarType::Bool;
}

// torch.result_type of the operands from `first` on (where's condition does not vote).
DType promotedDType(const Node &n, int first) {
  std::vector<PromotionOperand> ops;
  for (int i = first; i < n.numOperands(); ++i)
    ops.push_back(promotionOf(n.operands()[i]));
  return resultType(ops);
}

void checkElementwiseDType(const Node &n) {
  int first = n.op() == OpKind::Where ? 1 : 0;
  if (n.op() == OpKind::Where && !isBoolValue(n.operands()[0]))
    ruleFails("the condition (operand 0) of 'where' must be bool, got {}",
              printType(n.operands()[0]->type()));
  DType promoted = promotedDType(n, first);
  if ((n.op() == OpKind::Neg || n.op() == OpKind::Sub) && promoted == DType::Bool)
    ruleFails("'{}' is not supported on bool operands (torch rejects it too)", n.keyword());
  if (n.op() == OpKind::Cast)
    return expectResultDType(n, n.attr("dtype")->toDType(), "the 'dtype' attribute");
  if (n.hasTrait(trait::Comparison))
    return expectResultDType(n, DType::Bool, "comparisons produce bool");
  if (n.hasTrait(trait::FloatResult) && !isFloating(promoted)) {
    DType got = tensorResult(n).dtype;
    if (!isFloating(got))
      ruleFails("'{}' of {} operands produces a floating dtype, got {}", n.keyword(),
                dtypeShortName(promoted), dtypeShortName(got));
    return;
  }
  expectResultDType(n, promoted, "torch.result_type of the operands");
}

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

DType reductionDType(const Node &n, DType in) {
  const Attribute *dtypeAttr = n.attr("dtype");
  switch (n.op()) {
  case OpKind::Argmax:
    return DType::Int64;
  case OpKind::Amax:
  case OpKind::Amin:
    return in;
  case OpKind::Sum:
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

} // namespace

void checkElementwise(const Node &n) {
  bool anyTensor = false;
  for (const Value *v : n.operands())
    anyTensor |= v->isTensor();
  if (!anyTensor && !n.result(0)->isTensor()) { // arithmetic on Python scalars
    if (n.hasTrait(trait::Comparison) && n.result(0)->type().scalar() != ScalarType::Bool)
      ruleFails("comparisons of scalars produce bool, got {}", printType(n.result(0)->type()));
    return;
  }
  const TensorMeta &out = tensorResult(n);
  expectSameDevice(n);
  std::vector<std::span<const SymInt>> shapes;
  for (const Value *v : n.operands())
    if (v->isTensor())
      shapes.emplace_back(v->meta().sizes);
  expectSizes(out.sizes, broadcastShapes(shapes), "the broadcast of the operand shapes");
  checkElementwiseDType(n);
}

void checkReduction(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0);
  const TensorMeta &out = tensorResult(n);
  expectSameDevice(n);
  expectResultDType(n, reductionDType(n, in.dtype),
                    fmt::format("'{}' of {}", n.keyword(), dtypeShortName(in.dtype)));
  if (n.op() == OpKind::Softmax || n.op() == OpKind::LogSoftmax) {
    wrapDim(n.attr("dim")->toInt(), in.rank(), "dim");
    return expectSizes(out.sizes, in.sizes, "softmax keeps the shape");
  }
  std::vector<int64_t> dims = reductionDims(n, in.rank());
  const Attribute *keep = n.attr("keepdim");
  bool keepdim = keep && keep->toBool();
  std::vector<SymInt> want;
  for (int64_t d = 0; d < in.rank(); ++d) {
    bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced)
      want.push_back(in.sizes[d]);
    else if (keepdim)
      want.push_back(1);
  }
  expectSizes(out.sizes, want, keepdim ? "reduced dims kept as 1" : "reduced dims removed");
}

void checkConstant(const Node &n) {
  const Attribute &value = *n.attr("value");
  const Value *out = n.result(0);
  bool fractional = value.is<double>();
  if (!out->isTensor()) {
    ScalarType t = out->type().scalar();
    if ((t == ScalarType::Int && fractional) || (t == ScalarType::Bool && !value.is<bool>()))
      ruleFails("constant value {} does not fit the result type {}", value.str(),
                printType(out->type()));
    return;
  }
  DType dt = out->meta().dtype;
  if (fractional && !isFloating(dt))
    ruleFails("constant value {} does not fit the result dtype {}", value.str(),
              dtypeShortName(dt));
}

void checkSymSize(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0);
  const Value *out = n.result(0);
  if (out->isTensor() || out->type().scalar() != ScalarType::Int)
    ruleFails("the result must be an int, got {}", printType(out->type()));
  if (in.rank() == 0)
    ruleFails("a 0-d tensor has no sizes");
  wrapDim(n.attr("dim")->toInt(), in.rank(), "dim");
}

void checkCall(const Node &n) {
  if (n.attr("target")->toString().empty())
    ruleFails("the 'target' attribute must name a callable");
}

void checkOpRules(const Node &n) {
  switch (n.op()) {
  case OpKind::Input:
  case OpKind::Output:
    return;
  case OpKind::Constant:
    return checkConstant(n);
  case OpKind::SymSize:
    return checkSymSize(n);
  case OpKind::Call: // the results are typed as captured; the callee is opaque
    return checkCall(n);
  case OpKind::Cat:
    return checkCat(n);
  case OpKind::Matmul:
    return checkMatmul(n);
  case OpKind::Linear:
    return checkLinear(n);
  case OpKind::Conv2d:
    return checkConv2d(n);
  case OpKind::ScaledDotProductAttention:
    return checkAttention(n);
  case OpKind::LayerNorm:
    return checkLayerNorm(n);
  case OpKind::Embedding:
    return checkEmbedding(n);
  default:
    break;
  }
  if (n.hasTrait(trait::Elementwise))
    return checkElementwise(n);
  if (n.hasTrait(trait::Reduction))
    return checkReduction(n);
  if (n.hasTrait(trait::View))
    return checkView(n);
}

} // namespace kiln::ir::detail

// Verifier rules for elementwise ops, reductions, constants and the ops of captured programs
// (sym_size, call), plus the shared helpers. What results must be is computed in shape_rules.cc.

#include "ir/shape_rules_layout_impl.h"
#include "ir/shape_rules_loss_impl.h"
#include "ir/shape_rules_nn_impl.h"
#include "ir/shape_rules_random_impl.h"
#include "ir/shape_rules_sort_impl.h"
#include "ir/verifier_impl.h"

#include <algorithm>

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

bool provablyDifferent(const SymInt &a, const SymInt &b) {
  std::optional<int64_t> d = (a - b).constant();
  return d && *d != 0;
}

void expectSizes(std::span<const SymInt> got, std::span<const SymInt> want, std::string_view why) {
  bool ok = got.size() == want.size();
  for (size_t i = 0; ok && i < got.size(); ++i)
    ok = !provablyDifferent(got[i], want[i]);
  if (!ok)
    ruleFails("result shape {} should be {} ({})", printSizes(got), printSizes(want), why);
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

int64_t intAttrOr(const Node &n, std::string_view name, int64_t fallback) {
  const Attribute *a = n.attr(name);
  return a ? a->toInt() : fallback;
}

namespace {

bool isBoolValue(const Value *v) {
  return v->isTensor() ? v->meta().dtype == DType::Bool : v->type().scalar() == ScalarType::Bool;
}

void checkElementwiseDType(const Node &n) {
  int first = n.op() == OpKind::Where ? 1 : 0;
  if (n.op() == OpKind::Where && !isBoolValue(n.operands()[0]))
    ruleFails("the condition (operand 0) of 'where' must be bool, got {}",
              printType(n.operands()[0]->type()));
  DType promoted = promotedDType(n, first);
  if ((n.op() == OpKind::Neg || n.op() == OpKind::Sub) && promoted == DType::Bool)
    ruleFails("'{}' is not supported on bool operands (torch rejects it too)", n.keyword());
  if (n.hasTrait(trait::Integral) && isFloating(promoted))
    ruleFails("'{}' takes integer or bool operands, got {}", n.keyword(), dtypeShortName(promoted));
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
  bool keepdim = n.attr("keepdim") && n.attr("keepdim")->toBool();
  const char *why = n.op() == OpKind::Softmax || n.op() == OpKind::LogSoftmax
                        ? "softmax keeps the shape"
                    : keepdim ? "reduced dims kept as 1"
                              : "reduced dims removed";
  expectSizes(out.sizes, reductionSizes(n, in), why);
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

void checkWeight(const Node &n) {
  if (n.attr("name")->toString().empty())
    ruleFails("the 'name' attribute must name a tensor of the weights file");
  if (!n.result(0)->isTensor())
    ruleFails("the result must be a tensor, got {}", printType(n.result(0)->type()));
}

void checkSymConstrainRange(const Node &n) {
  const std::string &symbol = n.attr("symbol")->toString();
  bool isSymbol = false;
  try {
    isSymbol = !symbol.empty() && SymInt::parse(symbol).symbolName() == symbol;
  } catch (const std::exception &) {
  }
  if (!isSymbol)
    ruleFails("'symbol' must name a size symbol, got \"{}\"", symbol);
  int64_t lo = n.attr("min")->toInt(), hi = n.attr("max")->toInt();
  if (lo < 0 || (hi != -1 && hi < lo))
    ruleFails("the range [{}, {}] is empty or negative (max = -1: no upper bound)", lo, hi);
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
  case OpKind::Weight:
    return checkWeight(n);
  case OpKind::SymConstrainRange:
    return checkSymConstrainRange(n);
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
  case OpKind::Conv3d:
    return checkConv(n);
  case OpKind::ScaledDotProductAttention:
    return checkAttention(n);
  case OpKind::LayerNorm:
  case OpKind::RmsNorm:
    return checkLayerNorm(n);
  case OpKind::MseLoss:
  case OpKind::L1Loss:
    return checkLoss(n);
  case OpKind::Embedding:
    return checkEmbedding(n);
  case OpKind::Arange:
    return checkArange(n);
  case OpKind::Full:
    return checkFull(n);
  case OpKind::Contiguous:
    return checkContiguous(n);
  case OpKind::BatchNorm:
    return checkBatchNorm(n);
  case OpKind::MaxPool2d:
  case OpKind::AvgPool2d:
  case OpKind::AdaptiveAvgPool2d:
    return checkPool(n);
  case OpKind::MaxPool2dBackward:
    return checkPoolBackward(n);
  case OpKind::ConvolutionWeightGrad:
    return checkConvolutionWeightGrad(n);
  case OpKind::SliceScatter:
  case OpKind::SelectScatter:
    return checkScatter(n);
  default:
    if (isLayoutOp(n.op()))
      return checkLayout(n);
    if (isClassLossOp(n.op()))
      return checkClassLoss(n);
    if (isScanOrSortOp(n.op()))
      return checkScanOrSort(n);
    if (isRandomOp(n.op()))
      return checkRandom(n);
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

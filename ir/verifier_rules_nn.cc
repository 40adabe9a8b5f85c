// Verifier rules of the model-zoo ops (arange, contiguous, batch_norm, the 2-d pools): the
// checks on operands and attributes beyond the result types computed in shape_rules_nn.cc.

#include "ir/shape_rules_nn_impl.h"
#include "ir/verifier_impl.h"

#include <fmt/ranges.h>

namespace kiln::ir::detail {

void checkArange(const Node &n) {
  std::vector<SymInt> want = arangeSizes(n);
  DType dtype = arangeDType(n);
  if (dtype == DType::Bool)
    ruleFails("arange cannot produce bool");
  expectResultDType(n, dtype, "the 'dtype' attribute (i64 when absent)");
  expectSizes(tensorResult(n).sizes, want, "ceil((end - start) / step) elements");
}

void checkFull(const Node &n) {
  expectResultDType(n, n.attr("dtype")->toDType(), "the 'dtype' attribute");
  expectSizes(tensorResult(n).sizes, fullSizes(n), "the 'size' attribute");
}

void checkContiguous(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0);
  const TensorMeta &out = tensorResult(n);
  expectSameDevice(n);
  expectResultDType(n, in.dtype, "the operand dtype");
  expectSizes(out.sizes, in.sizes, "contiguous keeps the shape");
  if (out.strides != contiguousStrides(out.sizes))
    ruleFails("the result of contiguous must have contiguous strides, got {}",
              printSizes(out.strides));
}

void checkBatchNorm(const Node &n) {
  const TensorMeta &x = tensorOperand(n, 0);
  if (x.rank() < 2)
    ruleFails("batch_norm needs an input of rank >= 2 ([N, C, ...]), got {}", printSizes(x.sizes));
  if (!isFloating(x.dtype))
    ruleFails("batch_norm needs a floating input, got {}", dtypeShortName(x.dtype));
  static constexpr const char *kNames[] = {"input", "running_mean", "running_var", "weight",
                                           "bias"};
  for (int i = 1; i < n.numOperands(); ++i) {
    const TensorMeta &p = tensorOperand(n, i);
    if (p.rank() != 1 || provablyDifferent(p.sizes[0], x.sizes[1]))
      ruleFails("batch_norm {} (operand {}) must have shape [{}] (the channels), got {}", kNames[i],
                i, x.sizes[1].str(), printSizes(p.sizes));
    if (!isFloating(p.dtype))
      ruleFails("batch_norm {} (operand {}) must be floating, got {}", kNames[i], i,
                dtypeShortName(p.dtype));
  }
  if (const Attribute *eps = n.attr("eps"); eps && !(eps->toDouble() >= 0))
    ruleFails("batch_norm's eps must be >= 0, got {}", eps->str());
  expectSameDevice(n);
  expectResultDType(n, x.dtype, "the input dtype");
  expectSizes(tensorResult(n).sizes, x.sizes, "batch_norm keeps the input shape");
}

void checkPool(const Node &n) {
  std::vector<SymInt> want = poolSizes(n);
  const TensorMeta &x = tensorOperand(n, 0);
  bool averages = n.op() != OpKind::MaxPool2d;
  if (averages ? !isFloating(x.dtype) : x.dtype == DType::Bool)
    ruleFails("{} needs a {} input, got {}", n.keyword(), averages ? "floating" : "numeric",
              dtypeShortName(x.dtype));
  if (const Attribute *d = n.attr("divisor_override"); d && d->toInt() == 0)
    ruleFails("avg_pool2d's divisor_override must be nonzero");
  expectSameDevice(n);
  expectResultDType(n, x.dtype, "the input dtype");
  expectSizes(tensorResult(n).sizes, want,
              fmt::format("{} of {}", n.keyword(), printSizes(x.sizes)));
}

void checkPoolBackward(const Node &n) {
  const TensorMeta &x = tensorOperand(n, 0), &g = tensorOperand(n, 1);
  if (!isFloating(g.dtype) || g.dtype != x.dtype)
    ruleFails("{} needs a floating gradient of the input's dtype, got {} and {}", n.keyword(),
              dtypeShortName(x.dtype), dtypeShortName(g.dtype));
  expectSameDevice(n);
  expectSizes(tensorResult(n).sizes, x.sizes, "max_pool2d_backward has the input's shape");
}

void checkConvolutionWeightGrad(const Node &n) {
  const TensorMeta &x = tensorOperand(n, 0), &g = tensorOperand(n, 1);
  if (!isFloating(g.dtype) || g.dtype != x.dtype)
    ruleFails("{} needs a floating gradient of the input's dtype, got {} and {}", n.keyword(),
              dtypeShortName(x.dtype), dtypeShortName(g.dtype));
  if ((x.sizes.size() != 4 && x.sizes.size() != 5) || g.sizes.size() != x.sizes.size())
    ruleFails("{} needs a batched 2-d or 3-d input and gradient, got {} and {}", n.keyword(),
              printSizes(x.sizes), printSizes(g.sizes));
  std::vector<int64_t> ws = n.attr("weight_size")->toInts();
  const int64_t groups = n.attr("groups") ? n.attr("groups")->toInt() : 1;
  if (ws.size() != x.sizes.size() || groups < 1 || ws[0] % groups != 0 ||
      ws[1] * groups != x.sizes[1] || g.sizes[1] != ws[0])
    ruleFails("{}: weight_size {} does not fit an input of {} channels, a gradient of {} and "
              "{} group(s)",
              n.keyword(), fmt::format("[{}]", fmt::join(ws, ", ")), x.sizes[1].str(),
              g.sizes[1].str(), groups);
  expectSameDevice(n);
}

} // namespace kiln::ir::detail

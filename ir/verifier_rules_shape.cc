// Verifier rules for views, cat, library calls (matmul, linear, conv2d, attention), the
// composites kept whole until decomposition (layer_norm, embedding) and the scatters. What the
// results must be is computed in shape_rules*.cc; these add the checks on the operands.

#include "ir/verifier_impl.h"

namespace kiln::ir::detail {

namespace {

void expectSameDType(const Node &n, int a, int b) {
  DType da = tensorOperand(n, a).dtype, db = tensorOperand(n, b).dtype;
  if (da != db)
    ruleFails("'{}' needs operands of one dtype, got {} (operand {}) and {} (operand {})",
              n.keyword(), dtypeShortName(da), a, dtypeShortName(db), b);
}

} // namespace

void checkView(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0);
  const TensorMeta &out = tensorResult(n);
  expectSameDevice(n);
  if (out.dtype != in.dtype)
    ruleFails("'{}' keeps the dtype, but the operand is {} and the result {}", n.keyword(),
              dtypeShortName(in.dtype), dtypeShortName(out.dtype));
  expectSizes(out.sizes, viewSizes(n, in, out.sizes, nullptr),
              fmt::format("'{}' of {}", n.keyword(), printSizes(in.sizes)));
}

void checkCat(const Node &n) {
  auto [dtype, want] = catType(n, nullptr);
  expectSameDevice(n);
  expectResultDType(n, dtype, "the promoted dtype of the operands");
  expectSizes(tensorResult(n).sizes, want, "operand sizes summed along dim");
}

void checkMatmul(const Node &n) {
  std::vector<SymInt> want = matmulSizes(n, nullptr);
  expectSameDType(n, 0, 1);
  expectSameDevice(n);
  expectResultDType(n, tensorOperand(n, 0).dtype, "the operand dtype");
  expectSizes(tensorResult(n).sizes, want, "matmul of the operand shapes");
}

void checkLinear(const Node &n) {
  std::vector<SymInt> want = linearSizes(n);
  const TensorMeta &x = tensorOperand(n, 0), &w = tensorOperand(n, 1);
  expectSameDType(n, 0, 1);
  if (n.numOperands() == 3) {
    expectSameDType(n, 0, 2);
    const TensorMeta &bias = tensorOperand(n, 2);
    if (bias.rank() != 1 || provablyDifferent(bias.sizes[0], w.sizes[0]))
      ruleFails("linear bias must have shape [{}], got {}", w.sizes[0].str(),
                printSizes(bias.sizes));
  }
  expectSameDevice(n);
  expectResultDType(n, x.dtype, "the operand dtype");
  expectSizes(tensorResult(n).sizes, want, "input sizes with the last replaced by out_features");
}

void checkConv(const Node &n) {
  std::vector<SymInt> want = convSizes(n);
  const std::string_view op = n.keyword();
  const TensorMeta &x = tensorOperand(n, 0), &w = tensorOperand(n, 1);
  expectSameDType(n, 0, 1);
  if (n.numOperands() == 3) {
    expectSameDType(n, 0, 2);
    const TensorMeta &bias = tensorOperand(n, 2);
    if (bias.rank() != 1 || provablyDifferent(bias.sizes[0], w.sizes[0]))
      ruleFails("{} bias must have shape [{}], got {}", op, w.sizes[0].str(),
                printSizes(bias.sizes));
  }
  expectSameDevice(n);
  const TensorMeta &out = tensorResult(n);
  const int64_t channel = x.rank() - (w.rank() - 1);
  if (out.rank() != x.rank())
    ruleFails("{} result rank {} should equal the input rank {}", op, out.rank(), x.rank());
  if (provablyDifferent(out.sizes[channel], w.sizes[0]))
    ruleFails("{} result has {} channels but the weight has {} output channels", op,
              out.sizes[channel].str(), w.sizes[0].str());
  expectResultDType(n, x.dtype, "the operand dtype");
  expectSizes(out.sizes, want, fmt::format("{} of the input and weight shapes", op));
}

void checkAttention(const Node &n) {
  std::vector<SymInt> want = attentionSizes(n);
  const TensorMeta &q = tensorOperand(n, 0);
  if (!isFloating(q.dtype))
    ruleFails("scaled_dot_product_attention needs a floating dtype, got {}",
              dtypeShortName(q.dtype));
  expectSameDType(n, 0, 1);
  expectSameDType(n, 0, 2);
  if (n.numOperands() == 4 && tensorOperand(n, 3).dtype != DType::Bool)
    expectSameDType(n, 0, 3);
  expectSameDevice(n);
  expectResultDType(n, q.dtype, "the query dtype");
  expectSizes(tensorResult(n).sizes, want, "query sizes with the value head size");
}

void checkLayerNorm(const Node &n) {
  const TensorMeta &x = tensorOperand(n, 0);
  std::vector<SymInt> normalized = n.attr("normalized_shape")->toSymInts();
  if (!isFloating(x.dtype))
    ruleFails("{} needs a floating input, got {}", n.keyword(), dtypeShortName(x.dtype));
  if (static_cast<int64_t>(normalized.size()) > x.rank())
    ruleFails("normalized_shape {} has more dims than the input {}", printSizes(normalized),
              printSizes(x.sizes));
  size_t lead = x.sizes.size() - normalized.size();
  for (size_t i = 0; i < normalized.size(); ++i)
    if (provablyDifferent(normalized[i], x.sizes[lead + i]))
      ruleFails("normalized_shape {} does not match the trailing dims of input {}",
                printSizes(normalized), printSizes(x.sizes));
  for (int i = 1; i < n.numOperands(); ++i) {
    expectSameDType(n, 0, i);
    const TensorMeta &p = tensorOperand(n, i);
    bool ok = p.sizes.size() == normalized.size();
    for (size_t d = 0; ok && d < normalized.size(); ++d)
      ok = !provablyDifferent(p.sizes[d], normalized[d]);
    if (!ok)
      ruleFails("{} {} has shape {}, expected normalized_shape {}", n.keyword(),
                i == 1 ? "weight" : "bias", printSizes(p.sizes), printSizes(normalized));
  }
  expectSameDevice(n);
  expectResultDType(n, x.dtype, "the input dtype");
  expectSizes(tensorResult(n).sizes, x.sizes, "normalization keeps the input shape");
}

void checkEmbedding(const Node &n) {
  const TensorMeta &indices = tensorOperand(n, 0), &weight = tensorOperand(n, 1);
  if (indices.dtype != DType::Int64 && indices.dtype != DType::Int32)
    ruleFails("embedding indices (operand 0) must be i64 or i32, got {}",
              dtypeShortName(indices.dtype));
  std::vector<SymInt> want = embeddingSizes(n);
  expectSameDevice(n);
  expectResultDType(n, weight.dtype, "the weight dtype");
  expectSizes(tensorResult(n).sizes, want, "index sizes followed by the embedding size");
}

void checkScatter(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0);
  expectSameDType(n, 0, 1);
  expectSizes(tensorOperand(n, 1).sizes, scatterSourceSizes(n, nullptr),
              fmt::format("the source of '{}' has the shape of the part it replaces", n.keyword()));
  expectSameDevice(n);
  expectResultDType(n, in.dtype, "the input dtype");
  expectSizes(tensorResult(n).sizes, in.sizes, "the input's shape");
}

void checkLoss(const Node &n) {
  const TensorMeta &in = tensorOperand(n, 0), &target = tensorOperand(n, 1);
  const Attribute *r = n.attr("reduction");
  std::string reduction = r ? r->toString() : "mean";
  // l1_loss of integers is an integer sum (eager has no dtype for their mean); mse needs floats.
  if (!isFloating(in.dtype) &&
      (n.op() == OpKind::MseLoss || reduction == "mean" || in.dtype == DType::Bool))
    ruleFails("{} needs a floating input here, got {}", n.keyword(), dtypeShortName(in.dtype));
  expectSameDType(n, 0, 1);
  expectSameDevice(n);
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    ruleFails("reduction must be \"mean\", \"sum\" or \"none\", got \"{}\"", reduction);
  expectResultDType(n, isFloating(in.dtype) || reduction == "none" ? in.dtype : DType::Int64,
                    "the input dtype (int64 for an integer sum)");
  std::vector<SymInt> sizes =
      reduction == "none" ? broadcastShapes({in.sizes, target.sizes}) : std::vector<SymInt>{};
  expectSizes(tensorResult(n).sizes, sizes, "the reduction's shape");
}

} // namespace kiln::ir::detail

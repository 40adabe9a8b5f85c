// Shape rules of the class losses (see ops.def): input (C), (N, C) or (N, C, d1, ...) with the
// classes in dim 1 (dim 0 unbatched), a target of class indices with one entry per sample, or
// for cross_entropy class probabilities of the input's shape. Eager kiln's conditions and words.

#include "ir/shape_rules_loss_impl.h"
#include "ir/verifier_impl.h"

namespace kiln::ir::detail {

namespace {

/// The shape of one value per sample: the input's without its class dim.
std::vector<SymInt> sampleSizes(const TensorMeta &in) {
  if (in.rank() == 1)
    return {};
  std::vector<SymInt> s = in.sizes;
  s.erase(s.begin() + 1);
  return s;
}

/// Whether sizes `a` and `b` may be equal; records the equalities relied on in `assumed`.
bool mayEqual(std::span<const SymInt> a, std::span<const SymInt> b, SymAssumptions *assumed) {
  if (a.size() != b.size())
    return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (provablyDifferent(a[k], b[k]))
      return false;
  for (size_t k = 0; k < a.size() && assumed; ++k)
    if (a[k] != b[k])
      assumed->add(SymRelation{a[k], RelOp::Eq, b[k]});
  return true;
}

/// Checks class-index targets; returns the shape of the unreduced loss.
std::vector<SymInt> indexTargetSizes(std::string_view op, const TensorMeta &in,
                                     const TensorMeta &target, SymAssumptions *assumed) {
  if (target.dtype != DType::Int64 && target.dtype != DType::UInt8)
    ruleFails("{}: expected target dtype to be int64 or uint8 (class indices), but got {}", op,
              dtypeShortName(target.dtype));
  if (in.rank() == 1) {
    if (!(target.rank() == 0 || mayEqual(target.sizes, std::vector<SymInt>{1}, assumed)))
      ruleFails("{}: for 1D input, the target must be 0-d or have size 1, but got target of "
                "shape {}",
                op, printSizes(target.sizes));
    return target.sizes;
  }
  std::vector<SymInt> samples = sampleSizes(in);
  if (!mayEqual(target.sizes, samples, assumed))
    ruleFails("{}: expected target of shape {} for input of shape {}, but got target of shape {}",
              op, printSizes(samples), printSizes(in.sizes), printSizes(target.sizes));
  return samples;
}

} // namespace

bool isClassLossOp(OpKind op) { return op == OpKind::NllLoss || op == OpKind::CrossEntropy; }

TensorMeta classLossType(const Node &n, SymAssumptions *assumed) {
  std::string_view op = n.keyword();
  const TensorMeta &in = tensorOperand(n, 0), &target = tensorOperand(n, 1);
  if (in.rank() == 0)
    ruleFails("{}: expected 1 or more dimensions (got 0)", op);
  if (!isFloating(in.dtype))
    ruleFails("{}: expected a floating point input, got {}", op, dtypeShortName(in.dtype));
  const SymInt &classes = in.sizes[in.rank() == 1 ? 0 : 1];
  std::vector<SymInt> unreduced;
  if (n.op() == OpKind::CrossEntropy && isFloating(target.dtype) &&
      mayEqual(target.sizes, in.sizes, assumed)) {
    // Class probabilities (eager promotes mixed dtypes; a graph keeps them equal).
    if (target.dtype != in.dtype)
      ruleFails("{}: expected class probabilities of the input's dtype {}, but got {}", op,
                dtypeShortName(in.dtype), dtypeShortName(target.dtype));
    const Attribute *ignore = n.attr("ignore_index");
    if (ignore && ignore->toInt() >= 0)
      ruleFails("{}: ignore_index is not supported for floating point target", op);
    unreduced = sampleSizes(in);
  } else {
    unreduced = indexTargetSizes(op, in, target, assumed);
  }
  if (n.numOperands() > 2) {
    const TensorMeta &w = tensorOperand(n, 2);
    if (!mayEqual(w.sizes, std::span<const SymInt>(&classes, 1), assumed))
      ruleFails("{}: weight tensor should be defined either for all {} classes or no classes but "
                "got weight tensor of shape: {}",
                op, classes.str(), printSizes(w.sizes));
    if (w.dtype != in.dtype)
      ruleFails("{}: expected weight of the input's dtype {}, but got {}", op,
                dtypeShortName(in.dtype), dtypeShortName(w.dtype));
  }
  if (const Attribute *s = n.attr("label_smoothing");
      s && !(s->toDouble() >= 0 && s->toDouble() <= 1))
    ruleFails("{}: label_smoothing must be between 0.0 and 1.0. Got: {}", op, s->toDouble());
  const Attribute *r = n.attr("reduction");
  std::string reduction = r ? r->toString() : "mean";
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    ruleFails("reduction must be \"mean\", \"sum\" or \"none\", got \"{}\"", reduction);
  return TensorMeta::contiguous(in.dtype, reduction == "none" ? unreduced : std::vector<SymInt>{},
                                in.device);
}

void checkClassLoss(const Node &n) {
  TensorMeta want = classLossType(n, nullptr);
  expectSameDevice(n);
  expectResultDType(n, want.dtype, "the input dtype");
  expectSizes(tensorResult(n).sizes, want.sizes, "the reduction's shape");
}

} // namespace kiln::ir::detail

// Shape rules of the random ops (see ops.def): the generator state a program draws from, and
// dropout and rand over it, with eager kiln's conditions and words.

#include "ir/shape_rules_random_impl.h"
#include "ir/verifier_impl.h"

namespace kiln::ir::detail {

namespace {

/// Operand `i` must be a philox_state result: an int64 tensor of 2 elements (seed, offset).
void expectState(const Node &n, int i) {
  const TensorMeta &s = tensorOperand(n, i);
  if (s.dtype != DType::Int64 || s.rank() != 1 || s.sizes[0].constant() != 2)
    ruleFails("{}: the generator state must be an int64 tensor of 2 elements, got {} {}",
              n.keyword(), dtypeShortName(s.dtype), printSizes(s.sizes));
}

} // namespace

bool isRandomOp(OpKind op) {
  return op == OpKind::PhiloxState || op == OpKind::Dropout || op == OpKind::Rand ||
         op == OpKind::Randn || op == OpKind::Bernoulli || op == OpKind::Randint ||
         op == OpKind::Randperm;
}

TensorMeta randomType(const Node &n) {
  switch (n.op()) {
  case OpKind::PhiloxState: {
    SymInt count = n.attr("count")->toSymInt();
    if (std::optional<int64_t> c = count.constant(); c && *c < 0)
      ruleFails("philox_state: a negative count of {} counters", *c);
    return TensorMeta::contiguous(DType::Int64, {SymInt(2)});
  }
  case OpKind::Dropout: {
    const TensorMeta &in = tensorOperand(n, 0);
    expectState(n, 1);
    double p = n.attr("p")->toDouble();
    if (!(p >= 0.0 && p <= 1.0))
      ruleFails("dropout probability has to be between 0 and 1, but got {}", p);
    if (!isFloating(in.dtype))
      ruleFails("dropout: expected a floating point input, got {}", dtypeShortName(in.dtype));
    return TensorMeta::contiguous(in.dtype, in.sizes, in.device);
  }
  case OpKind::Randperm: {
    expectState(n, 0);
    SymInt count = n.attr("n")->toSymInt();
    if (std::optional<int64_t> c = count.constant(); c && *c < 0)
      ruleFails("randperm: Trying to create tensor with negative dimension {}: [{}]", *c, *c);
    DType dtype = n.attr("dtype")->toDType();
    if (dtype == DType::Bool)
      ruleFails("\"randperm\" not implemented for 'bool'");
    return TensorMeta::contiguous(dtype, {count}, tensorOperand(n, 0).device);
  }
  default: { // rand, randn, bernoulli
    expectState(n, 0);
    DType dtype = n.attr("dtype")->toDType();
    if (n.op() == OpKind::Bernoulli && n.numOperands() == 2) {
      const TensorMeta &probs = tensorOperand(n, 1);
      if (!isFloating(probs.dtype))
        ruleFails("bernoulli_: not implemented for probability tensors of dtype '{}' (expected a "
                  "floating point dtype)",
                  dtypeShortName(probs.dtype));
      if (n.attr("p"))
        ruleFails("bernoulli: both a probability tensor and p");
      std::vector<SymInt> sizes = n.attr("size")->toSymInts();
      if (broadcastShapes({probs.sizes, sizes}) != sizes)
        ruleFails("bernoulli_: probability tensor of shape {} cannot be broadcast to the output "
                  "shape {}",
                  printSizes(probs.sizes), printSizes(sizes));
    } else if (n.op() == OpKind::Bernoulli) {
      if (!n.attr("p"))
        ruleFails("bernoulli: expected p or a probability tensor");
      double p = n.attr("p")->toDouble();
      if (!(p >= 0.0 && p <= 1.0))
        ruleFails("bernoulli_ expects p to be in [0, 1], but got p={}", p);
    } else if (n.op() == OpKind::Randint) {
      const int64_t low = n.attr("low")->toInt(), high = n.attr("high")->toInt();
      if (!(low < high))
        ruleFails("randint: expected 'low' to be less than 'high', but got low={} >= high={}", low,
                  high);
      if (static_cast<uint64_t>(high) - static_cast<uint64_t>(low) > (uint64_t{1} << 32))
        ruleFails("randint: a range of more than 2^32 values (eager draws two words for it)");
    } else if (!isFloating(dtype))
      ruleFails("{}: not implemented for {} (expected a floating point dtype)", n.keyword(),
                dtypeShortName(dtype));
    std::vector<SymInt> sizes = n.attr("size")->toSymInts();
    for (const SymInt &s : sizes)
      if (std::optional<int64_t> c = s.constant(); c && *c < 0)
        ruleFails("{}: negative dimension {} in size {}", n.keyword(), *c, printSizes(sizes));
    return TensorMeta::contiguous(dtype, sizes, tensorOperand(n, 0).device);
  }
  }
}

void checkRandom(const Node &n) {
  TensorMeta want = randomType(n);
  expectSameDevice(n);
  expectResultDType(n, want.dtype, "the op's rule");
  expectSizes(tensorResult(n).sizes, want.sizes, "the op's rule");
}

} // namespace kiln::ir::detail

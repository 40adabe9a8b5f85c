// Building a LoopProgram: buffers, nodes, and the checks that keep it well formed.

#include "ir/loop/program.h"

#include "runtime/error.h"

#include <fmt/format.h>

namespace kiln::ir::loop {

namespace {

constexpr std::string_view kNodeKeywords[] = {
#define KILN_LOOP_NODE(E, K) K,
#include "ir/loop/loop.def"
};

struct ReductionInfo {
  std::string_view keyword;
  int numResults;
};
constexpr ReductionInfo kReductions[] = {
#define KILN_LOOP_REDUCTION(E, K, N) {K, N},
#include "ir/loop/loop.def"
};

void checkSizes(std::span<const SymInt> sizes, std::string_view what) {
  for (size_t k = 0; k < sizes.size(); ++k) {
    checkNoLoopVars(sizes[k], fmt::format("{} [{}]", what, k));
    if (std::optional<int64_t> c = sizes[k].constant())
      KILN_CHECK_KIND(Value, *c >= 0, "{} [{}] is negative ({})", what, k, *c);
  }
}

TensorMeta makeMeta(DType dtype, std::vector<SymInt> sizes, const LoopProgram::Strides &strides,
                    std::string_view what) {
  checkSizes(sizes, what);
  TensorMeta meta = TensorMeta::contiguous(dtype, std::move(sizes));
  if (strides) {
    KILN_CHECK_KIND(Value, strides->size() == meta.sizes.size(), "{}: {} strides for {} sizes",
                    what, strides->size(), meta.sizes.size());
    for (size_t k = 0; k < strides->size(); ++k)
      checkNoLoopVars((*strides)[k], fmt::format("{} stride [{}]", what, k));
    meta.strides = *strides;
  }
  return meta;
}

} // namespace

std::string_view loopNodeKeyword(LoopNodeKind kind) {
  return kNodeKeywords[static_cast<int>(kind)];
}
std::string_view reductionKeyword(ReductionKind kind) {
  return kReductions[static_cast<int>(kind)].keyword;
}
int reductionNumResults(ReductionKind kind) {
  return kReductions[static_cast<int>(kind)].numResults;
}

std::string_view bufferKindName(BufferKind kind) {
  switch (kind) {
  case BufferKind::Input:
    return "input";
  case BufferKind::Output:
    return "output";
  default:
    return "intermediate";
  }
}

std::string bufferName(BufferId id) { return "buf" + std::to_string(id.index); }

std::string LoopProgram::nextName() const {
  return bufferName(BufferId{static_cast<int32_t>(buffers_.size())});
}

const Buffer &LoopProgram::buffer(BufferId id) const {
  KILN_CHECK_KIND(Index, id.valid() && id.index < static_cast<int32_t>(buffers_.size()),
                  "loop program: no buffer {} (it has {})", bufferName(id), buffers_.size());
  return buffers_[id.index];
}

BufferId LoopProgram::addInput(DType dtype, std::vector<SymInt> sizes, Strides strides) {
  KILN_CHECK_KIND(Value, nodes_.empty(),
                  "loop program: input {} declared after a loop node (inputs come first)",
                  nextName());
  BufferId id{static_cast<int32_t>(buffers_.size())};
  TensorMeta meta = makeMeta(dtype, std::move(sizes), strides, "input " + bufferName(id));
  buffers_.push_back(Buffer{id, BufferKind::Input, std::move(meta)});
  inputs_.push_back(id);
  return id;
}

std::vector<BufferId> LoopProgram::addNode(LoopNode node, std::span<const DType> dtypes,
                                           const Strides &strides) {
  for (DType dtype : dtypes) {
    BufferId id{static_cast<int32_t>(buffers_.size())};
    TensorMeta meta = makeMeta(dtype, node.ranges, strides, "buffer " + bufferName(id));
    buffers_.push_back(Buffer{id, BufferKind::Intermediate, std::move(meta)});
    node.outputs.push_back(id);
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().outputs;
}

BufferId LoopProgram::pointwise(std::vector<SymInt> ranges, const BodyFn &body, Strides strides) {
  std::string context = "pointwise " + nextName();
  checkSizes(ranges, context + " range");
  LoopNode node;
  node.kind = LoopNodeKind::Pointwise;
  node.ranges = std::move(ranges);
  node.body = Ops::record(body, buffers_, node.varRanges(), context);
  DType dtype = node.body->dtype();
  return addNode(std::move(node), {&dtype, 1}, strides)[0];
}

std::vector<BufferId> LoopProgram::addReduction(ReductionKind kind, std::vector<SymInt> ranges,
                                                std::vector<SymInt> reductionRanges,
                                                const BodyFn &body, const Strides &strides) {
  std::string context = fmt::format("reduction {} {}", reductionKeyword(kind), nextName());
  checkSizes(ranges, context + " range");
  checkSizes(reductionRanges, context + " reduction range");
  LoopNode node;
  node.kind = LoopNodeKind::Reduction;
  node.ranges = std::move(ranges);
  node.reductionRanges = std::move(reductionRanges);
  node.reduction = kind;
  node.body = Ops::record(body, buffers_, node.varRanges(), context);
  DType t = node.body->dtype();
  std::vector<DType> dtypes{t};
  switch (kind) {
  case ReductionKind::Sum:
  case ReductionKind::Prod:
    KILN_CHECK_KIND(Type, t != DType::Bool, "{}: reduces numeric values, but the body yields b8",
                    context);
    break;
  case ReductionKind::ArgMax:
  case ReductionKind::ArgMin:
    dtypes = {DType::Int64};
    break;
  case ReductionKind::Welford:
    KILN_CHECK_KIND(Type, isFloating(t), "{}: reduces floating values, but the body yields {}",
                    context, dtypeShortName(t));
    dtypes = {t, t, DType::Int64};
    break;
  default:
    break;
  }
  return addNode(std::move(node), dtypes, strides);
}

BufferId LoopProgram::reduction(ReductionKind kind, std::vector<SymInt> ranges,
                                std::vector<SymInt> reductionRanges, const BodyFn &body,
                                Strides strides) {
  KILN_CHECK_KIND(Value, reductionNumResults(kind) == 1,
                  "loop program: a {} reduction has {} results; use welford()",
                  reductionKeyword(kind), reductionNumResults(kind));
  return addReduction(kind, std::move(ranges), std::move(reductionRanges), body, strides)[0];
}

WelfordBuffers LoopProgram::welford(std::vector<SymInt> ranges, std::vector<SymInt> reductionRanges,
                                    const BodyFn &body) {
  std::vector<BufferId> ids = addReduction(ReductionKind::Welford, std::move(ranges),
                                           std::move(reductionRanges), body, std::nullopt);
  return {ids[0], ids[1], ids[2]};
}

std::vector<BufferId> LoopProgram::external(std::string op, std::vector<BufferId> inputs,
                                            std::vector<TensorMeta> outputs,
                                            Attributes attributes) {
  KILN_CHECK_KIND(Value, !op.empty(), "loop program: an extern node needs an op name");
  KILN_CHECK_KIND(Value, !outputs.empty(), "loop program: extern \"{}\" writes no buffer", op);
  for (BufferId in : inputs)
    buffer(in); // throws for an unknown buffer
  LoopNode node;
  node.kind = LoopNodeKind::Extern;
  node.externOp = std::move(op);
  node.externInputs = std::move(inputs);
  node.attributes = std::move(attributes);
  for (TensorMeta &meta : outputs) {
    BufferId id{static_cast<int32_t>(buffers_.size())};
    Strides strides; // no strides given: contiguous
    if (!meta.strides.empty() || meta.sizes.empty())
      strides = meta.strides;
    TensorMeta checked =
        makeMeta(meta.dtype, meta.sizes, strides, "extern output " + bufferName(id));
    checked.device = meta.device;
    buffers_.push_back(Buffer{id, BufferKind::Intermediate, std::move(checked)});
    node.outputs.push_back(id);
  }
  nodes_.push_back(std::move(node));
  return nodes_.back().outputs;
}

void LoopProgram::markOutput(BufferId id) {
  buffer(id); // throws for an unknown buffer
  Buffer &b = buffers_[id.index];
  KILN_CHECK_KIND(Value, b.kind == BufferKind::Intermediate,
                  "loop program: {} is {} buffer; outputs are buffers a node writes, each once",
                  b.name(), b.kind == BufferKind::Input ? "an input" : "already an output");
  b.kind = BufferKind::Output;
  outputs_.push_back(id);
}

std::set<std::string, std::less<>> LoopProgram::sizeSymbols() const {
  std::set<std::string, std::less<>> all;
  for (const Buffer &b : buffers_) {
    for (const SymInt &s : b.meta.sizes)
      s.collectSymbols(all);
    for (const SymInt &s : b.meta.strides)
      s.collectSymbols(all);
  }
  for (const LoopNode &n : nodes_) {
    for (const SymInt &s : n.ranges)
      s.collectSymbols(all);
    for (const SymInt &s : n.reductionRanges)
      s.collectSymbols(all);
    if (n.body)
      for (const Expr *e : n.body->exprs())
        e->index.collectSymbols(all);
  }
  std::erase_if(all, [](const std::string &s) { return isLoopVarName(s); });
  return all;
}

} // namespace kiln::ir::loop

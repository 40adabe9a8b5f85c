// Pointwise kernels: a grid-stride loop over the node's points, and — when the output is
// contiguous along the innermost range variable — a twin that does W points per iteration with
// 128-bit loads and stores (see [Note: CUDA kernels] in emit.h).

#include "codegen/cuda/emit_impl.h"

#include "ir/loop/index.h"
#include "runtime/error.h"

#include <algorithm>

namespace kiln::codegen::cuda::detail {

using namespace ir::loop;

namespace {

std::vector<std::string> rangeVars(size_t k) {
  std::vector<std::string> vars;
  for (size_t j = 0; j < k; ++j)
    vars.push_back(loopVarName(j));
  return vars;
}

/// Opens the grid-stride loop `for (p ...) {` over `points` (a C expression).
void gridStride(Writer &w, const std::string &points) {
  w.emit("const long long points = {};", points);
  w.emit("const long long stride = (long long)gridDim.x * blockDim.x;");
  w.open("for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < points; "
         "p += stride)");
}

/// A vector plan and the loads it vectorizes.
struct VectorChoice {
  VectorPlan plan;
  LaneInfo lane;
};

/// Adds `terms` to `divisible` unless each constant one is divisible by `width` (then false).
bool addTerms(std::vector<SymInt> &divisible, const std::vector<SymInt> &terms, int width) {
  std::vector<SymInt> symbolic;
  for (const SymInt &t : terms) {
    if (std::optional<int64_t> c = t.constant()) {
      if (*c % width != 0)
        return false;
    } else {
      symbolic.push_back(t);
    }
  }
  for (const SymInt &t : symbolic)
    if (std::find(divisible.begin(), divisible.end(), t) == divisible.end())
      divisible.push_back(t);
  return true;
}

std::optional<VectorChoice> planVector(const NodeContext &ctx) {
  const LoopNode &node = *ctx.node;
  const LoopProgram &program = *ctx.program;
  size_t k = node.ranges.size();
  if (k == 0)
    return std::nullopt;
  BufferId out = node.outputs[0];
  const Buffer &outBuf = program.buffer(out);
  if (outBuf.meta.strides[k - 1].constant() != 1)
    return std::nullopt;
  VarRanges ranges = node.varRanges();
  std::string laneVar = loopVarName(k - 1);
  std::vector<IndexExpr> vars;
  for (size_t j = 0; j < k; ++j)
    vars.push_back(SymInt::symbol(loopVarName(j)));
  std::optional<std::vector<SymInt>> storeTerms =
      alignmentTerms(flatIndex(vars, outBuf.meta.strides), laneVar, ranges);
  if (!storeTerms)
    return std::nullopt;
  // Loads moving with unit stride along the lane variable, with their alignment terms.
  std::vector<std::pair<const Expr *, std::vector<SymInt>>> candidates;
  int64_t widest = itemsize(outBuf.meta.dtype);
  for (const Expr *e : node.body->exprs()) {
    if (e->kind != ExprKind::Load)
      continue;
    if (std::optional<std::vector<SymInt>> t = alignmentTerms(e->index, laneVar, ranges)) {
      candidates.emplace_back(e, *t);
      widest = std::max(widest, itemsize(program.buffer(e->buffer).meta.dtype));
    }
  }
  int width = static_cast<int>(16 / widest);
  VectorChoice choice;
  choice.plan.width = width;
  choice.lane.var = laneVar;
  choice.lane.width = width;
  std::vector<SymInt> &divisible = choice.plan.divisible;
  if (!addTerms(divisible, {node.ranges[k - 1]}, width) || !addTerms(divisible, *storeTerms, width))
    return std::nullopt;
  choice.plan.aligned.push_back(out);
  for (const auto &[load, terms] : candidates) {
    std::vector<SymInt> trial = divisible;
    if (!addTerms(trial, terms, width))
      continue; // statically misaligned: loaded lane by lane
    divisible = std::move(trial);
    choice.lane.vectorLoads.insert(load);
    if (std::find(choice.plan.aligned.begin(), choice.plan.aligned.end(), load->buffer) ==
        choice.plan.aligned.end())
      choice.plan.aligned.push_back(load->buffer);
  }
  std::sort(choice.plan.aligned.begin(), choice.plan.aligned.end());
  return choice;
}

CudaKernel scalarKernel(const NodeContext &ctx) {
  const LoopNode &node = *ctx.node;
  CudaKernel k{ctx.baseName, KernelRole::Pointwise, {}, ""};
  Writer w;
  w.open(ctx.signature(k.name, NodeContext::Buffers::All, "", k.args));
  Names names = ctx.sizeNames();
  gridStride(w, indexExpr(product(node.ranges), names));
  std::vector<std::string> vars = rangeVars(node.ranges.size());
  decompose(w, "p", vars, node.ranges, names);
  for (const std::string &v : vars)
    names[v] = v;
  BodyWriter body(w, *ctx.program, *node.body);
  body.emitOuter({}, names);
  BufferId out = node.outputs[0];
  if (!ctx.locals.count(out))
    w.emit("{}[{}] = {};", bufferName(out), storeOffset(ctx, out, names),
           toMemory(body.result(), ctx.program->buffer(out).meta.dtype));
  w.close();
  w.close();
  k.code = w.take();
  return k;
}

CudaKernel vectorKernel(const NodeContext &ctx, const VectorChoice &choice) {
  const LoopNode &node = *ctx.node;
  int width = choice.plan.width;
  CudaKernel k{fmt::format("{}_v{}", ctx.baseName, width), KernelRole::PointwiseVector, {}, ""};
  Writer w;
  w.open(ctx.signature(k.name, NodeContext::Buffers::All, "", k.args));
  Names names = ctx.sizeNames();
  size_t n = node.ranges.size();
  // Iteration p covers W consecutive points of the innermost range, starting at a multiple of W.
  std::vector<SymInt> extents = node.ranges;
  extents[n - 1] = floorDiv(extents[n - 1], SymInt(width));
  gridStride(w, indexExpr(product(extents), names));
  std::vector<std::string> vars = rangeVars(n);
  std::vector<std::string> split(vars.begin(), vars.end() - 1);
  split.push_back("q");
  decompose(w, "p", split, extents, names);
  w.emit("const long long {} = q * {};", vars[n - 1], width);
  for (const std::string &v : vars)
    names[v] = v;
  BodyWriter body(w, *ctx.program, *node.body);
  body.emitOuter({choice.lane.var}, names, &choice.lane);
  BufferId out = node.outputs[0];
  DType outType = ctx.program->buffer(out).meta.dtype;
  w.emit("kiln::Vec<{}, {}> out;", memType(outType), width);
  w.line("#pragma unroll");
  w.open(fmt::format("for (int lane = 0; lane < {}; ++lane)", width));
  std::string laneIndex = choice.lane.var + "_lane";
  Names inner = names;
  inner[choice.lane.var] = laneIndex;
  body.emitInner(inner, &choice.lane,
                 fmt::format("const long long {} = {} + lane;", laneIndex, choice.lane.var));
  w.emit("out.v[lane] = {};", toMemory(body.result(), outType));
  w.close();
  w.emit("kiln::store_vec<{}>({} + {}, out);", width, bufferName(out),
         storeOffset(ctx, out, names));
  w.close();
  w.close();
  k.code = w.take();
  return k;
}

} // namespace

NodeKernels emitPointwise(const NodeContext &ctx, const CudaEmitOptions &options) {
  NodeKernels out;
  out.points = product(ctx.node->ranges);
  out.kernels.push_back(scalarKernel(ctx));
  if (options.vectorize && !ctx.locals.count(ctx.node->outputs[0]))
    if (std::optional<VectorChoice> choice = planVector(ctx)) {
      out.kernels.push_back(vectorKernel(ctx, *choice));
      out.vector = choice->plan;
    }
  return out;
}

} // namespace kiln::codegen::cuda::detail

// Pointwise kernels: a grid-stride loop over the node's points, and — when the output is
// contiguous along the innermost range variable — a twin that does W points per iteration with
// 128-bit loads and stores (see [Note: CUDA kernels] in emit.h).

#include "codegen/cuda/emit_impl.h"

#include "ir/loop/index.h"
#include "ir/loop/lanes.h"
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

/// Tiles are kTile x kTile points of the tile loop and the lane.
constexpr int kTile = 32;
/// The most shared memory the staged loads of one tiled kernel take.
constexpr int64_t kMaxTileBytes = 32 * 1024;

/// The loads a tile stages in shared memory: unit stride along the tile loop, another stride
/// along the lane (what the schedule tiled the node for).
std::vector<const Expr *> stagedLoads(const NodeContext &ctx, const std::string &laneVar) {
  std::vector<const Expr *> out;
  for (const Expr *e : ctx.node->body->exprs()) {
    if (e->kind != ExprKind::Load)
      continue;
    std::optional<SymInt> lane = laneCoefficient(e->index, laneVar);
    std::optional<SymInt> tile = laneCoefficient(e->index, ctx.tileVar);
    if (lane && tile && tile->constant() == 1 && lane->constant() != 0 && lane->constant() != 1)
      out.push_back(e);
  }
  return out;
}

CudaKernel tiledKernel(const NodeContext &ctx, const std::vector<const Expr *> &staged,
                       SymInt &tiles) {
  const LoopNode &node = *ctx.node;
  const LoopProgram &program = *ctx.program;
  size_t k = node.ranges.size();
  std::string tv = ctx.tileVar, lv = loopVarName(k - 1);
  CudaKernel kernel{ctx.baseName + "_tiled", KernelRole::PointwiseTiled, {}, ""};
  Writer w;
  w.open(ctx.signature(kernel.name, NodeContext::Buffers::All, "", kernel.args));
  Names names = ctx.sizeNames();
  for (size_t j = 0; j < staged.size(); ++j) // a column of padding: no bank conflicts
    w.emit("__shared__ {} tile{}[{}][{}];", memType(program.buffer(staged[j]->buffer).meta.dtype),
           j, kTile, kTile + 1);
  // Blocks walk (the other loops, tiles of the tile loop, tiles of the lane), row-major.
  std::vector<std::string> vars;
  std::vector<SymInt> extents;
  SymInt tileExtent = 1, laneExtent = node.ranges[k - 1];
  for (size_t d = 0; d + 1 < k; ++d) {
    if (loopVarName(d) == tv) {
      tileExtent = node.ranges[d];
      continue;
    }
    vars.push_back(loopVarName(d));
    extents.push_back(node.ranges[d]);
  }
  auto tilesOf = [](const SymInt &e) { return floorDiv(e + SymInt(kTile - 1), SymInt(kTile)); };
  vars.insert(vars.end(), {"tile_t", "tile_l"});
  extents.insert(extents.end(), {tilesOf(tileExtent), tilesOf(laneExtent)});
  tiles = product(extents);
  std::string inBounds = fmt::format("{} < {} && {} < {}", tv, indexExpr(tileExtent, names), lv,
                                     indexExpr(laneExtent, names));
  w.emit("const long long tiles = {};", indexExpr(tiles, names));
  w.emit("const int tx = threadIdx.x & 31, rows = blockDim.x >> 5;");
  w.open("for (long long b = blockIdx.x; b < tiles; b += gridDim.x)");
  decompose(w, "b", vars, extents, names);
  for (const std::string &v : vars)
    names[v] = v;
  names[tv] = tv;
  names[lv] = lv;
  // Neighbouring threads read neighbouring elements: along the tile loop.
  w.open(fmt::format("for (int j = threadIdx.x >> 5; j < {}; j += rows)", kTile));
  w.emit("const long long {} = tile_t * {} + tx;", tv, kTile);
  w.emit("const long long {} = tile_l * {} + j;", lv, kTile);
  w.open("if (" + inBounds + ")");
  for (size_t j = 0; j < staged.size(); ++j)
    w.emit("tile{}[j][tx] = {}[{}];", j, bufferName(staged[j]->buffer),
           indexExpr(staged[j]->index, names));
  w.close();
  w.close();
  w.line("__syncthreads();");
  // Neighbouring threads write neighbouring elements: along the lane.
  w.open(fmt::format("for (int j = threadIdx.x >> 5; j < {}; j += rows)", kTile));
  w.emit("const long long {} = tile_t * {} + j;", tv, kTile);
  w.emit("const long long {} = tile_l * {} + tx;", lv, kTile);
  w.open("if (" + inBounds + ")");
  std::map<const Expr *, std::string> fromTile;
  for (size_t j = 0; j < staged.size(); ++j)
    fromTile[staged[j]] =
        fromMemory(fmt::format("tile{}[tx][j]", j), program.buffer(staged[j]->buffer).meta.dtype);
  BodyWriter body(w, program, *node.body, nullptr, &fromTile);
  body.emitOuter({}, names);
  BufferId out = node.outputs[0];
  w.emit("{}[{}] = {};", bufferName(out), storeOffset(ctx, out, names),
         toMemory(body.result(), program.buffer(out).meta.dtype));
  w.close();
  w.close();
  w.line("__syncthreads(); // the next tile overwrites this one");
  w.close();
  w.close();
  kernel.code = w.take();
  return kernel;
}

} // namespace

NodeKernels emitPointwise(const NodeContext &ctx, const CudaEmitOptions &options) {
  NodeKernels out;
  out.points = product(ctx.node->ranges);
  out.kernels.push_back(scalarKernel(ctx));
  if (ctx.locals.count(ctx.node->outputs[0]))
    return out; // nobody reads it
  if (options.tile && !ctx.tileVar.empty() && ctx.node->ranges.size() >= 2) {
    std::vector<const Expr *> staged = stagedLoads(ctx, loopVarName(ctx.node->ranges.size() - 1));
    int64_t tileBytes = 0; // within a block's static shared memory (48 KB), with room to spare
    for (const Expr *e : staged)
      tileBytes += kTile * (kTile + 1) * itemsize(ctx.program->buffer(e->buffer).meta.dtype);
    if (!staged.empty() && tileBytes <= kMaxTileBytes) {
      out.kernels.push_back(tiledKernel(ctx, staged, out.tiles));
      return out;
    }
  }
  if (options.vectorize)
    if (std::optional<VectorChoice> choice = planVector(ctx)) {
      out.kernels.push_back(vectorKernel(ctx, *choice));
      out.vector = choice->plan;
    }
  return out;
}

} // namespace kiln::codegen::cuda::detail

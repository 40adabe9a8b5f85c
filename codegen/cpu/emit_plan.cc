// Which loop of a node is vectorized, and how wide (see [Note: emitted kernels] in emit.h).

#include "codegen/cpu/emit_impl.h"

#include "ir/loop/index.h"

#include <map>
#include <set>

namespace kiln::codegen::cpu {

using namespace ir::loop;

EmitOptions emitOptionsForFeatures(std::string_view features) {
  EmitOptions options;
  auto has = [&](std::string_view f) {
    for (size_t at = 0; at < features.size();) {
      size_t end = std::min(features.find(',', at), features.size());
      if (features.substr(at, end - at) == f)
        return true;
      at = end + 1;
    }
    return false;
  };
  options.vectorBits = has("+avx512f") ? 512 : has("+avx2") || has("+avx") ? 256 : 128;
  return options;
}

std::string_view laneModeName(LaneMode mode) {
  switch (mode) {
  case LaneMode::Scalar:
    return "scalar";
  case LaneMode::Range:
    return "range";
  case LaneMode::Reduce:
    return "reduce";
  }
  return "?";
}

namespace detail {
namespace {

/// How the accesses of a body behave along a candidate lane variable.
struct LaneAccesses {
  bool affine = true;      ///< every load offset and index value is affine in the variable
  bool contiguous = false; ///< some load has coefficient 1
  bool strided = false;    ///< some load has a coefficient other than 0 and 1 (a gather)
};

/// Whether the value of `e` changes along `var` (some index below it mentions var).
bool varies(const Expr *e, const std::string &var, std::map<const Expr *, bool> &memo) {
  if (auto it = memo.find(e); it != memo.end())
    return it->second;
  bool v = false;
  if (e->kind == ExprKind::Load || e->kind == ExprKind::Index ||
      e->kind == ExprKind::IndirectLoad) {
    std::set<std::string, std::less<>> symbols;
    e->index.collectSymbols(symbols);
    v = symbols.count(var) > 0;
  }
  for (const Expr *o : e->operands())
    v = v || varies(o, var, memo);
  return memo[e] = v;
}

LaneAccesses accessesAlong(const Body &body, const std::string &var) {
  LaneAccesses a;
  std::map<const Expr *, bool> memo;
  for (const Expr *e : body.exprs()) {
    if (!e->isLoad() && e->kind != ExprKind::Index)
      continue;
    std::optional<SymInt> c = laneCoefficient(e->index, var);
    if (!c && e->kind == ExprKind::Load && clampedAlong(e->index, var)) {
      a.contiguous = true; // contiguous inside the clamp range (BodyEmitter::emitClampedLoad)
    } else if (!c) {
      a.affine = false;
    } else if (e->kind == ExprKind::IndirectLoad && varies(e->operand(0), var, memo)) {
      a.strided = true; // one position per lane: a gather
    } else if (e->isLoad()) {
      std::optional<int64_t> k = c->constant();
      a.contiguous |= k == 1;
      a.strided |= k != 0 && k != 1;
    }
  }
  return a;
}

/// Whether an f64 prim becomes one libm call per element (MathToLibmCallsPass in lowering.cc):
/// such a kernel stays scalar, since unrolling vectors into calls only adds shuffles. Where
/// glibc's libmvec has the function, a vector is one call and the kernel vectorizes.
bool libmPerElement(ExprKind kind) {
  if (!vectorLibmFunction(kind).empty() && vectorLibmAvailable())
    return false; // one libmvec call per vector (emit_math64.cc)
  switch (kind) {
  case ExprKind::Exp:
  case ExprKind::Log:
  case ExprKind::Sqrt:
  case ExprKind::Rsqrt:
  case ExprKind::Sigmoid:
  case ExprKind::Pow:
    return false;
  default:
    return isTranscendental(kind);
  }
}

/// Bits of the widest value the kernel computes with; 0 when some op cannot be vectorized.
int widestBits(const LoopNode &node) {
  int bits = 8;
  for (const Expr *e : node.body->exprs()) {
    if (e->dtype == DType::Float64 && libmPerElement(e->kind))
      return 0;
    bits = std::max(bits, computeBits(e->dtype));
  }
  if (node.kind == LoopNodeKind::Reduction &&
      (node.reduction == ReductionKind::ArgMax || node.reduction == ReductionKind::ArgMin))
    bits = 64; // i64 positions
  // Welford's f64 statistics take two registers per value at f32 width: two independent
  // dependency chains (the mean's update is a subtract and an FMA deep).
  return bits;
}

bool storesUnitStride(const LoopProgram &program, const LoopNode &node) {
  size_t k = node.ranges.size();
  for (BufferId out : node.outputs) {
    std::optional<int64_t> s = program.buffer(out).meta.strides[k - 1].constant();
    if (s != 1)
      return false;
  }
  return true;
}

} // namespace

NodePlan planNode(const LoopProgram &program, const LoopNode &node, const EmitOptions &options) {
  NodePlan plan;
  if (node.kind == LoopNodeKind::Extern || options.vectorBits <= 0)
    return plan;
  int bits = widestBits(node);
  int width = bits ? options.vectorBits / bits : 0;
  if (width < 2)
    return plan;
  size_t k = node.ranges.size(), m = node.reductionRanges.size();
  bool isReduction = node.kind == LoopNodeKind::Reduction;
  ReductionKind kind = node.reduction;
  bool foldable = kind == ReductionKind::Sum || kind == ReductionKind::Prod ||
                  kind == ReductionKind::Max || kind == ReductionKind::Min ||
                  kind == ReductionKind::Welford;
  if (isReduction && foldable && m > 0) {
    std::string var = reductionVarName(m - 1);
    LaneAccesses a = accessesAlong(*node.body, var);
    if (a.affine && a.contiguous && !a.strided)
      return {LaneMode::Reduce, width, var};
  }
  if (k > 0 && storesUnitStride(program, node)) {
    std::string var = loopVarName(k - 1);
    LaneAccesses a = accessesAlong(*node.body, var);
    // Gathers pay off against the contiguous stores of a pointwise node; a reduction would
    // gather on every reduced point.
    if (a.affine && (!a.strided || !isReduction))
      return {LaneMode::Range, width, var};
  }
  return plan;
}

std::optional<size_t> tileVarOf(const LoopNode &node, const NodePlan &plan) {
  size_t k = node.ranges.size();
  if (node.kind != LoopNodeKind::Pointwise || plan.mode != LaneMode::Range || k < 2)
    return std::nullopt;
  // Votes per candidate variable: loads strided along the lane and contiguous along it.
  std::vector<int> votes(k - 1, 0);
  for (const Expr *e : node.body->exprs()) {
    if (e->kind != ExprKind::Load)
      continue;
    std::optional<SymInt> lane = laneCoefficient(e->index, plan.laneVar);
    if (!lane)
      continue;
    std::optional<int64_t> c = lane->constant();
    if (c == 0 || c == 1) // a symbolic stride counts as strided
      continue;
    for (size_t j = 0; j + 1 < k; ++j) {
      std::optional<SymInt> cj = laneCoefficient(e->index, loopVarName(j));
      if (cj && cj->constant() == 1 && !(node.ranges[j] == SymInt(1)))
        ++votes[j];
    }
  }
  std::optional<size_t> best;
  for (size_t j = 0; j + 1 < k; ++j) // ties go to the inner variable
    if (votes[j] > 0 && (!best || votes[j] >= votes[*best]))
      best = j;
  return best;
}

} // namespace detail
} // namespace kiln::codegen::cpu

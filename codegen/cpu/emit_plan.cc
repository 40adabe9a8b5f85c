// How wide a node's lane (chosen by the schedule) is vectorized on this target (see
// [Note: emitted kernels] in emit.h).

#include "codegen/cpu/emit_impl.h"

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
    // erfc has no MLIR op: f32 too is libmvec's per vector, or libm's per element
    if ((e->dtype == DType::Float64 || e->kind == ExprKind::Erfc) && libmPerElement(e->kind))
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

} // namespace

NodePlan planNode(const LoopNode &node, const passes::schedule::LoopOrder &order,
                  const EmitOptions &options) {
  using passes::schedule::LaneKind;
  NodePlan plan;
  if (node.kind == LoopNodeKind::Extern || options.vectorBits <= 0 || order.lane == LaneKind::None)
    return plan;
  int bits = widestBits(node);
  int width = bits ? options.vectorBits / bits : 0;
  if (width < 2)
    return plan;
  return {order.lane == LaneKind::Reduce ? LaneMode::Reduce : LaneMode::Range, width,
          order.laneVar};
}

} // namespace detail
} // namespace kiln::codegen::cpu

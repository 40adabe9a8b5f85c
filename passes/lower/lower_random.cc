// The random ops: philox_state as an extern node (it reserves the generator's counters when the
// program runs), dropout and rand as pointwise bodies that compute eager's draws with the
// `philox` prim from (seed, offset + element index), so they fuse with what surrounds them.

#include "passes/lower/lower_context.h"

#include <cmath>

namespace kiln::passes::lower {

namespace {

using ir::OpKind;

void lowerPhiloxState(LowerContext &ctx, const ir::Node &n) {
  LoopProgram &p = ctx.program();
  ctx.define(n.result(0),
             TensorRef::of(p, p.external("philox_state", {}, {n.result(0)->meta()}, n.attrs())[0]));
}

/// The row-major position of element `i` of a tensor of `sizes`: eager numbers a sample's
/// elements this way, whatever the layout it is stored in.
IndexExpr elementIndex(Idx i, const std::vector<SymInt> &sizes) {
  return ir::loop::flatIndex(i, ir::TensorMeta::contiguous(DType::Float32, sizes).strides);
}

/// Words `first` and `first + 1` of element `i`'s Philox block under the state
/// (seed, offset) of buffer `state`.
std::pair<Val, Val> philoxPair(Ops &ops, BufferId state, const IndexExpr &element, int first) {
  Val seed = ops.load(state, {IndexExpr(0)}), offset = ops.load(state, {IndexExpr(1)});
  Val counter = offset + ops.indexValue(element);
  return {ops.philox(seed, counter, ops.constant(first, DType::Int64)),
          ops.philox(seed, counter, ops.constant(first + 1, DType::Int64))};
}

/// 53 random bits (r0 << 32 | r1) >> 11 as an i64: uniformDouble's numerator.
Val bits53(Ops &ops, std::pair<Val, Val> words) {
  return words.first * ops.constant(int64_t{1} << 21, DType::Int64) +
         ops.floorDiv(words.second, ops.constant(int64_t{1} << 11, DType::Int64));
}

/// dropout: input * (kept ? 1 / (1 - p) : 0). Element i is kept when its 53-bit uniform u
/// satisfies u * 2^-53 < 1 - p, that is u < ceil((1 - p) * 2^53) (the product is exact).
void lowerDropout(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  double p = n.attr("p")->toDouble(), keep = 1.0 - p;
  auto threshold = static_cast<int64_t>(std::ceil(std::ldexp(keep, 53)));
  double scale = p < 1.0 ? 1.0 / keep : 0.0;
  if (out.dtype != DType::Float64) // eager rounds the scale to float, then to the dtype
    scale = static_cast<float>(scale);
  BufferId state = ctx.realize(ctx.tensor(n.operand(1)));
  std::vector<SymInt> sizes = out.sizes;
  DType dtype = out.dtype;
  const ir::Value *input = n.operand(0);
  ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
    Val u = bits53(ops, philoxPair(ops, state, elementIndex(i, sizes), 0));
    Val mask = ops.where(ops.lt(u, ops.constant(threshold, DType::Int64)),
                         ops.constant(scale, dtype), ops.constant(0.0, dtype));
    return ctx.read(ops, input, i, sizes, dtype) * mask;
  }));
}

/// rand: uniformSample's value: 53 bits for float64, the top 24 / 11 / 8 bits of word 0 for
/// float32 / float16 / bfloat16 (exact in the dtype, never 1).
void lowerRand(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  BufferId state = ctx.realize(ctx.tensor(n.operand(0)));
  std::vector<SymInt> sizes = out.sizes;
  DType dtype = out.dtype;
  int bits = dtype == DType::Float64   ? 53
             : dtype == DType::Float32 ? 24
             : dtype == DType::Float16 ? 11
                                       : 8;
  ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
    std::pair<Val, Val> words = philoxPair(ops, state, elementIndex(i, sizes), 0);
    if (dtype == DType::Float64)
      return ops.cast(bits53(ops, words), DType::Float64) *
             ops.constant(std::ldexp(1.0, -53), DType::Float64);
    Val top = ops.floorDiv(words.first, ops.constant(int64_t{1} << (32 - bits), DType::Int64));
    Val u = ops.cast(top, DType::Float32) * ops.constant(std::ldexp(1.0, -bits), DType::Float32);
    return ops.cast(u, dtype);
  }));
}

} // namespace

void registerRandom(Registry &r) {
  r.add(OpKind::PhiloxState, lowerPhiloxState);
  r.add(OpKind::Dropout, lowerDropout);
  r.add(OpKind::Rand, lowerRand);
}

} // namespace kiln::passes::lower

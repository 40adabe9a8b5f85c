// The random ops: philox_state as an extern node (it reserves the generator's counters when the
// program runs), randperm as an extern over them (Fisher-Yates is sequential), dropout, rand, randn
// and bernoulli as pointwise bodies that compute eager's draws with the `philox` prim from (seed,
// offset + element index), so they fuse with what surrounds them.

#include "passes/lower/lower_context.h"

#include <cmath>
#include <numbers>

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

/// The (seed, offset) a philox_state buffer holds, as values of a body.
struct PhiloxKey {
  Val seed, offset;
};

PhiloxKey loadKey(Ops &ops, BufferId state) {
  return {ops.load(state, {IndexExpr(0)}), ops.load(state, {IndexExpr(1)})};
}

/// Word `select` of the Philox block at counter offset + `block` under `key`.
Val philoxWord(Ops &ops, const PhiloxKey &key, const IndexExpr &block, Val select) {
  return ops.philox(key.seed, key.offset + ops.indexValue(block), select);
}

/// 53 random bits (w[first] << 32 | w[first + 1]) >> 11 of block `block` as an i64:
/// uniformDouble's numerator.
Val bits53(Ops &ops, const PhiloxKey &key, const IndexExpr &block, int first) {
  Val hi = philoxWord(ops, key, block, ops.constant(first, DType::Int64));
  Val lo = philoxWord(ops, key, block, ops.constant(first + 1, DType::Int64));
  return hi * ops.constant(int64_t{1} << 21, DType::Int64) +
         ops.floorDiv(lo, ops.constant(int64_t{1} << 11, DType::Int64));
}

/// uniformDouble: the 53 bits of words first, first + 1 as a uniform in [0, 1) of `acc`.
Val uniform53(Ops &ops, const PhiloxKey &key, const IndexExpr &block, int first, DType acc) {
  return ops.cast(bits53(ops, key, block, first), acc) * ops.constant(std::ldexp(1.0, -53), acc);
}

/// uniformFloat: the top `bits` of a word as a float32 uniform in [0, 1).
Val uniformFromWord(Ops &ops, Val word, int bits) {
  Val top = ops.floorDiv(word, ops.constant(int64_t{1} << (32 - bits), DType::Int64));
  return ops.cast(top, DType::Float32) * ops.constant(std::ldexp(1.0, -bits), DType::Float32);
}

/// Whether element `i`'s 53-bit uniform u is below `p`: u * 2^-53 < p, that is
/// u < ceil(p * 2^53) (the product is exact).
Val drawsBelow(Ops &ops, BufferId state, const IndexExpr &element, double p) {
  auto threshold = static_cast<int64_t>(std::ceil(std::ldexp(p, 53)));
  return ops.lt(bits53(ops, loadKey(ops, state), element, 0),
                ops.constant(threshold, DType::Int64));
}

/// dropout: input * (kept ? 1 / (1 - p) : 0). Element i is kept when its 53-bit uniform u
/// satisfies u * 2^-53 < 1 - p, that is u < ceil((1 - p) * 2^53) (the product is exact).
void lowerDropout(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  double p = n.attr("p")->toDouble(), keep = 1.0 - p;
  double scale = p < 1.0 ? 1.0 / keep : 0.0;
  if (out.dtype != DType::Float64) // eager rounds the scale to float, then to the dtype
    scale = static_cast<float>(scale);
  BufferId state = ctx.realize(ctx.tensor(n.operand(1)));
  std::vector<SymInt> sizes = out.sizes;
  DType dtype = out.dtype;
  const ir::Value *input = n.operand(0);
  ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
    Val mask = ops.where(drawsBelow(ops, state, elementIndex(i, sizes), keep),
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
    IndexExpr e = elementIndex(i, sizes);
    if (dtype == DType::Float64)
      return uniform53(ops, loadKey(ops, state), e, 0, DType::Float64);
    Val word = philoxWord(ops, loadKey(ops, state), e, ops.constant(0, DType::Int64));
    return ops.cast(uniformFromWord(ops, word, bits), dtype);
  }));
}

/// Whether element `i`'s 53-bit uniform is below the float64 probability `prob`, as eager's
/// bernoulli_(p tensor) compares them. Eager refuses a probability outside [0, 1] (NaN too): the
/// seed is then read through an out-of-range gather, which fails the run with an IndexError, and
/// the caller reruns the part eagerly for eager's own error.
Val drawsBelow(Ops &ops, BufferId state, const IndexExpr &element, Val prob) {
  Val valid = ops.bitwiseAnd(ops.ge(prob, ops.constant(0.0, DType::Float64)),
                             ops.le(prob, ops.constant(1.0, DType::Float64)));
  Val position = ops.where(valid, ops.constant(0, DType::Int64), ops.constant(2, DType::Int64));
  PhiloxKey key{ops.loadIndirect(state, {IndexExpr(0)}, 0, position),
                ops.load(state, {IndexExpr(1)})};
  return ops.lt(uniform53(ops, key, element, 0, DType::Float64), prob);
}

/// bernoulli: 1 where the element's uniform is below p (or its probability), else 0, in the
/// node's dtype.
void lowerBernoulli(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  BufferId state = ctx.realize(ctx.tensor(n.operand(0)));
  std::vector<SymInt> sizes = out.sizes;
  DType dtype = out.dtype;
  if (n.numOperands() == 2) {
    const ir::Value *probs = n.operand(1);
    ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
      Val prob = ctx.read(ops, probs, i, sizes, DType::Float64);
      return ops.cast(drawsBelow(ops, state, elementIndex(i, sizes), prob), dtype);
    }));
    return;
  }
  double p = n.attr("p")->toDouble();
  ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
    return ops.cast(drawsBelow(ops, state, elementIndex(i, sizes), p), dtype);
  }));
}

/// randn: eager's Box-Muller (runtime/ops/random_impl.h). A block gives 4 float32 normals (two
/// pairs of words: u1 = 1 - uniform, u2 = uniform; then the cos and sin branches) or 2 float64
/// ones (u1 from words 0-1, u2 from words 2-3), so element e reads block e / 4 (or e / 2).
void lowerRandn(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  BufferId state = ctx.realize(ctx.tensor(n.operand(0)));
  std::vector<SymInt> sizes = out.sizes;
  DType dtype = out.dtype;
  bool f64 = dtype == DType::Float64;
  DType acc = f64 ? DType::Float64 : DType::Float32;
  const int64_t perBlock = f64 ? 2 : 4;
  ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
    IndexExpr e = elementIndex(i, sizes);
    PhiloxKey key = loadKey(ops, state);
    IndexExpr block = ops.indexFloorDiv(e, perBlock), k = ops.indexMod(e, perBlock);
    // float32: a pair of words per two normals, the pair's first word gives u1.
    auto uniform24 = [&](const IndexExpr &select) {
      return uniformFromWord(ops, philoxWord(ops, key, block, ops.indexValue(select)), 24);
    };
    IndexExpr pair = f64 ? IndexExpr(0) : ops.indexFloorDiv(k, 2) * 2;
    Val u1 = ops.constant(1.0, acc) - (f64 ? uniform53(ops, key, block, 0, acc) : uniform24(pair));
    Val u2 = f64 ? uniform53(ops, key, block, 2, acc) : uniform24(pair + 1);
    Val radius = ops.sqrt(ops.constant(-2.0, acc) * ops.log(u1));
    Val twoPi = ops.constant(f64 ? 2 * std::numbers::pi : 2.0 * std::numbers::pi_v<float>, acc);
    Val angle = twoPi * u2;
    Val cosine = ops.eq(ops.indexValue(ops.indexMod(k, 2)), ops.constant(0, DType::Int64));
    Val z = radius * ops.where(cosine, ops.cos(angle), ops.sin(angle));
    return ops.cast(z, dtype);
  }));
}

/// randint: low + (word 0 of element i's block mod (high - low)), as eager's random_ draws a
/// range of at most 2^32, then converted to the dtype.
void lowerRandint(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  BufferId state = ctx.realize(ctx.tensor(n.operand(0)));
  std::vector<SymInt> sizes = out.sizes;
  DType dtype = out.dtype;
  const int64_t low = n.attr("low")->toInt(), high = n.attr("high")->toInt();
  ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
    Val word =
        philoxWord(ops, loadKey(ops, state), elementIndex(i, sizes), ops.constant(0, DType::Int64));
    Val drawn =
        ops.constant(low, DType::Int64) + ops.mod(word, ops.constant(high - low, DType::Int64));
    return ops.cast(drawn, dtype);
  }));
}

/// randperm: Fisher-Yates is sequential, so an extern runs eager's from the reserved counters.
void lowerRandperm(LowerContext &ctx, const ir::Node &n) {
  LoopProgram &p = ctx.program();
  BufferId state = ctx.realize(ctx.tensor(n.operand(0)));
  ctx.define(n.result(0), TensorRef::of(p, p.external("randperm", {state}, {n.result(0)->meta()},
                                                      n.attrs())[0]));
}

} // namespace

void registerRandom(Registry &r) {
  r.add(OpKind::PhiloxState, lowerPhiloxState);
  r.add(OpKind::Dropout, lowerDropout);
  r.add(OpKind::Rand, lowerRand);
  r.add(OpKind::Randn, lowerRandn);
  r.add(OpKind::Randint, lowerRandint);
  r.add(OpKind::Randperm, lowerRandperm);
  r.add(OpKind::Bernoulli, lowerBernoulli);
}

} // namespace kiln::passes::lower

// Lowerings of the 2-d pools. max_pool2d and avg_pool2d are loop code: a max or sum reduction over
// the window dims read through `out * stride + r * dilation - padding`, which fusion merges with
// its producer (a batch_norm + relu before a max_pool2d become one kernel). A window point in
// the padding (or past the edge, for a ceil_mode window) is read at a clamped index, so the load
// stays in bounds, and a `where` replaces it by what adds nothing (-inf, or 0). A global average
// (adaptive_avg_pool2d to 1 x 1) is a sum over the last two dims and a division.
//
// Averages that divide by the count of points inside the input (count_include_pad=False with
// padding, or a ceil_mode window past the padded edge) and adaptive pools to other sizes stay
// Extern nodes on the eager kernels.

#include "passes/lower/lower_context.h"

#include <array>
#include <limits>
#include <optional>

namespace kiln::passes::lower {

namespace {

using ir::OpKind;
using ir::loop::ReductionKind;

/// One extern node over the realized operand 0 writing the node's (contiguous) result, with the
/// node's attributes.
TensorRef poolExtern(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &m = n.result(0)->meta();
  ir::TensorMeta out = ir::TensorMeta::contiguous(m.dtype, m.sizes, m.device);
  LoopProgram &p = ctx.program();
  BufferId x = ctx.realize(ctx.tensor(n.operand(0)));
  return TensorRef::of(p, p.external(std::string(n.keyword()), {x}, {out}, n.attrs())[0]);
}

/// A size list attribute of a pool as two values (one value serves both dims).
std::array<int64_t, 2> pair(const ir::Node &n, const char *name, std::array<int64_t, 2> fallback) {
  const ir::Attribute *a = n.attr(name);
  if (!a || a->toInts().empty())
    return fallback;
  std::vector<int64_t> v = a->toInts();
  return v.size() == 1 ? std::array<int64_t, 2>{v[0], v[0]} : std::array<int64_t, 2>{v[0], v[1]};
}

struct Window {
  std::array<int64_t, 2> kernel, stride, dilation, padding;
  /// Some window point lies outside the input (padding, or a ceil_mode window over the edge):
  /// each point is read at a clamped index and counts only where it is inside.
  bool guarded = false;
  /// Some window point lies outside the padded input too (a ceil_mode window over its edge).
  bool pastPadding = false;
};

/// The window of a max_pool2d / avg_pool2d node over an input of spatial sizes `in` and output
/// sizes `out`. Without ceil_mode torch's floor formula keeps every window inside the padded
/// input; with it the last window may hang over the edge, which only constant sizes can rule out
/// (a symbolic one counts as over it).
Window windowOf(const ir::Node &n, std::span<const SymInt> in, std::span<const SymInt> out) {
  Window w;
  w.kernel = pair(n, "kernel_size", {1, 1});
  w.stride = pair(n, "stride", w.kernel);
  w.dilation = pair(n, "dilation", {1, 1});
  w.padding = pair(n, "padding", {0, 0});
  w.guarded = w.padding != std::array<int64_t, 2>{0, 0};
  const ir::Attribute *ceil = n.attr("ceil_mode");
  if (!ceil || !ceil->toBool())
    return w;
  for (int k = 0; k < 2; ++k) {
    SymInt last = (out[k] - SymInt(1)) * SymInt(w.stride[k]) +
                  SymInt(w.dilation[k] * (w.kernel[k] - 1) - w.padding[k]); // the last read
    std::optional<int64_t> slack = (in[k] - SymInt(1) - last).constant();
    w.guarded = w.guarded || !slack || *slack < 0;
    w.pastPadding = w.pastPadding || !slack || *slack + w.padding[k] < 0;
  }
  return w;
}

/// What a window point outside the input contributes: nothing to a max (its lowest value) or
/// to a sum (0).
Val outsideValue(Ops &ops, bool maxPool, DType dtype) {
  if (!maxPool)
    return ops.constant(0.0, dtype);
  if (isFloating(dtype))
    return ops.constant(-std::numeric_limits<double>::infinity(), dtype);
  switch (dtype) {
  case DType::UInt8:
    return ops.constant(int64_t{0}, dtype);
  case DType::Int8:
    return ops.constant(int64_t{std::numeric_limits<int8_t>::min()}, dtype);
  case DType::Int16:
    return ops.constant(int64_t{std::numeric_limits<int16_t>::min()}, dtype);
  case DType::Int32:
    return ops.constant(int64_t{std::numeric_limits<int32_t>::min()}, dtype);
  default:
    return ops.constant(std::numeric_limits<int64_t>::min(), dtype);
  }
}

/// max_pool2d / avg_pool2d as loop code: a max (or a sum, then a division by the window size or
/// divisor_override) over the window dims read through `out * stride + r * dilation - padding`.
/// A point outside the input is read at a clamped index (the load stays in bounds) and replaced
/// by what adds nothing. An average that counts only the points inside the input
/// (count_include_pad=False), or whose ceil_mode window passes the padded edge (torch divides by
/// the part inside it), stays an extern on the eager kernel.
void lowerPool(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  size_t lead = out.sizes.size() - 2;
  std::span<const SymInt> in = std::span(x.sizes).subspan(lead);
  Window w = windowOf(n, in, std::span(out.sizes).subspan(lead));
  bool maxPool = n.op() == OpKind::MaxPool2d;
  const ir::Attribute *includePad = n.attr("count_include_pad");
  const ir::Attribute *divisor = n.attr("divisor_override");
  if (!maxPool && (w.pastPadding || (includePad && !includePad->toBool() &&
                                     w.padding != std::array<int64_t, 2>{0, 0} && !divisor)))
    return ctx.define(n.result(0), poolExtern(ctx, n));
  DType result = out.dtype, compute = maxPool ? result : computeDType(result);
  std::vector<SymInt> window{w.kernel[0], w.kernel[1]};
  LoopProgram &p = ctx.program();
  size_t rank = out.sizes.size();
  ReductionKind kind = maxPool ? ReductionKind::Max : ReductionKind::Sum;
  BufferId acc = p.reduction(kind, out.sizes, window, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> point(i.begin(), i.begin() + lead);
    std::optional<Val> inside;
    for (size_t k = 0; k < 2; ++k) {
      IndexExpr at = i[lead + k] * w.stride[k] + i[rank + k] * w.dilation[k] - w.padding[k];
      if (!w.guarded) {
        point.push_back(at);
        continue;
      }
      point.push_back(max(min(at, in[k] - 1), SymInt(0)));
      Val v = ops.indexValue(at);
      Val ok = ops.bitwiseAnd(ops.ge(v, ops.constant(int64_t{0}, DType::Int64)),
                              ops.lt(v, ops.indexValue(in[k])));
      inside = inside ? ops.bitwiseAnd(*inside, ok) : ok;
    }
    Val value = ops.cast(LowerContext::load(ops, x, point), compute);
    return inside ? ops.where(*inside, value, outsideValue(ops, maxPool, compute)) : value;
  });
  if (maxPool)
    return ctx.define(n.result(0), TensorRef::of(p, acc));
  int64_t count = divisor ? divisor->toInt() : w.kernel[0] * w.kernel[1];
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    return ops.cast(ops.load(acc, i) / ops.constant(static_cast<double>(count), compute), result);
  }));
}

/// adaptive_avg_pool2d: the mean of each plane when the output is 1 x 1, else an extern.
void lowerAdaptiveAvgPool(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  size_t lead = out.sizes.size() - 2;
  if (out.sizes[lead] != SymInt(1) || out.sizes[lead + 1] != SymInt(1))
    return ctx.define(n.result(0), poolExtern(ctx, n));
  const TensorRef &x = ctx.tensor(n.operand(0));
  DType result = out.dtype, compute = computeDType(result);
  std::vector<SymInt> inner(x.sizes.begin() + lead, x.sizes.end());
  LoopProgram &p = ctx.program();
  BufferId sum = p.reduction(ReductionKind::Sum, out.sizes, inner, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> point(i.begin(), i.begin() + lead);
    point.push_back(i[lead + 2]);
    point.push_back(i[lead + 3]);
    return ops.cast(LowerContext::load(ops, x, point), compute);
  });
  SymInt count = numel(inner);
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    return ops.cast(ops.load(sum, i) / sizeAs(ops, count, compute), result);
  }));
}

/// The input gradient of a max pool whose windows tile the input (stride = kernel, no padding or
/// dilation, sizes that are multiples of the kernel: CNNs' 2 x 2 downsampling) as loop code:
/// each element gets its window's output gradient when it is the element eager's pool picks,
/// the first maximum in row-major order or, when the window holds a NaN, the last NaN. The
/// node runs over [..., OH, kh, kw, OW] in the input's memory, so every access is affine and the
/// lane (the output columns) loads contiguously and stores kw apart (a vector store for kw up
/// to kMaxShuffledStride, scalar stores beyond; eager's kernel recomputes the pool with indices,
/// then scatters: 1.9 ms for 16x32x32x32).
/// False: not this case.
bool tiledMaxPoolBackward(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0)), &g = ctx.tensor(n.operand(1));
  const ir::TensorMeta &m = n.result(0)->meta();
  const size_t lead = m.sizes.size() - 2;
  std::span<const SymInt> in = std::span(m.sizes).subspan(lead),
                          out = std::span(g.sizes).subspan(lead);
  Window w = windowOf(n, in, out);
  const int64_t kh = w.kernel[0], kw = w.kernel[1], window = kh * kw;
  if (w.guarded || w.stride != w.kernel || w.dilation != std::array<int64_t, 2>{1, 1} ||
      window > 9 || window < 2 || !isFloating(m.dtype) || in[0] != out[0] * SymInt(kh) ||
      in[1] != out[1] * SymInt(kw))
    return false;
  // Per window: the position eager's pool picks (0 .. kh*kw - 1).
  std::vector<SymInt> windows(m.sizes.begin(), m.sizes.begin() + lead);
  windows.insert(windows.end(), out.begin(), out.end());
  TensorRef pick = ctx.pointwise(windows, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> at(i.begin(), i.begin() + lead);
    std::vector<Val> v, nan;
    for (int64_t a = 0; a < kh; ++a)
      for (int64_t b = 0; b < kw; ++b) {
        std::vector<IndexExpr> point = at;
        point.push_back(i[lead] * kh + a);
        point.push_back(i[lead + 1] * kw + b);
        v.push_back(LowerContext::load(ops, x, point));
        nan.push_back(ops.ne(v.back(), v.back()));
      }
    Val best = v[0], anyNan = nan[0];
    for (int64_t j = 1; j < window; ++j) {
      best = ops.where(ops.gt(v[j], best), v[j], best); // a NaN never wins a `>`
      anyNan = ops.bitwiseOr(anyNan, nan[j]);
    }
    Val firstMax = ops.constant(int64_t{0}, DType::Int64), lastNan = firstMax;
    for (int64_t j = window; j-- > 0;)
      firstMax = ops.where(ops.eq(v[j], best), ops.constant(j, DType::Int64), firstMax);
    for (int64_t j = 0; j < window; ++j)
      lastNan = ops.where(nan[j], ops.constant(j, DType::Int64), lastNan);
    return ops.where(anyNan, lastNan, firstMax);
  });
  // Over [..., OH, kh, kw, OW] laid out as the input ([..., OH * kh, OW * kw]): the window's
  // column offset outside the output column, so the lane walks the output columns, whose pick
  // and gradient are contiguous (a 2x2 pool's gradient: 1.07 -> 0.21 ms for 16x32x32x32 against
  // a lane over the window's row of 2).
  std::vector<SymInt> tiled(m.sizes.begin(), m.sizes.begin() + lead);
  tiled.insert(tiled.end(), {out[0], SymInt(kh), SymInt(kw), out[1]});
  std::vector<SymInt> strides = ir::contiguousStrides(m.sizes);
  const SymInt row = strides[lead], column = strides[lead + 1];
  strides.resize(lead);
  strides.insert(strides.end(), {row * SymInt(kh), row, column, column * SymInt(kw)});
  LoopProgram &p = ctx.program();
  BufferId grads = p.pointwise(
      tiled,
      [&](Ops &ops, Idx i) {
        std::vector<IndexExpr> cell(i.begin(), i.begin() + lead);
        cell.push_back(i[lead]);
        cell.push_back(i[lead + 3]);
        Val self = ops.indexValue(i[lead + 1] * kw + i[lead + 2]);
        Val grad = ops.cast(LowerContext::load(ops, g, cell), m.dtype);
        return ops.where(ops.eq(LowerContext::load(ops, pick, cell), self), grad,
                         ops.constant(0.0, m.dtype));
      },
      strides);
  std::vector<IndexExpr> vars = loopVars(m.sizes.size()), map(vars.begin(), vars.begin() + lead);
  map.insert(map.end(), {floorDiv(vars[lead], SymInt(kh)), mod(vars[lead], SymInt(kh)),
                         mod(vars[lead + 1], SymInt(kw)), floorDiv(vars[lead + 1], SymInt(kw))});
  ctx.define(n.result(0), TensorRef::of(p, grads).view(m.sizes, map));
  return true;
}

/// max_pool2d_backward: loop code when the windows tile the input, else an extern on eager's
/// indexed kernel (the indices recomputed from x).
void lowerMaxPoolBackward(LowerContext &ctx, const ir::Node &n) {
  if (tiledMaxPoolBackward(ctx, n))
    return;
  const ir::TensorMeta &m = n.result(0)->meta();
  ir::TensorMeta out = ir::TensorMeta::contiguous(m.dtype, m.sizes, m.device);
  LoopProgram &p = ctx.program();
  BufferId x = ctx.realize(ctx.tensor(n.operand(0)));
  BufferId g = ctx.realize(ctx.tensor(n.operand(1)));
  ctx.define(n.result(0),
             TensorRef::of(p, p.external("max_pool2d_backward", {x, g}, {out}, n.attrs())[0]));
}

} // namespace

void registerPools(Registry &r) {
  r.add(OpKind::MaxPool2dBackward, lowerMaxPoolBackward);
  r.add(OpKind::MaxPool2d, lowerPool);
  r.add(OpKind::AvgPool2d, lowerPool);
  r.add(OpKind::AdaptiveAvgPool2d, lowerAdaptiveAvgPool);
}

} // namespace kiln::passes::lower

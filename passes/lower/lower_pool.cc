// Lowerings of the 2-d pools. A pool whose windows all lie inside its input (no padding, and no
// ceil_mode window hanging over the edge) is loop code: a max or sum reduction over the window
// dims read through `out * stride + r * dilation`, which fusion merges with its producer (a
// batch_norm + relu before a max_pool2d become one kernel). A global average
// (adaptive_avg_pool2d to 1 x 1) is a sum over the last two dims and a division.
//
// Padded pools, and adaptive pools to other sizes, stay Extern nodes on the eager kernels: a
// padded window reads outside its input, and the loop IR's loads are affine and unguarded (a
// masked load would need a clamped index or a guarded load), so loop code would read out of
// bounds before a `where` could discard the value.

#include "passes/lower/lower_context.h"

#include <array>
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
  std::array<int64_t, 2> kernel, stride, dilation;
};

/// The window of a max_pool2d / avg_pool2d node when every window lies inside the input, else
/// nullopt. Without ceil_mode torch's floor formula keeps the last window inside; with it the
/// last window may hang over the edge, which only constant sizes can rule out.
std::optional<Window> insideWindow(const ir::Node &n, std::span<const SymInt> in,
                                   std::span<const SymInt> out) {
  Window w;
  w.kernel = pair(n, "kernel_size", {1, 1});
  w.stride = pair(n, "stride", w.kernel);
  w.dilation = pair(n, "dilation", {1, 1});
  if (pair(n, "padding", {0, 0}) != std::array<int64_t, 2>{0, 0})
    return std::nullopt;
  const ir::Attribute *ceil = n.attr("ceil_mode");
  if (!ceil || !ceil->toBool())
    return w;
  for (int k = 0; k < 2; ++k) {
    SymInt last = (out[k] - SymInt(1)) * SymInt(w.stride[k]) +
                  SymInt(w.dilation[k] * (w.kernel[k] - 1)); // the last element read
    std::optional<int64_t> slack = (in[k] - SymInt(1) - last).constant();
    if (!slack || *slack < 0)
      return std::nullopt;
  }
  return w;
}

/// max_pool2d / avg_pool2d with every window inside the input: a max (or a sum, then a division
/// by the window size or divisor_override) over the window dims; else an extern.
void lowerPool(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  size_t lead = out.sizes.size() - 2;
  std::optional<Window> w =
      insideWindow(n, std::span(x.sizes).subspan(lead), std::span(out.sizes).subspan(lead));
  if (!w)
    return ctx.define(n.result(0), poolExtern(ctx, n));
  bool maxPool = n.op() == OpKind::MaxPool2d;
  DType result = out.dtype, compute = maxPool ? result : computeDType(result);
  std::vector<SymInt> window{w->kernel[0], w->kernel[1]};
  LoopProgram &p = ctx.program();
  size_t rank = out.sizes.size();
  ReductionKind kind = maxPool ? ReductionKind::Max : ReductionKind::Sum;
  BufferId acc = p.reduction(kind, out.sizes, window, [&](Ops &ops, Idx i) {
    std::vector<IndexExpr> point(i.begin(), i.begin() + lead);
    for (size_t k = 0; k < 2; ++k)
      point.push_back(i[lead + k] * w->stride[k] + i[rank + k] * w->dilation[k]);
    return ops.cast(LowerContext::load(ops, x, point), compute);
  });
  if (maxPool)
    return ctx.define(n.result(0), TensorRef::of(p, acc));
  const ir::Attribute *divisor = n.attr("divisor_override");
  int64_t count = divisor ? divisor->toInt() : w->kernel[0] * w->kernel[1];
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

/// max_pool2d_backward: an extern on eager's indexed kernel (the indices recomputed from x).
void lowerMaxPoolBackward(LowerContext &ctx, const ir::Node &n) {
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

// Lowerings of the library calls (matmul, linear, conv2d, scaled_dot_product_attention) as
// Extern nodes, of layer_norm as a Welford reduction and two pointwise nodes, and
// of batch_norm (inference) as a per-channel scale and one pointwise node.
//
// An extern takes whole buffers, so an operand that is a view is realized first (a copy node that
// fusion folds its producer into), except a matmul operand that is exactly a transpose of its
// last two dims, a reshape of a contiguous buffer, or a transpose of such a reshape: that one is
// passed as the buffer with `transpose_a`/`transpose_b = true` and `a_view`/`b_view` (the sizes
// the buffer is read as; BLAS reads these layouts for free); so is any view whose offsets are
// affine with constant non-negative strides (a slice, a row or column), with `a_strided`/
// `b_strided` = [sizes..., strides..., offset]. A bias is not given to the library: it
// is a pointwise epilogue, which fusion merges with whatever follows (linear -> gelu becomes one
// epilogue of the GEMM).

#include "passes/lower/lower_context.h"

#include "ir/shape_rules.h"

#include <limits>

namespace kiln::passes::lower {

namespace {

using ir::OpKind;
using ir::loop::ReductionKind;

/// Whether `t` is the whole of its buffer with the last two dims swapped.
bool isLastTwoTransposed(const TensorRef &t, const LoopProgram &p) {
  if (t.isFill() || t.rank() < 2)
    return false;
  const ir::TensorMeta &m = p.buffer(t.buffer).meta;
  std::vector<IndexExpr> want = loopVars(t.sizes.size());
  std::vector<SymInt> sizes = t.sizes;
  size_t r = sizes.size();
  std::swap(want[r - 1], want[r - 2]);
  std::swap(sizes[r - 1], sizes[r - 2]);
  return m.sizes == sizes && t.index == want;
}

ir::Attributes copyAttrs(const ir::Node &n, std::initializer_list<const char *> names) {
  ir::Attributes out;
  for (const char *name : names)
    if (const ir::Attribute *a = n.attr(name))
      out.emplace(name, *a);
  return out;
}

/// One extern node writing the node's result (contiguous).
TensorRef external(LowerContext &ctx, const ir::Node &n, std::string op,
                   std::vector<BufferId> inputs, ir::Attributes attrs = {}) {
  const ir::TensorMeta &m = n.result(0)->meta();
  ir::TensorMeta out = ir::TensorMeta::contiguous(m.dtype, m.sizes, m.device);
  LoopProgram &p = ctx.program();
  return TensorRef::of(p, p.external(std::move(op), std::move(inputs), {out}, std::move(attrs))[0]);
}

std::vector<BufferId> realizeAll(LowerContext &ctx, const ir::Node &n, int count) {
  std::vector<BufferId> ids;
  for (int i = 0; i < count; ++i)
    ids.push_back(ctx.realize(ctx.tensor(n.operand(i))));
  return ids;
}

/// `y + bias` broadcast along `channelDim` of y: the bias epilogue of linear and conv2d.
TensorRef addBias(LowerContext &ctx, const TensorRef &y, const TensorRef &bias,
                  int64_t channelDim) {
  DType result = y.dtype, compute = computeDType(result);
  return ctx.pointwise(y.sizes, [&](Ops &ops, Idx i) {
    Val b = LowerContext::load(ops, bias, {&i[channelDim], 1});
    Val v = ops.cast(LowerContext::load(ops, y, i), compute) + ops.cast(b, compute);
    return ops.cast(v, result);
  });
}

/// A matmul operand read from a buffer in place: the buffer, whether its last two dims are
/// swapped, and the sizes a contiguous buffer is reshaped to first (none: as it is).
struct InPlaceOperand {
  BufferId buffer;
  bool transposed = false;
  std::optional<std::vector<int64_t>> view;
};

/// The value a transpose of the last two dims swapped, or null: a matmul operand computed
/// as `f(x).transpose(-2, -1)` (attention's `k.transpose(2, 3)` after rotary or a head repeat)
/// is better stored in f's own layout, its vector lane along the contiguous dim, and read by
/// BLAS transposed, than stored transposed by a kernel whose every load strides.
const ir::Value *lastTwoTransposeOf(const ir::Value *v) {
  const ir::Node *d = v->definingNode();
  if (!d || d->op() != OpKind::Transpose)
    return nullptr;
  const int64_t rank = v->meta().rank();
  int64_t a = wrapDim(d->attr("dim0")->toInt(), rank), b = wrapDim(d->attr("dim1")->toInt(), rank);
  return std::min(a, b) == rank - 2 && std::max(a, b) == rank - 1 ? d->operand(0) : nullptr;
}

/// The constant sizes of a reshape or view, or nullopt for any other value.
std::optional<std::vector<int64_t>> reshapeSizesOf(const ir::Value *v) {
  const ir::Node *d = v->definingNode();
  if (!d || (d->op() != OpKind::Reshape && d->op() != OpKind::View))
    return std::nullopt;
  std::vector<int64_t> sizes;
  for (const SymInt &s : v->meta().sizes) {
    if (!s.isConstant())
      return std::nullopt;
    sizes.push_back(*s.constant());
  }
  return sizes;
}

/// Whether `v` is a layout BLAS reads without a copy: a whole buffer, its last-two-dims
/// transpose, or either of those of a reshape of a whole contiguous buffer (the backward's
/// `reshape(g, [-1, n])` and its transpose), recognized from the graph nodes that made it.
std::optional<InPlaceOperand> inPlaceOperand(LowerContext &ctx, const ir::Value *v) {
  const LoopProgram &p = ctx.program();
  const TensorRef &t = ctx.tensor(v);
  if (t.isWholeBuffer(p))
    return InPlaceOperand{t.buffer};
  if (isLastTwoTransposed(t, p))
    return InPlaceOperand{t.buffer, true};
  InPlaceOperand out;
  if (const ir::Value *swapped = lastTwoTransposeOf(v)) {
    out.transposed = true;
    v = swapped;
  }
  out.view = reshapeSizesOf(v);
  if (!out.view)
    return std::nullopt;
  const TensorRef &base = ctx.tensor(v->definingNode()->operand(0));
  if (!base.isWholeBuffer(p) || !p.buffer(base.buffer).meta.isContiguous())
    return std::nullopt;
  out.buffer = base.buffer;
  return out;
}

/// A view of a buffer whose element offsets are affine in its indices (`L[i, :i]`, `A[:, j]`,
/// a slice of rows): the buffer and the view's sizes, strides and offset in it, which the library
/// reads in place (BLAS takes an offset and a stride per dim, or ops::matmul copies for it).
/// Without it, each such operand is a copy kernel of its own: in an unrolled loop of dot
/// products, two kernels per product.
std::optional<std::vector<SymInt>> stridedOperand(LowerContext &ctx, const ir::Value *v,
                                                  BufferId &buffer) {
  const LoopProgram &p = ctx.program();
  const TensorRef &t = ctx.tensor(v);
  if (t.isFill())
    return std::nullopt;
  const ir::TensorMeta &m = p.buffer(t.buffer).meta;
  ir::loop::VarRanges ranges(t.sizes, {});
  std::optional<ir::loop::AffineForm> form =
      ir::loop::affineForm(ir::loop::flatIndex(t.index, m.strides), ranges);
  if (!form)
    return std::nullopt;
  std::vector<SymInt> out(t.sizes.begin(), t.sizes.end());
  std::vector<IndexExpr> vars = loopVars(t.sizes.size());
  for (const IndexExpr &var : vars) {
    auto it = form->coeffs.find(var.symbolName());
    SymInt stride = it == form->coeffs.end() ? SymInt(0) : it->second;
    std::optional<int64_t> known = stride.constant();
    if (!known || *known < 0)
      return std::nullopt; // a flipped view (tensors have no negative strides), or unknown
    out.push_back(stride);
  }
  out.push_back(form->base);
  buffer = t.buffer;
  return out;
}

void lowerMatmul(LowerContext &ctx, const ir::Node &n) {
  ir::Attributes attrs;
  std::vector<BufferId> in;
  const char *flags[] = {"transpose_a", "transpose_b"};
  const char *views[] = {"a_view", "b_view"};
  const char *strided[] = {"a_strided", "b_strided"};
  for (int k = 0; k < 2; ++k) {
    std::optional<InPlaceOperand> o = inPlaceOperand(ctx, n.operand(k));
    BufferId source;
    if (!o && !lastTwoTransposeOf(n.operand(k)) && !reshapeSizesOf(n.operand(k))) {
      if (std::optional<std::vector<SymInt>> layout = stridedOperand(ctx, n.operand(k), source)) {
        in.push_back(source);
        attrs.emplace(strided[k], std::move(*layout));
        continue;
      }
    }
    if (!o) {
      const ir::Value *v = n.operand(k);
      const ir::Value *base = lastTwoTransposeOf(v);
      if (base)
        attrs.emplace(flags[k], true);
      else
        base = v;
      // A reshape of a computed view (a backward's `reshape(g, [-1, n])` of a transposed
      // gradient) is stored in its own shape, where its index is affine, and passed to BLAS
      // reshaped: the same memory, without a floordiv and a mod per element.
      // The realized operand may be a graph input of any strides (a transposed argument): then
      // the reshape is realized itself, in its own shape.
      if (std::optional<std::vector<int64_t>> sizes = reshapeSizesOf(base)) {
        BufferId source = ctx.realize(ctx.tensor(base->definingNode()->operand(0)));
        if (ctx.program().buffer(source).meta.isContiguous()) {
          in.push_back(source);
          attrs.emplace(views[k], *sizes);
          continue;
        }
      }
      in.push_back(ctx.realize(ctx.tensor(base)));
      continue;
    }
    in.push_back(o->buffer);
    if (o->transposed)
      attrs.emplace(flags[k], true);
    if (o->view)
      attrs.emplace(views[k], *o->view);
  }
  ctx.define(n.result(0), external(ctx, n, "matmul", in, attrs));
}

void lowerLinear(LowerContext &ctx, const ir::Node &n) {
  TensorRef y = external(ctx, n, "linear", realizeAll(ctx, n, 2));
  if (n.numOperands() == 3)
    y = addBias(ctx, y, ctx.tensor(n.operand(2)), y.rank() - 1);
  ctx.define(n.result(0), y);
}

/// conv2d / conv3d: the library's convolution, then the bias as a pointwise epilogue.
void lowerConvolution(LowerContext &ctx, const ir::Node &n) {
  const int64_t spatial = n.op() == OpKind::Conv3d ? 3 : 2;
  TensorRef y = external(ctx, n, std::string(n.keyword()), realizeAll(ctx, n, 2),
                         copyAttrs(n, {"dilation", "groups", "padding", "stride"}));
  if (n.numOperands() == 3)
    y = addBias(ctx, y, ctx.tensor(n.operand(2)), y.rank() - spatial - 1);
  ctx.define(n.result(0), y);
}

void lowerConvolutionWeightGrad(LowerContext &ctx, const ir::Node &n) {
  ctx.define(n.result(0),
             external(ctx, n, "convolution_weight_grad", realizeAll(ctx, n, 2),
                      copyAttrs(n, {"dilation", "groups", "padding", "stride", "weight_size"})));
}

void lowerAttention(LowerContext &ctx, const ir::Node &n) {
  ctx.define(n.result(0),
             external(ctx, n, "scaled_dot_product_attention", realizeAll(ctx, n, n.numOperands()),
                      copyAttrs(n, {"is_causal", "scale"})));
}

/// The rows and the normalized trailing dims of a normalization's input (`normalized_shape`).
struct NormalizedSplit {
  size_t lead;                      ///< number of row dims
  std::vector<SymInt> outer, inner; ///< row sizes, normalized sizes
};
NormalizedSplit splitNormalized(const ir::Node &n, const TensorRef &x) {
  size_t lead = x.sizes.size() - n.attr("normalized_shape")->toSymInts().size();
  return {lead, {x.sizes.begin(), x.sizes.begin() + lead}, {x.sizes.begin() + lead, x.sizes.end()}};
}

/// layer_norm over the trailing dims: a Welford reduction (mean, m2) per row, rstd per row, and
/// `(x - mean) * rstd * weight + bias` per element.
void lowerLayerNorm(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  auto [lead, outer, inner] = splitNormalized(n, x);
  const ir::Attribute *epsAttr = n.attr("eps");
  double eps = epsAttr ? epsAttr->toDouble() : 1e-5;
  DType result = out.dtype, compute = computeDType(result);
  LoopProgram &p = ctx.program();
  ir::loop::WelfordBuffers w = p.welford(outer, inner, [&](Ops &ops, Idx i) {
    return ops.cast(LowerContext::load(ops, x, i), compute);
  });
  SymInt count = numel(inner);
  BufferId rstd = p.pointwise(outer, [&](Ops &ops, Idx i) {
    Val var = ops.load(w.m2, i) / sizeAs(ops, count, compute);
    return ops.rsqrt(var + ops.constant(eps, compute));
  });
  const ir::Node *node = &n;
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    Idx row = i.first(lead), col = i.subspan(lead);
    Val xc = ops.cast(LowerContext::load(ops, x, i), compute);
    Val v = (xc - ops.load(w.mean, row)) * ops.load(rstd, row);
    if (node->numOperands() > 1)
      v = v * ops.cast(LowerContext::load(ops, ctx.tensor(node->operand(1)), col), compute);
    if (node->numOperands() > 2)
      v = v + ops.cast(LowerContext::load(ops, ctx.tensor(node->operand(2)), col), compute);
    return ops.cast(v, result);
  }));
}

/// rms_norm as eager computes it: scale = 1 / sqrt(sum(x^2) / n + eps) in the accumulation
/// dtype, x * scale rounded to the input dtype, then times the weight.
void lowerRmsNorm(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  auto [lead, outer, inner] = splitNormalized(n, x);
  DType result = out.dtype, compute = computeDType(result);
  const ir::Attribute *epsAttr = n.attr("eps");
  double eps = epsAttr                     ? epsAttr->toDouble()
               : compute == DType::Float64 ? std::numeric_limits<double>::epsilon()
                                           : std::numeric_limits<float>::epsilon();
  LoopProgram &p = ctx.program();
  BufferId sumSq = p.reduction(ir::loop::ReductionKind::Sum, outer, inner, [&](Ops &ops, Idx i) {
    Val v = ops.cast(LowerContext::load(ops, x, i), compute);
    return v * v;
  });
  SymInt count = numel(inner);
  BufferId scale = p.pointwise(outer, [&](Ops &ops, Idx i) {
    Val one = ops.constant(1.0, compute);
    return one /
           ops.sqrt(ops.load(sumSq, i) / sizeAs(ops, count, compute) + ops.constant(eps, compute));
  });
  const ir::Node *node = &n;
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    Idx row = i.first(lead), col = i.subspan(lead);
    Val v = ops.cast(LowerContext::load(ops, x, i), compute) * ops.load(scale, row);
    if (node->numOperands() > 1) // torch rounds x * scale to the input dtype first
      v = ops.cast(ops.cast(v, result), compute) *
          ops.cast(LowerContext::load(ops, ctx.tensor(node->operand(1)), col), compute);
    return ops.cast(v, result);
  }));
}

/// mse_loss and l1_loss: (a - b)^2 or |a - b| over the broadcast shape, then summed (and divided
/// by the count for the mean) unless the reduction is none.
void lowerLoss(LowerContext &ctx, const ir::Node &n) {
  const ir::TensorMeta &out = n.result(0)->meta();
  const ir::Attribute *r = n.attr("reduction");
  std::string reduction = r ? r->toString() : "mean";
  DType result = out.dtype;
  // Integer differences are taken in int64, so uint8 operands do not wrap (eager's l1_loss).
  DType compute = isFloating(result) ? computeDType(result) : DType::Int64;
  std::vector<SymInt> sizes =
      ir::broadcastShapes({n.operand(0)->meta().sizes, n.operand(1)->meta().sizes});
  const ir::Node *node = &n;
  auto body = [&](Ops &ops, Idx i) {
    Val d = ctx.read(ops, node->operand(0), i, sizes, compute) -
            ctx.read(ops, node->operand(1), i, sizes, compute);
    return node->op() == ir::OpKind::MseLoss ? d * d : ops.abs(d);
  };
  if (reduction == "none")
    return ctx.define(n.result(0), ctx.pointwise(sizes, [&](Ops &ops, Idx i) {
      return ops.cast(body(ops, i), result);
    }));
  LoopProgram &p = ctx.program();
  BufferId sum = p.reduction(ir::loop::ReductionKind::Sum, {}, sizes, body);
  SymInt count = numel(sizes);
  ctx.define(n.result(0), ctx.pointwise({}, [&](Ops &ops, Idx i) {
    Val v = ops.load(sum, i);
    if (reduction == "mean")
      v = v / sizeAs(ops, count, compute);
    return ops.cast(v, result);
  }));
}

/// batch_norm (inference): a per-channel scale w / sqrt(var + eps), computed in f64 as eager
/// does, then `(x - mean) * scale + bias` per element with the channel in dim 1.
void lowerBatchNorm(LowerContext &ctx, const ir::Node &n) {
  const TensorRef &x = ctx.tensor(n.operand(0));
  const ir::TensorMeta &out = n.result(0)->meta();
  const ir::Attribute *epsAttr = n.attr("eps");
  double eps = epsAttr ? epsAttr->toDouble() : 1e-5;
  DType result = out.dtype, compute = computeDType(result);
  const ir::Node *node = &n;
  auto param = [&](Ops &ops, int k, Idx c, DType dtype) {
    return ops.cast(LowerContext::load(ops, ctx.tensor(node->operand(k)), c), dtype);
  };
  TensorRef scale = ctx.pointwise({x.sizes[1]}, [&](Ops &ops, Idx c) {
    Val w = node->numOperands() > 3 ? param(ops, 3, c, DType::Float64)
                                    : ops.constant(1.0, DType::Float64);
    Val var = param(ops, 2, c, DType::Float64) + ops.constant(eps, DType::Float64);
    return ops.cast(w / ops.sqrt(var), compute);
  });
  ctx.define(n.result(0), ctx.pointwise(out.sizes, [&](Ops &ops, Idx i) {
    Idx c = i.subspan(1, 1);
    Val v = (ops.cast(LowerContext::load(ops, x, i), compute) - param(ops, 1, c, compute)) *
            LowerContext::load(ops, scale, c);
    if (node->numOperands() > 4)
      v = v + param(ops, 4, c, compute);
    return ops.cast(v, result);
  }));
}

} // namespace

void registerNN(Registry &r) {
  r.add(OpKind::Matmul, lowerMatmul);
  r.add(OpKind::Linear, lowerLinear);
  r.add(OpKind::Conv2d, lowerConvolution);
  r.add(OpKind::Conv3d, lowerConvolution);
  r.add(OpKind::ConvolutionWeightGrad, lowerConvolutionWeightGrad);
  r.add(OpKind::ScaledDotProductAttention, lowerAttention);
  r.add(OpKind::LayerNorm, lowerLayerNorm);
  r.add(OpKind::RmsNorm, lowerRmsNorm);
  r.add(OpKind::MseLoss, lowerLoss);
  r.add(OpKind::L1Loss, lowerLoss);
  r.add(OpKind::BatchNorm, lowerBatchNorm);
}

} // namespace kiln::passes::lower

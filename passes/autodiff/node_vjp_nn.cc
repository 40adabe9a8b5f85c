// The compiled derivatives of convolution and the 2-d pools: the weight gradient of a
// convolution is the convolution_weight_grad extern on the CPU (oneDNN's backward-weights pass,
// or im2col columns times the output gradient) and those columns times the gradient as graph
// ops on a device, the input gradient a transposed convolution; average
// pooling's input gradient is each window's share placed back by `fold` (col2im), which sums where
// windows overlap; max pooling's is eager's indexed kernel (max_pool2d_backward).
#include "passes/autodiff/node_vjp.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace kiln::passes::autodiff {

using ir::OpKind;
using B = GraphRuleBuilder;
using V = ir::Value *;
using Sizes = B::Sizes;

namespace {

Sizes pairAttr(const ir::Node &n, std::string_view name, int64_t fallback) {
  const ir::Attribute *a = n.attr(name);
  if (!a)
    return {fallback, fallback};
  Sizes v = a->toInts();
  if (v.size() == 1)
    v.push_back(v[0]);
  if (v.size() != 2)
    throw Unsupported(fmt::format("{}: '{}' needs two values", n.keyword(), name));
  return v;
}

struct Window {
  Sizes kernel, stride, padding, dilation;
};

Window windowOf(const ir::Node &n, std::string_view kernelName) {
  Window w;
  w.kernel = pairAttr(n, kernelName, 1);
  w.stride =
      n.attr("stride") && !n.attr("stride")->toInts().empty() ? pairAttr(n, "stride", 1) : w.kernel;
  w.padding = pairAttr(n, "padding", 0);
  w.dilation = pairAttr(n, "dilation", 1);
  return w;
}

/// The input of a 2-d op must be batched (N, C, H, W) for the im2col forms.
void requireBatched(const ir::Node &n, const Sizes &xs) {
  if (xs.size() != 4)
    throw Unsupported(
        fmt::format("{} of an unbatched input has no compiled derivative yet", n.keyword()));
}

ir::Attributes windowAttrs(const Window &w, const Sizes &padding) {
  return {{"kernel_size", w.kernel},
          {"stride", w.stride},
          {"padding", padding},
          {"dilation", w.dilation}};
}

/// [N, C * KK, L] columns of per-window gradients placed back into [N, C, H, W].
V foldColumns(B &b, V cols, const Sizes &xs, const Window &w) {
  ir::Attributes attrs = windowAttrs(w, w.padding);
  attrs["output_size"] = Sizes{xs[2], xs[3]};
  return b.op(OpKind::Fold, {cols}, std::move(attrs));
}

} // namespace

std::vector<V> convolutionVjp(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  V x = n.operand(0), w = n.operand(1);
  Sizes xs = B::sizes(x), ws = B::sizes(w), gs = B::sizes(g);
  requireBatched(n, xs);
  Window win = windowOf(n, "");
  win.kernel = {ws[2], ws[3]};
  win.stride = pairAttr(n, "stride", 1);
  const int64_t groups = n.attr("groups") ? n.attr("groups")->toInt() : 1;
  std::vector<V> r(3);
  if (need[0]) {
    Sizes outPad(2);
    for (int d = 0; d < 2; ++d)
      outPad[d] = xs[2 + d] - ((gs[2 + d] - 1) * win.stride[d] - 2 * win.padding[d] +
                               win.dilation[d] * (ws[2 + d] - 1) + 1);
    r[0] = b.op(OpKind::ConvTranspose2d, {g, w},
                {{"stride", win.stride},
                 {"padding", win.padding},
                 {"output_padding", outPad},
                 {"dilation", win.dilation},
                 {"groups", groups}});
  }
  if (need[1] && x->meta().device.type == DeviceType::CPU) {
    r[1] = b.op(OpKind::ConvolutionWeightGrad, {x, g},
                {{"stride", win.stride},
                 {"padding", win.padding},
                 {"dilation", win.dilation},
                 {"groups", groups},
                 {"weight_size", ws}});
  } else if (need[1]) { // on a device, as GEMMs there (the extern is a host kernel)
    const int64_t batch = xs[0], out = ws[0];
    V cols = b.op(OpKind::Unfold, {x}, windowAttrs(win, win.padding));
    const int64_t l = B::sizes(cols)[2], ck = B::sizes(cols)[1] / groups;
    V c = b.reshape(cols, {batch, groups, ck, l});
    V gg = b.reshape(g, {batch, groups, out / groups, l});
    V wg = b.sum(b.matmul(gg, b.transpose(c, -1, -2)), Sizes{0}, false);
    r[1] = b.reshape(wg, ws);
  }
  if (need[2] && n.numOperands() > 2)
    r[2] = b.sum(g, Sizes{0, 2, 3}, false);
  return r;
}

namespace {

Sizes listAttr(const ir::Node &n, std::string_view name, int64_t fallback, size_t count) {
  const ir::Attribute *a = n.attr(name);
  Sizes v = a ? a->toInts() : Sizes{};
  if (v.empty())
    v.push_back(fallback);
  if (v.size() == 1)
    v.resize(count, v[0]);
  if (v.size() != count)
    throw Unsupported(fmt::format("{}: '{}' needs {} values", n.keyword(), name, count));
  return v;
}

} // namespace

/// conv_transpose3d: the adjoint of conv3d, so the input's gradient is conv3d of g and the
/// weight's the convolution's weight gradient with the roles of input and output swapped.
std::vector<V> convTranspose3dVjp(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  V x = n.operand(0), w = n.operand(1);
  if (B::sizes(x).size() != 5)
    throw Unsupported("conv_transpose3d of an unbatched input has no compiled derivative yet");
  const Sizes stride = listAttr(n, "stride", 1, 3), padding = listAttr(n, "padding", 0, 3),
              dilation = listAttr(n, "dilation", 1, 3),
              outPad = listAttr(n, "output_padding", 0, 3);
  for (size_t d = 0; d < 3; ++d)
    if (outPad[d] >= stride[d])
      throw Unsupported("conv_transpose3d with output_padding >= stride has no compiled "
                        "derivative yet");
  const int64_t groups = n.attr("groups") ? n.attr("groups")->toInt() : 1;
  ir::Attributes window = {
      {"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}};
  std::vector<V> r(3);
  if (need[0])
    r[0] = b.op(OpKind::Conv3d, {g, w}, window);
  if (need[1]) {
    if (x->meta().device.type != DeviceType::CPU)
      throw Unsupported("conv_transpose3d's weight gradient on a device has no compiled "
                        "derivative yet");
    window["weight_size"] = B::sizes(w);
    r[1] = b.op(OpKind::ConvolutionWeightGrad, {g, x}, window);
  }
  if (need[2] && n.numOperands() > 2)
    r[2] = b.sum(g, Sizes{0, 2, 3, 4}, false);
  return r;
}

/// conv_transpose1d / 2d is the adjoint of a convolution: its input gradient is that
/// convolution of g (same stride, padding, dilation and groups), and its weight gradient the
/// input times the unfolded columns of g (the roles of x and g in conv2d's weight rule swapped).
/// A 1-d one runs as a 2-d one of height 1.
std::vector<V> convTransposeVjp(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  const bool oneD = n.op() == OpKind::ConvTranspose1d;
  if (n.op() == OpKind::ConvTranspose3d)
    return convTranspose3dVjp(b, n, g, need);
  V x = n.operand(0), w = n.operand(1);
  const size_t spatial = oneD ? 1 : 2;
  if (B::sizes(x).size() != spatial + 2)
    throw Unsupported(
        fmt::format("{} of an unbatched input has no compiled derivative yet", n.keyword()));
  Sizes stride = listAttr(n, "stride", 1, spatial), padding = listAttr(n, "padding", 0, spatial),
        dilation = listAttr(n, "dilation", 1, spatial);
  if (oneD) { // height 1: no padding, unit stride and dilation
    x = b.unsqueeze(x, 2), w = b.unsqueeze(w, 2), g = b.unsqueeze(g, 2);
    stride.insert(stride.begin(), 1), padding.insert(padding.begin(), 0);
    dilation.insert(dilation.begin(), 1);
  }
  Sizes xs = B::sizes(x), ws = B::sizes(w);
  const Sizes outPad = listAttr(n, "output_padding", 0, spatial);
  for (size_t d = 0; d < spatial; ++d)
    if (outPad[d] >= stride[d + (oneD ? 1 : 0)]) // the adjoint convolution would see extra rows
      throw Unsupported(fmt::format("{} with output_padding >= stride has no compiled "
                                    "derivative yet",
                                    n.keyword()));
  const int64_t groups = n.attr("groups") ? n.attr("groups")->toInt() : 1;
  auto flat = [&](V v) { return oneD ? b.squeezeDim(v, 2) : v; };
  std::vector<V> r(3);
  if (need[0])
    r[0] = flat(b.op(
        OpKind::Conv2d, {g, w},
        {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}}));
  if (need[1]) {
    V cols = b.op(OpKind::Unfold, {g},
                  {{"kernel_size", Sizes{ws[2], ws[3]}},
                   {"stride", stride},
                   {"padding", padding},
                   {"dilation", dilation}});
    const int64_t l = B::sizes(cols)[2];
    if (l != xs[2] * xs[3])
      throw Unsupported(
          fmt::format("{}: the windows of the output do not tile the input", n.keyword()));
    V c = b.reshape(cols, {xs[0], groups, B::sizes(cols)[1] / groups, l});
    V xg = b.reshape(x, {xs[0], groups, xs[1] / groups, l});
    V wg = b.sum(b.matmul(xg, b.transpose(c, -1, -2)), Sizes{0}, false);
    r[1] = flat(b.reshape(wg, ws));
  }
  if (need[2] && n.numOperands() > 2)
    r[2] = b.sum(g, Sizes{0, 2, 3}, false);
  return r;
}

/// Inference batch_norm, y = (x - mean) rstd w + bias per channel (dim 1) with the running
/// statistics as operands: pointwise in x, reductions over the other dims for the rest.
std::vector<V> batchNormVjp(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  V x = n.operand(0), mean = n.operand(1), var = n.operand(2);
  V w = n.numOperands() > 3 ? n.operand(3) : nullptr;
  Sizes xs = B::sizes(x);
  if (xs.size() < 2)
    throw Unsupported("batch_norm of a rank-1 input has no compiled derivative yet");
  Sizes channel(xs.size(), 1), others{0};
  channel[1] = xs[1];
  for (size_t d = 2; d < xs.size(); ++d)
    others.push_back(static_cast<int64_t>(d));
  const ir::Attribute *e = n.attr("eps");
  V rstd = b.powScalar(b.addScalar(var, e ? e->toDouble() : 1e-5), -0.5);
  auto perChannel = [&](V v) { return b.reshape(v, channel); };
  auto toChannel = [&](V v, V operand) {
    return b.cast(b.sum(v, others, false), B::dtype(operand));
  };
  V gs = w ? b.mul(g, perChannel(w)) : g; // the gradient of the normalized value
  V centered = b.sub(x, perChannel(mean));
  std::vector<V> r(n.numOperands());
  if (need[0])
    r[0] = b.cast(b.mul(gs, perChannel(rstd)), B::dtype(x));
  if (need[1])
    r[1] = b.neg(toChannel(b.mul(gs, perChannel(rstd)), mean));
  if (need[2])
    r[2] = toChannel(b.mul(b.mul(gs, centered), perChannel(b.scale(b.powScalar(rstd, 3.0), -0.5))),
                     var);
  if (w && need[3])
    r[3] = toChannel(b.mul(g, b.mul(centered, perChannel(rstd))), w);
  if (n.numOperands() > 4 && need[4])
    r[4] = toChannel(g, n.operand(4));
  return r;
}

/// conv3d: the input's gradient is conv_transpose3d of g (output_padding gives back the sizes
/// the stride floored away), the weight's the weight-gradient extern, the bias's g summed.
std::vector<V> conv3dVjp(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  V x = n.operand(0), w = n.operand(1);
  Sizes xs = B::sizes(x), ws = B::sizes(w), gs = B::sizes(g);
  if (xs.size() != 5)
    throw Unsupported("conv3d of an unbatched input has no compiled derivative yet");
  const Sizes stride = listAttr(n, "stride", 1, 3), padding = listAttr(n, "padding", 0, 3),
              dilation = listAttr(n, "dilation", 1, 3);
  const int64_t groups = n.attr("groups") ? n.attr("groups")->toInt() : 1;
  std::vector<V> r(3);
  if (need[0]) {
    Sizes outPad(3);
    for (int d = 0; d < 3; ++d)
      outPad[d] = xs[2 + d] - ((gs[2 + d] - 1) * stride[d] - 2 * padding[d] +
                               dilation[d] * (ws[2 + d] - 1) + 1);
    r[0] = b.op(OpKind::ConvTranspose3d, {g, w},
                {{"stride", stride},
                 {"padding", padding},
                 {"output_padding", outPad},
                 {"dilation", dilation},
                 {"groups", groups}});
  }
  if (need[1]) {
    if (x->meta().device.type != DeviceType::CPU)
      throw Unsupported("conv3d's weight gradient on a device has no compiled derivative yet");
    r[1] = b.op(OpKind::ConvolutionWeightGrad, {x, g},
                {{"stride", stride},
                 {"padding", padding},
                 {"dilation", dilation},
                 {"groups", groups},
                 {"weight_size", ws}});
  }
  if (need[2] && n.numOperands() > 2)
    r[2] = b.sum(g, Sizes{0, 2, 3, 4}, false);
  return r;
}

std::vector<V> maxPoolVjp(B &b, const ir::Node &n, V g) {
  // eager's kernel: the indices of each window's first maximum recomputed from x, and the
  // gradient added there (an extern: no im2col of the input to save or recompute)
  ir::Attributes attrs = n.attrs();
  return {b.op(OpKind::MaxPool2dBackward, {n.operand(0), g}, std::move(attrs))};
}

/// How many points of each window along one dim eager's average divides by, for the windows
/// starting at o * stride - padding (o < out): its span clipped to the padded input, and to
/// the input itself when the padding is not counted. A [out] vector of `dtype`.
V windowCounts(B &b, int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
               bool countPad, DType dtype) {
  V start =
      b.op(OpKind::Arange, {},
           {{"start", -padding}, {"end", ir::SymInt(out * stride - padding)}, {"step", stride}});
  V end = b.op(OpKind::Minimum,
               {b.addScalar(start, static_cast<double>(kernel)), b.integer(in + padding)});
  if (!countPad) {
    end = b.op(OpKind::Minimum, {end, b.integer(in)});
    start = b.op(OpKind::Maximum, {start, b.integer(0)});
  }
  return b.cast(b.sub(end, start), dtype);
}

std::vector<V> avgPoolVjp(B &b, const ir::Node &n, V g) {
  V x = n.operand(0);
  Sizes xs = B::sizes(x), gs = B::sizes(g);
  requireBatched(n, xs);
  Window w = windowOf(n, "kernel_size");
  const int64_t kk = w.kernel[0] * w.kernel[1];
  const bool padded = w.padding[0] || w.padding[1];
  const bool countPad = !n.attr("count_include_pad") || n.attr("count_include_pad")->toBool();
  const ir::Attribute *divisor = n.attr("divisor_override");
  // Windows ceil_mode adds past the floor formula's: the fold runs over an input grown to hold
  // them, and the rows and columns past the input are dropped (they are right padding).
  Sizes folded = {xs[0], xs[1], xs[2], xs[3]};
  for (int d = 0; d < 2; ++d)
    folded[2 + d] =
        std::max(xs[2 + d], (gs[2 + d] - 1) * w.stride[d] + w.kernel[d] - 2 * w.padding[d]);
  const bool floorWindows = folded[2] == xs[2] && folded[3] == xs[3];
  V share = g;
  if (divisor) {
    share = b.scale(g, 1.0 / static_cast<double>(divisor->toInt()));
  } else if (floorWindows && (countPad || !padded)) {
    share = b.scale(g, 1.0 / static_cast<double>(kk)); // every window counts kh * kw points
  } else {
    const DType dt = B::dtype(g);
    V rows = windowCounts(b, xs[2], gs[2], w.kernel[0], w.stride[0], w.padding[0], countPad, dt);
    V cols = windowCounts(b, xs[3], gs[3], w.kernel[1], w.stride[1], w.padding[1], countPad, dt);
    share = b.div(g, b.mul(b.unsqueeze(rows, 1), b.unsqueeze(cols, 0)));
  }
  const int64_t l = gs[2] * gs[3];
  V spread = b.expand(b.reshape(share, {xs[0], xs[1], 1, l}), {xs[0], xs[1], kk, l});
  V grad = foldColumns(b, b.reshape(spread, {xs[0], xs[1] * kk, l}), folded, w);
  if (!floorWindows)
    grad = b.slice(b.slice(grad, 2, 0, xs[2], 1), 3, 0, xs[3], 1);
  return {grad};
}

std::vector<V> adaptiveAvgPoolVjp(B &b, const ir::Node &n, V g) {
  V x = n.operand(0);
  Sizes xs = B::sizes(x), gs = B::sizes(g);
  const size_t rank = xs.size();
  const int64_t h = xs[rank - 2], wd = xs[rank - 1], oh = gs[rank - 2], ow = gs[rank - 1];
  if (h % oh || wd % ow)
    throw Unsupported("adaptive_avg_pool2d with windows of unequal sizes has no compiled "
                      "derivative yet");
  const int64_t kh = h / oh, kw = wd / ow;
  Sizes lead(xs.begin(), xs.end() - 2);
  Sizes split = lead, wide = lead;
  for (int64_t v : {oh, int64_t{1}, ow, int64_t{1}})
    split.push_back(v);
  for (int64_t v : {oh, kh, ow, kw})
    wide.push_back(v);
  V spread = b.reshape(b.expand(b.reshape(g, split), wide), xs);
  return {b.scale(spread, 1.0 / static_cast<double>(kh * kw))};
}

std::vector<V> attentionVjp(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  V q = n.operand(0), k = n.operand(1), v = n.operand(2);
  Sizes qs = B::sizes(q), ks = B::sizes(k);
  const int64_t l = qs[qs.size() - 2], s = ks[ks.size() - 2];
  const double scale = n.attr("scale") ? n.attr("scale")->toDouble()
                                       : 1.0 / std::sqrt(static_cast<double>(qs.back()));
  // The probabilities again, as the forward computed them (what eager's kernel saves).
  V scores = b.scale(b.matmul(q, b.transpose(k, -2, -1)), scale);
  const double minusInf = -std::numeric_limits<double>::infinity();
  if (n.attr("is_causal") && n.attr("is_causal")->toBool()) { // keep col <= row
    V above = b.gtScalar(b.triu(b.op(OpKind::Full, {},
                                     {{"size", std::vector<ir::SymInt>{l, s}},
                                      {"dtype", B::dtype(scores)},
                                      {"value", 1.0}}),
                                1),
                         0.5);
    scores = b.op(OpKind::MaskedFill, {scores, above, b.number(minusInf)});
  }
  V mask = n.numOperands() > 3 ? n.operand(3) : nullptr;
  if (mask && B::dtype(mask) == DType::Bool)
    scores = b.op(OpKind::MaskedFill, {scores, b.logicalNot(mask), b.number(minusInf)});
  else if (mask)
    scores = b.add(scores, mask);
  V p = b.softmax(scores, -1);
  std::vector<V> r(4);
  if (need[2])
    r[2] = b.reduceTo(b.matmul(b.transpose(p, -2, -1), g), B::sizes(v), B::dtype(v));
  if (!need[0] && !need[1] && !(mask && need[3]))
    return r;
  V dp = b.matmul(g, b.transpose(v, -2, -1));
  V ds = autograd::rules::softmax(b, dp, p, -1); // the gradient of the scaled scores
  if (need[0])
    r[0] = b.reduceTo(b.scale(b.matmul(ds, k), scale), qs, B::dtype(q));
  if (need[1])
    r[1] = b.reduceTo(b.scale(b.matmul(b.transpose(ds, -2, -1), q), scale), ks, B::dtype(k));
  if (mask && need[3] && B::dtype(mask) != DType::Bool)
    r[3] = b.reduceTo(ds, B::sizes(mask), B::dtype(mask));
  return r;
}

} // namespace kiln::passes::autodiff

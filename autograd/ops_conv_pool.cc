// Differentiable convolution, pooling, batch norm and padding (every mode).
//
// Their rules are written over differentiable ops (the convolution's input gradient is a
// transposed convolution and the transposed one's a convolution, unfold and fold are each other's
// derivative), so a backward run with create_graph=True records them: double backward and
// forward-mode AD work through convolutions and pooling. With grad mode off those ops run their
// kernels directly, and a backward that records nothing (no create_graph) computes a
// convolution's input and weight gradients on oneDNN's backward kernels where they run.
#include "autograd/autocast.h"
#include "autograd/derivatives_layout.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/error.h"
#include "runtime/ops/factory.h"

#include <algorithm>
#include <cmath>

namespace kiln::autograd::ops {
namespace {
using B = EagerBuilder;

Shape expandTo(const Shape &v, int64_t nd, int64_t fill) {
  if (v.empty())
    return Shape(nd, fill);
  return v.size() == 1 ? Shape(nd, v[0]) : v;
}

/// Dims of x except the channel dim 1: what batch norm reduces over.
Shape allButChannel(int64_t rank) {
  Shape dims{0};
  for (int64_t d = 2; d < rank; ++d)
    dims.push_back(d);
  return dims;
}

/// weight [O, C/g, kh, kw] of a 2-D convolution from g [N, O, oh, ow] and x [N, C, H, W]: im2col
/// columns times the gradient, batched over groups and summed over the batch.
Tensor convWeightGrad2d(B &b, const Tensor &x, const Tensor &g, const Shape &wsizes,
                        const Shape &stride, const Shape &padding, const Shape &dilation,
                        int64_t groups) {
  const int64_t n = x.size(0), o = wsizes[0];
  Tensor cols = ops::unfold(x, {wsizes[2], wsizes[3]}, dilation, padding, stride);
  const int64_t l = cols.size(2), ck = cols.size(1) / groups;
  Tensor c = b.reshape(cols, {n, groups, ck, l});
  Tensor gg = b.reshape(g, {n, groups, o / groups, l});
  Tensor w = b.sum(b.matmul(gg, b.transpose(c, -1, -2)), DimList(Shape{0}), false);
  return b.reshape(w, wsizes);
}

/// The weight gradient of a convolution of any rank as a convolution itself: with the batch and
/// channel dims of x and g swapped, g is the kernel, sliding over x with stride and dilation
/// swapped (dW[o, c, k] = sum over n, p of g[n, o, p] x[n, c, p * stride + k * dilation - pad]).
/// For 3-D, where there is no im2col.
Tensor convWeightGradByConv(B &b, int64_t nd, const Tensor &x, const Tensor &g, const Shape &wsizes,
                            const Shape &stride, const Shape &padding, const Shape &dilation,
                            int64_t groups) {
  const int64_t cg = x.size(1) / groups, og = g.size(1) / groups;
  std::vector<Tensor> parts;
  for (int64_t gi = 0; gi < groups; ++gi) {
    Tensor xs = contiguous(b.transpose(b.slice(x, 1, gi * cg, (gi + 1) * cg, 1), 0, 1));
    Tensor gs = contiguous(b.transpose(b.slice(g, 1, gi * og, (gi + 1) * og, 1), 0, 1));
    Tensor w =
        ops::convolution(nd, xs, gs, std::nullopt, ConvOptions{dilation, padding, stride, 1, ""});
    for (int64_t d = 0; d < nd; ++d) // the sums past the kernel's extent are not weights
      w = b.slice(w, d + 2, 0, wsizes[d + 2], 1);
    parts.push_back(b.transpose(w, 0, 1));
  }
  return groups == 1 ? contiguous(parts[0]) : b.cat(parts, 0);
}

/// convWeightGrad2d for 1 or 2 spatial dims (1-D as 2-D over a height of one), the convolution
/// form for 3.
Tensor convWeightGrad(B &b, int64_t nd, const Tensor &x, const Tensor &g, const Shape &wsizes,
                      const Shape &stride, const Shape &padding, const Shape &dilation,
                      int64_t groups) {
  if (nd == 3)
    return convWeightGradByConv(b, nd, x, g, wsizes, stride, padding, dilation, groups);
  if (nd == 2)
    return convWeightGrad2d(b, x, g, wsizes, stride, padding, dilation, groups);
  Shape ws2{wsizes[0], wsizes[1], 1, wsizes[2]};
  Tensor w = convWeightGrad2d(b, b.unsqueeze(x, 2), b.unsqueeze(g, 2), ws2, {1, stride[0]},
                              {0, padding[0]}, {1, dilation[0]}, groups);
  return b.reshape(w, wsizes);
}

/// A convolution's bias gradient: g summed over the batch and the spatial dims.
Tensor convBiasGrad(B &b, const Tensor &g) {
  Shape dims{0};
  for (int64_t d = 2; d < g.dim(); ++d)
    dims.push_back(d);
  return b.sum(g, DimList(dims), false);
}

/// 3-D average pooling's input gradient: each output's share (its gradient over its window's
/// divisor) spread over its window, which is a transposed convolution with a kernel of ones, one
/// channel at a time.
Tensor avgPool3dBackward(B &b, const Shape &xs, const Tensor &g, const PoolOptions &opts,
                         bool countIncludePad, std::optional<int64_t> divisorOverride) {
  const int64_t nd = 3;
  Shape k = expandTo(opts.kernelSize, nd, 1), s = expandTo(opts.stride, nd, 0),
        p = expandTo(opts.padding, nd, 0);
  for (int64_t d = 0; d < nd; ++d)
    if (s[d] == 0)
      s[d] = k[d];
  Shape spatial(xs.end() - nd, xs.end()), outSpatial(g.sizes().end() - nd, g.sizes().end());
  Shape planes{-1, 1};
  planes.insert(planes.end(), outSpatial.begin(), outSpatial.end());
  Tensor share = b.reshape(g, planes);
  const double volume = static_cast<double>(k[0] * k[1] * k[2]);
  if (divisorOverride) {
    share = b.scale(share, 1.0 / static_cast<double>(*divisorOverride));
  } else if (countIncludePad) {
    share = b.scale(share, 1.0 / volume);
  } else { // the in-bounds count of each window: the pooled mean of ones times the volume
    Shape one{1, 1};
    one.insert(one.end(), spatial.begin(), spatial.end());
    PoolOptions o = opts;
    o.stride = s;
    Tensor mean = kiln::ops::avgPool(nd, kiln::ops::ones(one, g.dtype()), o, true, std::nullopt);
    share = b.div(share, kiln::ops::mul(mean, number(volume)));
  }
  Shape kernel{1, 1}, outPad(nd);
  kernel.insert(kernel.end(), k.begin(), k.end());
  for (int64_t d = 0; d < nd; ++d)
    outPad[d] = spatial[d] - ((outSpatial[d] - 1) * s[d] - 2 * p[d] + k[d]);
  Tensor gx = ops::convTranspose(nd, share, kiln::ops::ones(kernel, g.dtype()), std::nullopt,
                                 ConvTransposeOptions{s, p, outPad, {1}, 1});
  return b.reshape(gx, xs);
}
/// Average pooling's input gradient with ceil_mode, whose last windows run past the input (and
/// its padding): each output's share, its gradient over the divisor the forward used, spread
/// over its window by a transposed convolution with a kernel of ones and cropped to the input.
/// The divisor comes from pooling ones: a window's count of input elements over the forward's
/// mean of ones (a window with no input element has a mean of 0 and a share of 0).
Tensor avgPoolCeilBackward(B &b, const Shape &xs, const Tensor &g, const PoolOptions &opts,
                           int64_t nd, bool countIncludePad, std::optional<int64_t> divisor) {
  Shape k = expandTo(opts.kernelSize, nd, 1), s = expandTo(opts.stride, nd, 0),
        p = expandTo(opts.padding, nd, 0);
  for (int64_t d = 0; d < nd; ++d)
    if (s[d] == 0)
      s[d] = k[d];
  Shape spatial(xs.end() - nd, xs.end()), outSpatial(g.sizes().end() - nd, g.sizes().end());
  Shape one{1, 1};
  one.insert(one.end(), spatial.begin(), spatial.end());
  Tensor ones = kiln::ops::ones(one, g.dtype());
  Tensor count = kiln::ops::avgPool(nd, ones, opts, true, int64_t{1});
  Tensor mean = kiln::ops::avgPool(nd, ones, opts, countIncludePad, divisor);
  Tensor perShare = kiln::ops::div(
      mean, kiln::ops::maximum(count, kiln::ops::ones(count.sizes(), count.dtype())));
  Shape planes{-1, 1};
  planes.insert(planes.end(), outSpatial.begin(), outSpatial.end());
  Tensor share = b.mul(b.reshape(g, planes), perShare);
  Shape kernel{1, 1}, outPad(nd, 0);
  kernel.insert(kernel.end(), k.begin(), k.end());
  for (int64_t d = 0; d < nd; ++d) // windows that stop short of the input's end
    outPad[d] = std::max<int64_t>(0, spatial[d] - ((outSpatial[d] - 1) * s[d] - 2 * p[d] + k[d]));
  Tensor gx = ops::convTranspose(nd, share, kiln::ops::ones(kernel, g.dtype()), std::nullopt,
                                 ConvTransposeOptions{s, p, outPad, {1}, 1});
  for (int64_t d = 0; d < nd; ++d) // the part past the input lay in the padding: dropped
    gx = b.slice(gx, 2 + d, 0, spatial[d], 1);
  return b.reshape(gx, xs);
}
} // namespace

Tensor convolution(int64_t spatialDims, const Tensor &input_, const Tensor &weight_,
                   const std::optional<Tensor> &bias_, const ConvOptions &opts) {
  const Tensor input = autocast::lower(input_);
  const Tensor weight = autocast::lower(weight_);
  const std::optional<Tensor> bias = autocast::lower(bias_);
  const Tensor *pb = bias ? &*bias : nullptr;
  if (!anyRequiresGrad({&input, &weight, pb}))
    return kiln::ops::convolution(spatialDims, input, weight, bias, opts);
  const int64_t nd = spatialDims;
  Shape stride = expandTo(opts.stride, nd, 1), dilation = expandTo(opts.dilation, nd, 1);
  Shape padding = expandTo(opts.padding, nd, 0);
  if (!opts.paddingMode.empty()) {
    // 'same' may pad one more element after than before: pad the input explicitly then.
    padding.assign(nd, 0);
    if (opts.paddingMode == "same") {
      Shape widths;
      bool symmetric = true;
      for (int64_t d = nd - 1; d >= 0; --d) {
        int64_t total = dilation[d] * (weight.size(d + 2) - 1);
        widths.push_back(total / 2);
        widths.push_back(total - total / 2);
        symmetric = symmetric && total % 2 == 0;
      }
      if (!symmetric) {
        ConvOptions o = opts;
        o.paddingMode.clear();
        o.padding = Shape(nd, 0);
        return autograd::ops::convolution(spatialDims, pad(input, widths), weight, bias, o);
      }
      for (int64_t d = 0; d < nd; ++d)
        padding[d] = dilation[d] * (weight.size(d + 2) - 1) / 2;
    }
  }
  ConvOptions explicitOpts = opts;
  explicitOpts.paddingMode.clear();
  explicitOpts.padding = padding;
  Tensor out = kiln::ops::convolution(spatialDims, input, weight, bias, explicitOpts);
  record("ConvolutionBackward0", {&input, &weight, pb}, out, [&](const NodePtr &self) {
    bool needX = self->needsInputGrad(0), needW = self->needsInputGrad(1);
    return [sx = SavedTensor(needW ? input : Tensor()), sw = SavedTensor(needX ? weight : Tensor()),
            xs = input.sizes(), ws = weight.sizes(), nd, stride, padding, dilation,
            groups = opts.groups](B &b, const Node &n, Grads &g) {
      Grads r(3);
      Tensor gout = g[0];
      const bool batched = static_cast<int64_t>(xs.size()) == nd + 2;
      if (!batched)
        gout = b.unsqueeze(gout, 0);
      if (!isGradEnabled() && gout.isCpu()) { // oneDNN's backward kernels, where they run
        const bool needX = n.needsInputGrad(0), needW = n.needsInputGrad(1);
        Tensor x = needW ? sx.unpack(n) : Tensor(), w = needX ? sw.unpack(n) : Tensor();
        if (needW && !batched)
          x = x.unsqueeze(0);
        // Planning needs both operands' sizes: a gradient not asked for saved no operand, so a
        // broadcast scalar of its sizes stands in (no memory).
        auto sized = [&](Shape sizes) { return kiln::ops::zeros({}, gout.dtype()).expand(sizes); };
        Shape batchedXs = xs;
        if (!batched)
          batchedXs.insert(batchedXs.begin(), 1);
        Tensor shapeX = needW ? x : sized(batchedXs), shapeW = needX ? w : sized(ws);
        ConvOptions o{stride, padding, dilation, groups, ""};
        if (auto fast = kiln::ops::convolutionBackward(nd, gout, shapeX, shapeW, o, needX, needW)) {
          if (needX)
            r[0] = batched ? fast->input : fast->input.squeeze({0});
          r[1] = fast->weight;
          if (n.needsInputGrad(2))
            r[2] = convBiasGrad(b, gout);
          return r;
        }
      }
      if (n.needsInputGrad(0)) {
        Tensor w = sw.unpack(n);
        Shape outPad(nd);
        for (int64_t d = 0; d < nd; ++d) {
          int64_t in = xs[xs.size() - nd + d];
          int64_t made = (gout.size(d + 2) - 1) * stride[d] - 2 * padding[d] +
                         dilation[d] * (ws[d + 2] - 1) + 1;
          outPad[d] = in - made;
        }
        ConvTransposeOptions t{stride, padding, outPad, dilation, groups};
        Tensor gx = ops::convTranspose(nd, gout, w, std::nullopt, t);
        r[0] = batched ? gx : b.squeezeDim(gx, 0);
      }
      if (n.needsInputGrad(1)) {
        Tensor x = sx.unpack(n);
        r[1] = convWeightGrad(b, nd, batched ? x : b.unsqueeze(x, 0), gout, ws, stride, padding,
                              dilation, groups);
      }
      if (n.needsInputGrad(2))
        r[2] = convBiasGrad(b, gout);
      return r;
    };
  });
  return out;
}

Tensor convTranspose(int64_t spatialDims, const Tensor &input_, const Tensor &weight_,
                     const std::optional<Tensor> &bias_, const ConvTransposeOptions &opts) {
  const Tensor input = autocast::lower(input_);
  const Tensor weight = autocast::lower(weight_);
  const std::optional<Tensor> bias = autocast::lower(bias_);
  Tensor out = kiln::ops::convTranspose(spatialDims, input, weight, bias, opts);
  const Tensor *pb = bias ? &*bias : nullptr;
  if (!anyRequiresGrad({&input, &weight, pb}))
    return out;
  auto each = [&](const Shape &v) { return v.size() == 1 ? Shape(spatialDims, v[0]) : v; };
  Shape stride = each(opts.stride), padding = each(opts.padding), dilation = each(opts.dilation);
  // conv_transpose(x, w) is the input gradient of conv(., w) at grad_output x, so its input
  // gradient is that convolution and its weight gradient the convolution's, roles swapped.
  record("ConvolutionBackward1", {&input, &weight, pb}, out, [&](const NodePtr &self) {
    bool needX = self->needsInputGrad(0), needW = self->needsInputGrad(1);
    return [sx = SavedTensor(needW ? input : Tensor()), sw = SavedTensor(needX ? weight : Tensor()),
            xs = input.sizes(), ws = weight.sizes(), nd = spatialDims, stride, padding, dilation,
            groups = opts.groups](B &b, const Node &n, Grads &g) {
      Grads r(3);
      const bool batched = static_cast<int64_t>(xs.size()) == nd + 2;
      Tensor gout = batched ? g[0] : b.unsqueeze(g[0], 0);
      // An output_padding of at least the stride (allowed below the dilation) leaves trailing
      // output positions no input element reaches: the convolution of g has `extra` positions
      // there, cut from the input gradient and met by zeros in the weight gradient.
      Shape extra(nd), widths;
      const int64_t lead = batched ? 2 : 1;
      for (int64_t d = 0; d < nd; ++d)
        extra[d] =
            (gout.size(2 + d) + 2 * padding[d] - dilation[d] * (ws[2 + d] - 1) - 1) / stride[d] +
            1 - xs[lead + d];
      for (int64_t d = nd - 1; d >= 0; --d)
        widths.insert(widths.end(), {0, extra[d]});
      if (n.needsInputGrad(0)) {
        Tensor gx = autograd::ops::convolution(nd, gout, sw.unpack(n), std::nullopt,
                                               ConvOptions{stride, padding, dilation, groups, ""});
        for (int64_t d = 0; d < nd; ++d)
          if (extra[d] > 0)
            gx = b.slice(gx, 2 + d, 0, xs[lead + d], 1);
        r[0] = batched ? gx : b.squeezeDim(gx, 0);
      }
      if (n.needsInputGrad(1)) { // the convolution's weight gradient, roles swapped
        Tensor x = sx.unpack(n);
        x = batched ? x : b.unsqueeze(x, 0);
        if (std::any_of(extra.begin(), extra.end(), [](int64_t e) { return e > 0; }))
          x = pad(x, widths, "constant", 0.0);
        r[1] = convWeightGrad(b, nd, gout, x, ws, stride, padding, dilation, groups);
      }
      if (n.needsInputGrad(2))
        r[2] = convBiasGrad(b, gout);
      return r;
    };
  });
  return out;
}

Tensor pad(const Tensor &self, IntList widths, const std::string &mode,
           std::optional<double> value) {
  Tensor out = kiln::ops::pad(self, widths, mode, value);
  if (!anyRequiresGrad({&self}))
    return out;
  KILN_CHECK_KIND(NotImplemented,
                  mode == "constant" ||
                      std::all_of(widths.begin(), widths.end(), [](int64_t w) { return w >= 0; }),
                  "pad: the derivative of mode='{}' with a negative amount is not implemented",
                  mode);
  const char *name = mode == "constant"    ? "ConstantPadNdBackward0"
                     : mode == "reflect"   ? "ReflectionPadBackward0"
                     : mode == "replicate" ? "ReplicationPadBackward0"
                                           : "CircularPadBackward0";
  record(name, {&self}, out, [&](const NodePtr &) {
    return [w = Shape(widths.begin(), widths.end()), xs = self.sizes(),
            mode](B &b, const Node &, Grads &g) { return Grads{rules::pad(b, g[0], xs, w, mode)}; };
  });
  return out;
}

std::pair<Tensor, Tensor> maxPool(int64_t nd, const Tensor &input, const PoolOptions &opts,
                                  bool withIndices) {
  if (!anyRequiresGrad({&input}))
    return kiln::ops::maxPool(nd, input, opts, withIndices);
  if (onDevice({&input})) {
    auto result = kiln::ops::maxPool(nd, input, opts, withIndices);
    recordUnsupportedOnDevice("max_pool", {&input}, result.first);
    return result;
  }
  auto [out, indices] = kiln::ops::maxPool(nd, input, opts, true);
  recordIndexedPool("MaxPool2DWithIndicesBackward0", input, out, indices, nd);
  return {out, withIndices ? indices : Tensor()};
}

Tensor avgPool(int64_t nd, const Tensor &input, const PoolOptions &opts, bool countIncludePad,
               std::optional<int64_t> divisorOverride) {
  Tensor out = kiln::ops::avgPool(nd, input, opts, countIncludePad, divisorOverride);
  if (!anyRequiresGrad({&input}))
    return out;
  if (opts.ceilMode) {
    record("AvgPool2DBackward0", {&input}, out, [&](const NodePtr &) {
      return [xs = input.sizes(), nd, opts, countIncludePad, divisorOverride](B &b, const Node &,
                                                                              Grads &g) {
        return Grads{avgPoolCeilBackward(b, xs, g[0], opts, nd, countIncludePad, divisorOverride)};
      };
    });
    return out;
  }
  if (nd == 3) {
    record("AvgPool3DBackward0", {&input}, out, [&](const NodePtr &) {
      return [xs = input.sizes(), opts, countIncludePad, divisorOverride](B &b, const Node &,
                                                                          Grads &g) {
        return Grads{avgPool3dBackward(b, xs, g[0], opts, countIncludePad, divisorOverride)};
      };
    });
    return out;
  }
  record("AvgPool2DBackward0", {&input}, out, [&](const NodePtr &) {
    return [xs = input.sizes(), nd, opts, countIncludePad, divisorOverride](B &b, const Node &,
                                                                            Grads &g) {
      // As 2-D pooling of a batched input: (N, C, H, W), H = 1 for 1-D pooling.
      const bool batched = static_cast<int64_t>(xs.size()) == nd + 2;
      Shape k = expandTo(opts.kernelSize, nd, 1), s = expandTo(opts.stride, nd, 0),
            p = expandTo(opts.padding, nd, 0);
      for (int64_t d = 0; d < nd; ++d)
        if (s[d] == 0)
          s[d] = k[d];
      if (nd == 1) {
        k.insert(k.begin(), 1);
        s.insert(s.begin(), 1);
        p.insert(p.begin(), 0);
      }
      const int64_t c = batched ? xs[1] : xs[0], h = nd == 1 ? 1 : xs[xs.size() - 2], w = xs.back(),
                    nb = batched ? xs[0] : 1;
      Tensor gout = b.reshape(g[0], {nb, c, -1});
      // Per output window: its divisor. Valid elements come from unfolding ones (unfold pads
      // with zeros).
      Tensor ones = kiln::ops::ones({1, 1, h, w}, g[0].dtype());
      Tensor valid = kiln::ops::sum(kiln::ops::unfold(ones, k, {1, 1}, p, s), DimList(Shape{1}));
      Tensor divisor;
      if (divisorOverride)
        divisor = kiln::ops::full(valid.sizes(), Scalar(static_cast<double>(*divisorOverride)),
                                  g[0].dtype());
      else if (countIncludePad)
        divisor =
            kiln::ops::full(valid.sizes(), Scalar(static_cast<double>(k[0] * k[1])), g[0].dtype());
      else
        divisor = valid;
      Tensor share = b.div(gout, divisor.reshape({1, 1, -1}));
      const int64_t l = share.size(2);
      Tensor cols = b.reshape(b.expand(b.unsqueeze(share, 2), {nb, c, k[0] * k[1], l}),
                              {nb, c * k[0] * k[1], l});
      Tensor gx = ops::fold(cols, {h, w}, k, {1, 1}, p, s);
      return Grads{b.reshape(gx, xs)};
    };
  });
  return out;
}

Tensor adaptiveAvgPool(int64_t nd, const Tensor &input, const AdaptiveSize &outputSize) {
  Tensor out = kiln::ops::adaptiveAvgPool(nd, input, outputSize);
  if (!anyRequiresGrad({&input}))
    return out;
  // Adaptive average pooling is a product with a fixed averaging matrix along each spatial dim
  // (y = A_h x A_w^T in 2-D).
  auto averaging = [&](int64_t in, int64_t outSize) {
    Tensor a = kiln::ops::zeros({outSize, in}, input.dtype());
    for (int64_t i = 0; i < outSize; ++i) {
      int64_t start = (i * in) / outSize, end = ((i + 1) * in + outSize - 1) / outSize;
      a.select(0, i).slice(0, start, end).fill_(Scalar(1.0 / static_cast<double>(end - start)));
    }
    return a;
  };
  std::vector<Tensor> mats;
  for (int64_t d = 0; d < nd; ++d)
    mats.push_back(averaging(input.size(input.dim() - nd + d), out.size(out.dim() - nd + d)));
  record("AdaptiveAvgPool2DBackward0", {&input}, out, [&](const NodePtr &) {
    return [mats, nd](B &b, const Node &, Grads &g) {
      Tensor gx = g[0];
      const int64_t rank = static_cast<int64_t>(b.sizes(gx).size());
      for (int64_t d = 0; d < nd; ++d) { // (..., out) @ (out, in) along each spatial dim
        const int64_t dim = rank - nd + d;
        gx = b.transpose(b.matmul(b.transpose(gx, dim, -1), mats[d]), dim, -1);
      }
      return Grads{gx};
    };
  });
  return out;
}

Tensor batchNorm(const Tensor &input, const Tensor &weight, const Tensor &bias,
                 const Tensor &runningMean, const Tensor &runningVar, bool training,
                 double momentum, double eps) {
  Tensor out =
      kiln::ops::batchNorm(input, weight, bias, runningMean, runningVar, training, momentum, eps);
  const bool batchStats = training || !runningMean.defined() || !runningVar.defined();
  record("NativeBatchNormBackward0", {&input, &weight, &bias}, out, [&](const NodePtr &) {
    // the affine parameters may be wider than the input (float32 under bfloat16 autocast):
    // their gradients come back in their own dtype
    const DType wdt = weight.defined() ? weight.dtype() : input.dtype();
    const DType bdt = bias.defined() ? bias.dtype() : input.dtype();
    return [sx = SavedTensor(input), sw = SavedTensor(weight),
            rm = batchStats ? Tensor() : runningMean.clone(),
            rv = batchStats ? Tensor() : runningVar.clone(), eps, wdt,
            bdt](B &b, const Node &n, Grads &g) {
      Tensor x = sx.unpack(n);
      if (!isGradEnabled() && x.isCpu() && g[0].isCpu()) { // one fused pass per channel
        Tensor w = sw.defined() ? sw.unpack(n) : Tensor();
        auto r = kiln::ops::batchNormBackward(g[0], x, w, rm, rv, eps, n.needsInputGrad(0),
                                              n.needsInputGrad(1), n.needsInputGrad(2));
        return Grads{r.input, r.weight.defined() ? r.weight.to(wdt) : r.weight,
                     r.bias.defined() ? r.bias.to(bdt) : r.bias};
      }
      const int64_t rank = x.dim(), c = x.size(1);
      Shape dims = allButChannel(rank), chan(rank, 1);
      chan[1] = c;
      DimList dl(dims);
      double count = static_cast<double>(x.numel()) / static_cast<double>(c);
      Tensor w = sw.defined() ? b.reshape(sw.unpack(n), chan) : Tensor();
      Tensor mean, rstd;
      if (rm.defined()) {
        mean = rm.to(x.dtype()).reshape(chan);
        rstd = kiln::ops::rsqrt(kiln::ops::add(rv.to(x.dtype()), Tensor::wrapScalar(Scalar(eps))))
                   .reshape(chan);
      } else {
        mean = b.scale(b.sum(x, dl, true), 1.0 / count);
        Tensor centered = b.sub(x, mean);
        Tensor var = b.scale(b.sum(b.mul(centered, centered), dl, true), 1.0 / count);
        rstd = b.powScalar(b.addScalar(var, eps), -0.5);
      }
      Tensor xhat = b.mul(b.sub(x, mean), rstd);
      Grads r(3);
      Tensor gxhat = w.defined() ? b.mul(g[0], w) : g[0];
      if (n.needsInputGrad(0)) {
        if (rm.defined()) {
          r[0] = b.mul(gxhat, rstd); // running statistics are constants
        } else {
          Tensor m1 = b.scale(b.sum(gxhat, dl, true), 1.0 / count);
          Tensor m2 = b.scale(b.sum(b.mul(gxhat, xhat), dl, true), 1.0 / count);
          r[0] = b.mul(rstd, b.sub(b.sub(gxhat, m1), b.mul(xhat, m2)));
        }
      }
      if (n.needsInputGrad(1))
        r[1] = b.cast(b.sum(b.mul(g[0], xhat), dl, false), wdt);
      if (n.needsInputGrad(2))
        r[2] = b.cast(b.sum(g[0], dl, false), bdt);
      return r;
    };
  });
  return out;
}

Tensor unfold(const Tensor &input, IntList kernelSize, IntList dilation, IntList padding,
              IntList stride) {
  Tensor out = kiln::ops::unfold(input, kernelSize, dilation, padding, stride);
  record("Im2ColBackward0", {&input}, out, [&](const NodePtr &) {
    Shape spatial(input.sizes().end() - 2, input.sizes().end());
    return [spatial, k = Shape(kernelSize.begin(), kernelSize.end()),
            d = Shape(dilation.begin(), dilation.end()), p = Shape(padding.begin(), padding.end()),
            s = Shape(stride.begin(), stride.end())](B &, const Node &, Grads &g) {
      return Grads{ops::fold(g[0], spatial, k, d, p, s)}; // fold is unfold's adjoint
    };
  });
  return out;
}

Tensor fold(const Tensor &input, IntList outputSize, IntList kernelSize, IntList dilation,
            IntList padding, IntList stride) {
  Tensor out = kiln::ops::fold(input, outputSize, kernelSize, dilation, padding, stride);
  record("Col2ImBackward0", {&input}, out, [&](const NodePtr &) {
    return [k = Shape(kernelSize.begin(), kernelSize.end()),
            d = Shape(dilation.begin(), dilation.end()), p = Shape(padding.begin(), padding.end()),
            s = Shape(stride.begin(), stride.end())](B &, const Node &, Grads &g) {
      return Grads{ops::unfold(g[0], k, d, p, s)};
    };
  });
  return out;
}

} // namespace kiln::autograd::ops

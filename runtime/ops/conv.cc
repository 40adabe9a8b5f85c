// Forward convolution: torch's argument checks, then im2col + GEMM per (image, group).
#include "runtime/ops/conv.h"
#include "runtime/device_ops.h"

#include "runtime/error.h"
#include "runtime/onednn.h"
#include "runtime/ops/conv_impl.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/linalg_impl.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/shape_ops.h"

#include <algorithm>
#include <fmt/ranges.h>
#include <vector>

namespace kiln::ops {

using namespace detail;

namespace {

/// The resolved geometry of one forward convolution.
struct ConvPlan {
  ConvGeometry geom; // per group: channels = in_channels / groups
  int64_t batch = 0;
  int64_t groups = 1;
  int64_t outPerGroup = 0;
  Shape outShape;            // [N, O, *spatial]
  Shape padBefore, padAfter; // per spatial dim
};

void checkInputRank(const char *op, int64_t nd, const Tensor &input, const Tensor &weight) {
  KILN_CHECK(input.dim() == nd + 1 || input.dim() == nd + 2,
             "Expected {}D (unbatched) or {}D (batched) input to {}, but got input of size: {}",
             nd + 1, nd + 2, op, input.shapeStr());
  KILN_CHECK(weight.dim() == nd + 2,
             "{}: expected weight to be {}-D ([out_channels, in_channels / groups, *kernel]), "
             "but got weight of size {}",
             op, nd + 2, weight.shapeStr());
}

void checkDTypes(const char *op, const Tensor &input, const Tensor &weight,
                 const std::optional<Tensor> &bias) {
  KILN_CHECK(input.dtype() == weight.dtype(),
             "{}: expected input and weight to have the same dtype, but got input {} and weight "
             "{}",
             op, dtypeName(input.dtype()), dtypeName(weight.dtype()));
  KILN_CHECK(!bias || bias->dtype() == input.dtype(),
             "{}: Input type ({}) and bias type ({}) should be the same", op,
             dtypeName(input.dtype()), dtypeName(bias->dtype()));
  if (input.dtype() == DType::Bool)
    notImplementedFor(op, input.dtype());
}

void checkWeight(const char *op, const Tensor &x, const Tensor &weight,
                 const std::optional<Tensor> &bias, int64_t groups) {
  KILN_CHECK(groups > 0, "{}: non-positive groups is not supported", op);
  int64_t o = weight.size(0);
  KILN_CHECK(o >= 1,
             "{}: Given groups={}, expected weight to be at least 1 at dimension 0, but got "
             "weight of size {} instead",
             op, groups, weight.shapeStr());
  KILN_CHECK(o % groups == 0,
             "{}: Given groups={}, expected weight to be divisible by {} at dimension 0, but got "
             "weight of size {} instead",
             op, groups, groups, weight.shapeStr());
  KILN_CHECK(x.size(1) == weight.size(1) * groups,
             "{}: Given groups={}, weight of size {}, expected input{} to have {} channels, but "
             "got {} channels instead",
             op, groups, weight.shapeStr(), x.shapeStr(), weight.size(1) * groups, x.size(1));
  KILN_CHECK(!bias || (bias->dim() == 1 && bias->size(0) == o),
             "{}: Given weight of size {}, expected bias to be 1-dimensional with {} elements, "
             "but got bias of size {} instead",
             op, weight.shapeStr(), o, bias->shapeStr());
}

/// Resolves padding (explicit, 'same' or 'valid') into per-side amounts.
void resolvePadding(const char *op, int64_t nd, const Tensor &weight, const ConvOptions &opts,
                    const Shape &stride, const Shape &dilation, Shape &before, Shape &after) {
  if (opts.paddingMode.empty()) {
    before = after = expandParam(op, "padding", opts.padding, nd);
    for (int64_t p : before)
      KILN_CHECK(p >= 0, "{}: negative padding is not supported (got padding={})", op,
                 shapeToString(before));
    return;
  }
  before.assign(nd, 0);
  after.assign(nd, 0);
  if (opts.paddingMode == "valid")
    return;
  KILN_CHECK_KIND(Value, opts.paddingMode == "same",
                  "{}: Invalid padding string: '{}' (expected 'same' or 'valid')", op,
                  opts.paddingMode);
  for (int64_t s : stride)
    KILN_CHECK(s == 1, "{}: padding='same' is not supported for strided convolutions", op);
  // An odd total puts the extra element after, like torch.
  for (int64_t d = 0; d < nd; ++d) {
    int64_t total = dilation[d] * (weight.size(d + 2) - 1);
    before[d] = total / 2;
    after[d] = total - before[d];
  }
}

ConvPlan planConv(const char *op, int64_t nd, const Tensor &x, const Tensor &weight,
                  const std::optional<Tensor> &bias, const ConvOptions &opts) {
  Shape stride = expandParam(op, "stride", opts.stride, nd);
  Shape dilation = expandParam(op, "dilation", opts.dilation, nd);
  for (int64_t s : stride)
    KILN_CHECK(s > 0, "{}: non-positive stride is not supported (got stride={})", op,
               shapeToString(stride));
  for (int64_t d : dilation)
    KILN_CHECK(d > 0, "{}: dilation should be greater than zero (got dilation={})", op,
               shapeToString(dilation));
  // torch's dilated CPU kernel covers the floating types and int64 only.
  bool dilated = std::any_of(dilation.begin(), dilation.end(), [](int64_t d) { return d > 1; });
  if (dilated && !isFloating(x.dtype()) && x.dtype() != DType::Int64)
    notImplementedFor(fmt::format("{} with dilation", op).c_str(), x.dtype());
  Shape before, after;
  resolvePadding(op, nd, weight, opts, stride, dilation, before, after);
  checkWeight(op, x, weight, bias, opts.groups);
  ConvPlan p;
  p.batch = x.size(0);
  p.groups = opts.groups;
  p.outPerGroup = weight.size(0) / opts.groups;
  p.geom.channels = weight.size(1);
  Shape padded(nd), kernel(nd), spatialOut(nd);
  for (int64_t d = 0; d < nd; ++d) {
    padded[d] = x.size(d + 2) + before[d] + after[d];
    kernel[d] = dilation[d] * (weight.size(d + 2) - 1) + 1;
  }
  for (int64_t d = 0; d < nd; ++d)
    KILN_CHECK(padded[d] >= kernel[d],
               "{}: Calculated padded input size per channel: {}. Kernel size: {}. Kernel size "
               "can't be greater than actual input size",
               op, spatialStr(padded), spatialStr(kernel));
  p.outShape = {p.batch, weight.size(0)};
  for (int64_t d = 0; d < nd; ++d) {
    int64_t k = weight.size(d + 2),
            o = windowOutSize(x.size(d + 2), before[d] + after[d], k, stride[d], dilation[d]);
    p.outShape.push_back(o);
    p.geom.in[3 - nd + d] = x.size(d + 2);
    p.geom.out[3 - nd + d] = o;
    kernel[d] = k;
  }
  setWindow(p.geom, kernel, stride, before, dilation);
  p.padBefore = before;
  p.padAfter = after;
  return p;
}

template <typename T>
void convKernel(const ConvPlan &p, const T *x, const T *w, const T *bias, T *out) {
  const ConvGeometry &g = p.geom;
  const int64_t og = p.outPerGroup, kc = g.colRows(), l = g.outVolume(), ow = g.out[2];
  const int64_t imageSize = g.channels * g.inVolume(), chunk = linesPerChunk(g, sizeof(T));
  forEachGemm(p.batch * p.groups, og * l * std::max<int64_t>(1, kc), [&](int64_t task) {
    int64_t gi = task % p.groups;
    const T *image = x + task * imageSize;
    const T *wg = w + gi * og * kc;
    T *o = out + task * og * l;
    MatRef<T> wm{wg, kc, 1};
    if (g.isPointwise()) {
      gemm<T>(og, l, kc, T(1), wm, MatRef<T>{image, l, 1}, T(0), o, l);
    } else {
      std::vector<T> col(kc * chunk * ow);
      for (int64_t line0 = 0; line0 < g.outLines(); line0 += chunk) {
        int64_t line1 = std::min(g.outLines(), line0 + chunk), cols = (line1 - line0) * ow;
        im2col(g, image, col.data(), line0, line1);
        gemm<T>(og, cols, kc, T(1), wm, MatRef<T>{col.data(), cols, 1}, T(0), o + line0 * ow, l);
      }
    }
    if (bias)
      for (int64_t c = 0; c < og; ++c) {
        T b = bias[gi * og + c];
        for (int64_t i = 0; i < l; ++i)
          o[c * l + i] = static_cast<T>(o[c * l + i] + b);
      }
  });
}

/// The geometry oneDNN's convolution takes, from a plan of x [N, C, *spatial].
onednn::ConvShape planShape(const ConvPlan &plan) {
  const int64_t nd = static_cast<int64_t>(plan.outShape.size()) - 2;
  return onednnShape(plan.geom, nd, plan.batch, plan.groups, plan.geom.channels * plan.groups,
                     plan.outShape[1], plan.padAfter);
}

/// Whether the forward convolution of `plan` in `dt` runs faster on oneDNN than on kiln's own
/// kernels, as measured per layer kind (bench/nn_ops.py's conv rows, 1 thread): oneDNN's blocked
/// kernels win on windows (the 7x7 stem 2x, strided and deep 3x3s 10-20%) despite the reorders,
/// and on every bfloat16 convolution (kiln's kernels compute on float32 copies: a bfloat16 1x1
/// is 2-3x faster there, a depthwise 3x3 up to 2.8x). float32 1x1 convolutions are one GEMM on
/// the input already, where the reorders cost more than they save; float32 depthwise ones are
/// faster on conv_depthwise.cc's kernel except strided ones with small output planes (576x14x14
/// stride 2: 0.265 ms there, 0.052 ms on oneDNN; 96x112x112 stride 2: 0.745 vs 1.122).
bool preferOnednn(const ConvPlan &plan, DType dt) {
  if (isReducedFloat(dt))
    return true;
  if (plan.geom.channels == 1 && plan.groups > 1) { // depthwise
    bool strided = plan.geom.stride != std::array<int64_t, 3>{1, 1, 1};
    return strided && plan.geom.outVolume() <= 14 * 14;
  }
  return plan.geom.kernelVolume() > 1;
}

/// The convolution on oneDNN in x's own dtype (float32, or bfloat16 computed natively), or
/// nothing when oneDNN declines it.
std::optional<Tensor> onednnConvolution(const ConvPlan &plan, const Tensor &x, const Tensor &weight,
                                        const std::optional<Tensor> &bias) {
  if (x.numel() == 0 || weight.numel() == 0)
    return std::nullopt;
  DType dt = x.dtype();
  Tensor xc = x.contiguous(), wc = weight.to(dt).contiguous();
  Tensor bc = bias ? bias->to(dt).contiguous() : Tensor();
  Tensor out = Tensor::empty(plan.outShape, dt, x.device());
  if (!onednn::convolution(dt, planShape(plan), xc.rawData(), wc.rawData(),
                           bias ? bc.rawData() : nullptr, out.rawData()))
    return std::nullopt;
  return out;
}

} // namespace

onednn::ConvShape detail::onednnShape(const ConvGeometry &g, int64_t nd, int64_t batch,
                                      int64_t groups, int64_t inChannels, int64_t outChannels,
                                      IntList padAfter) {
  onednn::ConvShape s;
  s.batch = batch;
  s.channels = inChannels;
  s.outChannels = outChannels;
  s.groups = groups;
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(3 - nd + d); // 1-d and 2-d are right-aligned in g
    s.in.push_back(g.in[i]);
    s.out.push_back(g.out[i]);
    s.kernel.push_back(g.kernel[i]);
    s.stride.push_back(g.stride[i]);
    s.dilation.push_back(g.dilation[i]);
    s.padBefore.push_back(g.padBefore[i]);
  }
  s.padAfter.assign(padAfter.begin(), padAfter.end());
  return s;
}

namespace {

const char *convName(int64_t nd) { return nd == 1 ? "conv1d" : nd == 2 ? "conv2d" : "conv3d"; }

} // namespace

Tensor convolution(int64_t nd, const Tensor &input, const Tensor &weight,
                   const std::optional<Tensor> &bias, const ConvOptions &opts) {
  KILN_CHECK(nd >= 1 && nd <= 3, "convolution: expected 1 to 3 spatial dims, got {}", nd);
  const char *op = convName(nd);
  checkInputRank(op, nd, input, weight);
  checkDTypes(op, input, weight, bias);
  if (onDevice({&input, &weight, bias ? &*bias : nullptr})) {
    KILN_CHECK_KIND(NotImplemented, nd == 2 && opts.paddingMode.empty(),
                    "kiln: {}{} has no CUDA implementation yet", op,
                    opts.paddingMode.empty() ? "" : " with padding='" + opts.paddingMode + "'");
    std::string attrs = fmt::format("stride = [{}], padding = [{}], dilation = [{}], groups = {}",
                                    fmt::join(opts.stride, ", "), fmt::join(opts.padding, ", "),
                                    fmt::join(opts.dilation, ", "), opts.groups);
    return bias ? deviceOp("conv2d", {input, weight, *bias}, attrs)
                : deviceOp("conv2d", {input, weight}, attrs);
  }
  bool batched = input.dim() == nd + 2;
  Tensor x = batched ? input : input.unsqueeze(0);
  ConvPlan plan = planConv(op, nd, x, weight, bias, opts);
  DType dt = input.dtype(), compute = computeDType(dt);
  if (onednn::convolutionAvailable(dt) && preferOnednn(plan, dt)) {
    if (std::optional<Tensor> out = onednnConvolution(plan, x, weight, bias))
      return batched ? *out : out->squeeze({0});
  }
  bool isDepthwise = plan.geom.channels == 1 && plan.groups > 1;
  Tensor xc = x.to(compute).contiguous(), wc = weight.to(compute).contiguous();
  Tensor bc = bias ? bias->to(compute).contiguous() : Tensor();
  Tensor out = Tensor::empty(plan.outShape, compute, input.device());
  auto depthwise = [&]<typename T>() {
    convDepthwise<T>(plan.geom, plan.batch, plan.groups, plan.outPerGroup, xc.data<T>(),
                     wc.data<T>(), bias ? bc.data<T>() : nullptr, out.data<T>());
  };
  if (isDepthwise && compute == DType::Float32) {
    depthwise.template operator()<float>();
  } else if (isDepthwise && compute == DType::Float64) {
    depthwise.template operator()<double>();
  } else if (compute == DType::Float32 && convDirectApplies(plan.geom, plan.outPerGroup)) {
    convDirect(plan.geom, plan.batch, plan.groups, plan.outPerGroup, xc.data<float>(),
               wc.data<float>(), bias ? bc.data<float>() : nullptr, out.data<float>());
  } else {
    dispatchCompute(compute, [&]<typename T>() {
      if constexpr (!std::is_same_v<T, bool>)
        convKernel<T>(plan, xc.data<T>(), wc.data<T>(), bias ? bc.data<T>() : nullptr,
                      out.data<T>());
    });
  }
  if (compute != dt)
    out = out.to(dt);
  return batched ? out : out.squeeze({0});
}

std::optional<ConvGrads> convolutionBackward(int64_t nd, const Tensor &grad, const Tensor &input,
                                             const Tensor &weight, const ConvOptions &opts,
                                             bool needInput, bool needWeight) {
  DType dt = grad.dtype();
  if (!onednn::convolutionAvailable(dt) || !grad.isCpu() || input.dtype() != dt ||
      weight.dtype() != dt || input.dim() != nd + 2 || grad.numel() == 0 || input.numel() == 0 ||
      weight.numel() == 0)
    return std::nullopt;
  ConvPlan plan = planConv(convName(nd), nd, input, weight, std::nullopt, opts);
  // The measurement behind the forward's choice holds here too: a float32 1x1 window is GEMMs
  // already.
  if ((plan.geom.kernelVolume() == 1 && !isReducedFloat(dt)) || grad.sizes() != plan.outShape)
    return std::nullopt;
  onednn::ConvShape s = planShape(plan);
  Tensor g = grad.contiguous();
  ConvGrads r;
  if (needInput) {
    Tensor w = weight.contiguous();
    r.input = Tensor::empty(input.sizes(), dt, input.device());
    if (!onednn::convolutionBackwardData(dt, s, g.rawData(), w.rawData(), r.input.rawData()))
      return std::nullopt;
  }
  if (needWeight) {
    Tensor x = input.contiguous();
    r.weight = Tensor::empty(weight.sizes(), dt, weight.device());
    if (!onednn::convolutionBackwardWeights(dt, s, x.rawData(), g.rawData(), r.weight.rawData()))
      return std::nullopt;
  }
  return r;
}

Tensor convolutionWeightGrad(int64_t nd, const Tensor &grad, const Tensor &input,
                             IntList weightSizes, const ConvOptions &opts) {
  KILN_CHECK(opts.paddingMode.empty(),
             "convolution_weight_grad: expected explicit padding, got padding='{}'",
             opts.paddingMode);
  KILN_CHECK(nd >= 1 && nd <= 3 && input.dim() == nd + 2 && grad.dim() == nd + 2,
             "convolution_weight_grad: expected a batched 1-d, 2-d or 3-d input and gradient, got "
             "{} and {}",
             input.shapeStr(), grad.shapeStr());
  Shape ws(weightSizes.begin(), weightSizes.end());
  Tensor x = input.to(grad.dtype());
  Tensor shaped = zeros({}, grad.dtype()).expand(ws); // sizes only: the weights are not read
  if (auto r = convolutionBackward(nd, grad, x, shaped, opts, false, true))
    return r->weight;
  if (nd == 3) { // no im2col in 3-d: a convolution of x by g, batch and channel dims swapped
    const int64_t groups = opts.groups, cg = x.size(1) / groups, og = grad.size(1) / groups;
    std::vector<Tensor> parts;
    for (int64_t gi = 0; gi < groups; ++gi) {
      Tensor xs = x.narrow(1, gi * cg, cg).transpose(0, 1).contiguous();
      Tensor gs = grad.narrow(1, gi * og, og).transpose(0, 1).contiguous();
      Tensor w = convolution(3, xs, gs, std::nullopt,
                             ConvOptions{opts.dilation, opts.padding, opts.stride, 1, ""});
      for (int64_t d = 0; d < 3; ++d) // the sums past the kernel's extent are not weights
        w = w.narrow(d + 2, 0, ws[d + 2]);
      parts.push_back(w.transpose(0, 1).contiguous());
    }
    return groups == 1 ? parts[0] : cat(parts, 0);
  }
  if (nd == 1) { // as 2-d over a height of one
    ConvOptions o = opts;
    auto widen = [](const Shape &v, int64_t fill) {
      return Shape{fill, v.empty() ? fill : v.back()};
    };
    o.stride = widen(opts.stride, 1);
    o.padding = widen(opts.padding, 0);
    o.dilation = widen(opts.dilation, 1);
    Tensor w = convolutionWeightGrad(2, grad.unsqueeze(2), x.unsqueeze(2),
                                     Shape{ws[0], ws[1], 1, ws[2]}, o);
    return w.reshape(ws);
  }
  ConvPlan plan = planConv("conv2d", 2, x, shaped, std::nullopt, opts);
  const int64_t n = x.size(0), groups = plan.groups;
  Tensor cols =
      unfold(x, {ws[2], ws[3]}, {plan.geom.dilation[1], plan.geom.dilation[2]},
             {plan.padBefore[0], plan.padBefore[1]}, {plan.geom.stride[1], plan.geom.stride[2]});
  const int64_t l = cols.size(2), ck = cols.size(1) / groups;
  Tensor c = cols.reshape({n, groups, ck, l});
  Tensor g = grad.reshape({n, groups, ws[0] / groups, l});
  return sum(matmul(g, c.transpose(-1, -2)), DimList(Shape{0}), false).reshape(ws);
}

} // namespace kiln::ops

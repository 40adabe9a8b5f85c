// Transposed convolution: the adjoint of a forward convolution, so oneDNN's backward-data pass
// of that convolution where it runs; otherwise per (image, group), col = W^T @ x followed by
// col2im into the output, the adjoint of the forward convolution's im2col + GEMM.
#include "runtime/error.h"
#include "runtime/onednn.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/conv_impl.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/linalg_impl.h"

#include <vector>

namespace kiln::ops {

using namespace detail;

namespace {

struct TransposePlan {
  ConvGeometry geom; // forward geometry from the output (geom.in) to the input (geom.out)
  int64_t batch = 0;
  int64_t groups = 1;
  int64_t inPerGroup = 0;
  Shape outShape;
};

void checkTransposeArgs(const char *op, int64_t nd, const Tensor &x, const Tensor &weight,
                        const std::optional<Tensor> &bias, int64_t groups) {
  KILN_CHECK(weight.dim() == nd + 2,
             "{}: expected weight to be {}-D ([in_channels, out_channels / groups, *kernel]), "
             "but got weight of size {}",
             op, nd + 2, weight.shapeStr());
  KILN_CHECK(x.dtype() == weight.dtype(),
             "{}: expected input and weight to have the same dtype, but got input {} and weight "
             "{}",
             op, dtypeName(x.dtype()), dtypeName(weight.dtype()));
  KILN_CHECK(!bias || bias->dtype() == x.dtype(),
             "{}: Input type ({}) and bias type ({}) should be the same", op, dtypeName(x.dtype()),
             dtypeName(bias->dtype()));
  // torch's CPU kernel covers the floating types and int64 only.
  if (!isFloating(x.dtype()) && x.dtype() != DType::Int64)
    notImplementedFor(op, x.dtype());
  KILN_CHECK(groups > 0, "{}: non-positive groups is not supported", op);
  KILN_CHECK(weight.size(0) % groups == 0,
             "{}: Given groups={}, expected weight to be divisible by {} at dimension 0, but got "
             "weight of size {} instead",
             op, groups, groups, weight.shapeStr());
  KILN_CHECK(x.size(1) == weight.size(0),
             "{}: Given transposed=1, weight of size {}, expected input{} to have {} channels, "
             "but got {} channels instead",
             op, weight.shapeStr(), x.shapeStr(), weight.size(0), x.size(1));
  int64_t outChannels = weight.size(1) * groups;
  KILN_CHECK(!bias || (bias->dim() == 1 && bias->size(0) == outChannels),
             "{}: Given transposed=1, weight of size {}, expected bias to be 1-dimensional with {} "
             "elements, but got bias of size {} instead",
             op, weight.shapeStr(), outChannels, bias->shapeStr());
}

TransposePlan planTranspose(const char *op, int64_t nd, const Tensor &x, const Tensor &weight,
                            const ConvTransposeOptions &opts) {
  Shape stride = expandParam(op, "stride", opts.stride, nd);
  Shape padding = expandParam(op, "padding", opts.padding, nd);
  Shape outPad = expandParam(op, "output_padding", opts.outputPadding, nd);
  Shape dilation = expandParam(op, "dilation", opts.dilation, nd);
  TransposePlan p;
  p.batch = x.size(0);
  p.groups = opts.groups;
  p.inPerGroup = weight.size(0) / opts.groups;
  p.geom.channels = weight.size(1);
  p.outShape = {p.batch, weight.size(1) * opts.groups};
  Shape kernel(nd), inSizes(nd);
  for (int64_t d = 0; d < nd; ++d) {
    KILN_CHECK(stride[d] > 0, "{}: non-positive stride is not supported (got stride={})", op,
               shapeToString(stride));
    KILN_CHECK(dilation[d] > 0, "{}: dilation should be greater than zero (got dilation={})", op,
               shapeToString(dilation));
    KILN_CHECK(padding[d] >= 0 && outPad[d] >= 0, "{}: negative padding is not supported", op);
    KILN_CHECK(outPad[d] < stride[d] || outPad[d] < dilation[d],
               "{}: output padding must be smaller than either stride or dilation, but got "
               "output_padding={}, stride={}, dilation={}",
               op, shapeToString(outPad), shapeToString(stride), shapeToString(dilation));
    kernel[d] = weight.size(d + 2);
    inSizes[d] = x.size(d + 2);
  }
  Shape outSizes(nd);
  for (int64_t d = 0; d < nd; ++d)
    outSizes[d] = (inSizes[d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (kernel[d] - 1) +
                  outPad[d] + 1;
  for (int64_t d = 0; d < nd; ++d)
    KILN_CHECK(outSizes[d] > 0,
               "{}: Given input size per channel: {}. Calculated output size per channel: {}. "
               "Output size is too small",
               op, spatialStr(inSizes), spatialStr(outSizes));
  for (int64_t d = 0; d < nd; ++d) {
    p.outShape.push_back(outSizes[d]);
    p.geom.in[3 - nd + d] = outSizes[d];
    p.geom.out[3 - nd + d] = inSizes[d];
  }
  setWindow(p.geom, kernel, stride, padding, dilation);
  return p;
}

template <typename T>
void transposeKernel(const TransposePlan &p, const T *x, const T *w, const T *bias, T *out) {
  const ConvGeometry &g = p.geom;
  const int64_t cin = p.inPerGroup, kc = g.colRows(), lin = g.outVolume(), iw = g.out[2];
  const int64_t lout = g.inVolume(), cout = g.channels, chunk = linesPerChunk(g, sizeof(T));
  forEachGemm(p.batch * p.groups, kc * lin * std::max<int64_t>(1, cin), [&](int64_t task) {
    int64_t gi = task % p.groups;
    const T *image = x + task * cin * lin;
    // weight[gi] is [cin, kc] row-major; the GEMM reads its transpose.
    MatRef<T> wt{w + gi * cin * kc, 1, kc};
    T *o = out + task * cout * lout;
    std::fill(o, o + cout * lout, T(0));
    std::vector<T> col(kc * chunk * iw);
    for (int64_t line0 = 0; line0 < g.outLines(); line0 += chunk) {
      int64_t line1 = std::min(g.outLines(), line0 + chunk), cols = (line1 - line0) * iw;
      gemm<T>(kc, cols, cin, T(1), wt, MatRef<T>{image + line0 * iw, lin, 1}, T(0), col.data(),
              cols);
      col2im(g, col.data(), o, line0, line1);
    }
    if (bias)
      for (int64_t c = 0; c < cout; ++c) {
        T b = bias[gi * cout + c];
        for (int64_t i = 0; i < lout; ++i)
          o[c * lout + i] = static_cast<T>(o[c * lout + i] + b);
      }
  });
}

/// The transposed convolution as oneDNN's backward-data pass of the forward convolution from
/// its output to its input, in x's own dtype; nothing where oneDNN cannot run it (an
/// output_padding beyond the padding would need a negative trailing pad).
std::optional<Tensor> onednnTranspose(const TransposePlan &p, int64_t nd, const Tensor &x,
                                      const Tensor &weight, const std::optional<Tensor> &bias) {
  if (x.numel() == 0 || weight.numel() == 0)
    return std::nullopt;
  const ConvGeometry &g = p.geom;
  Shape padAfter;
  for (int64_t d = 0; d < nd; ++d) {
    const size_t i = static_cast<size_t>(3 - nd + d);
    // The trailing pad that makes the forward convolution's output exactly g.out.
    int64_t after = (g.out[i] - 1) * g.stride[i] + g.dilation[i] * (g.kernel[i] - 1) + 1 - g.in[i] -
                    g.padBefore[i];
    if (after < 0)
      return std::nullopt;
    padAfter.push_back(after);
  }
  onednn::ConvShape s =
      onednnShape(g, nd, p.batch, p.groups, p.outShape[1], weight.size(0), padAfter);
  DType dt = x.dtype();
  Tensor xc = x.contiguous(), wc = weight.to(dt).contiguous();
  Tensor out = Tensor::empty(p.outShape, dt, x.device());
  if (!onednn::convolutionBackwardData(dt, s, xc.rawData(), wc.rawData(), out.rawData()))
    return std::nullopt;
  if (bias) {
    Shape channel(p.outShape.size(), 1);
    channel[1] = p.outShape[1];
    out = add(out, bias->to(dt).reshape(channel));
  }
  return out;
}

const char *transposeName(int64_t nd) {
  return nd == 1 ? "conv_transpose1d" : nd == 2 ? "conv_transpose2d" : "conv_transpose3d";
}

} // namespace

Tensor convTranspose(int64_t nd, const Tensor &input, const Tensor &weight,
                     const std::optional<Tensor> &bias, const ConvTransposeOptions &opts) {
  KILN_CHECK(nd >= 1 && nd <= 3, "conv_transpose: expected 1 to 3 spatial dims, got {}", nd);
  const char *op = transposeName(nd);
  KILN_CHECK(input.dim() == nd + 1 || input.dim() == nd + 2,
             "Expected {}D (unbatched) or {}D (batched) input to {}, but got input of size: {}",
             nd + 1, nd + 2, op, input.shapeStr());
  bool batched = input.dim() == nd + 2;
  Tensor x = batched ? input : input.unsqueeze(0);
  checkTransposeArgs(op, nd, x, weight, bias, opts.groups);
  TransposePlan plan = planTranspose(op, nd, x, weight, opts);
  DType dt = input.dtype(), compute = computeDType(dt);
  // A bias added after oneDNN's rounding would round a bfloat16 result twice.
  if (onednn::convolutionAvailable(dt) && plan.geom.kernelVolume() > 1 &&
      (!bias || dt == DType::Float32)) {
    if (std::optional<Tensor> out = onednnTranspose(plan, nd, x, weight, bias))
      return batched ? *out : out->squeeze({0});
  }
  Tensor xc = x.to(compute).contiguous(), wc = weight.to(compute).contiguous();
  Tensor bc = bias ? bias->to(compute).contiguous() : Tensor();
  Tensor out = Tensor::empty(plan.outShape, compute, input.device());
  dispatchCompute(compute, [&]<typename T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, int64_t>)
      transposeKernel<T>(plan, xc.data<T>(), wc.data<T>(), bias ? bc.data<T>() : nullptr,
                         out.data<T>());
  });
  if (compute != dt)
    out = out.to(dt);
  return batched ? out : out.squeeze({0});
}

} // namespace kiln::ops

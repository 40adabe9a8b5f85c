#pragma once
/// Eager convolutions with PyTorch semantics (F.conv1d/2d/3d, F.conv_transpose1d/2d/3d,
/// F.unfold, F.fold). A forward convolution with a window runs on oneDNN where it is installed
/// (runtime/onednn_conv.cc; float32, and bfloat16 where the CPU has bfloat16 dot products), a
/// depthwise one on conv_depthwise.cc's direct kernel; otherwise float32 stride-1 convolutions
/// run a direct AVX-512 kernel where the CPU has one (conv_direct.cc) and the rest im2col +
/// GEMM, parallel over batch x groups. Inputs may be batched ([N, C, *spatial]) or unbatched
/// ([C, *spatial]); float16/bfloat16 are otherwise computed in float32; integer dtypes are
/// accepted where torch's CPU kernels accept them.

#include "runtime/tensor.h"

#include <optional>
#include <string>

namespace kiln::ops {

/// Options of a forward convolution. Each list holds one value or one per spatial dim.
/// paddingMode "same" or "valid" replaces `padding` (torch's string padding); "" uses it.
struct ConvOptions {
  Shape stride{1};
  Shape padding{0};
  Shape dilation{1};
  int64_t groups = 1;
  std::string paddingMode;
};

/// F.conv1d / conv2d / conv3d for spatialDims = 1, 2, 3.
Tensor convolution(int64_t spatialDims, const Tensor &input, const Tensor &weight,
                   const std::optional<Tensor> &bias, const ConvOptions &opts);

/// A convolution's input and weight gradients (each undefined where not asked for).
struct ConvGrads {
  Tensor input, weight;
};

/// The gradients of convolution(spatialDims, input, weight, ., opts) at `grad` (the output's
/// gradient; batched input [N, C, *spatial]) computed by oneDNN's backward kernels, or nothing
/// where they cannot run (no library, mixed dtypes, a 1x1 window): the caller then composes
/// them from differentiable ops.
std::optional<ConvGrads> convolutionBackward(int64_t spatialDims, const Tensor &grad,
                                             const Tensor &input, const Tensor &weight,
                                             const ConvOptions &opts, bool needInput,
                                             bool needWeight);

/// The weight gradient of convolution(spatialDims, input, weight of weightSizes, ., opts) at
/// `grad`, in grad's dtype: convolutionBackward's where it runs, else im2col columns of the
/// input times the gradient (1 and 2 spatial dims).
Tensor convolutionWeightGrad(int64_t spatialDims, const Tensor &grad, const Tensor &input,
                             IntList weightSizes, const ConvOptions &opts);

/// Options of a transposed convolution (the adjoint of a forward convolution).
struct ConvTransposeOptions {
  Shape stride{1};
  Shape padding{0};
  Shape outputPadding{0};
  Shape dilation{1};
  int64_t groups = 1;
};

/// F.conv_transpose1d / 2d / 3d: weight is [in_channels, out_channels / groups, *kernel].
Tensor convTranspose(int64_t spatialDims, const Tensor &input, const Tensor &weight,
                     const std::optional<Tensor> &bias, const ConvTransposeOptions &opts);

/// F.unfold (im2col): [N, C, H, W] -> [N, C * kH * kW, L] sliding blocks.
Tensor unfold(const Tensor &input, IntList kernelSize, IntList dilation, IntList padding,
              IntList stride);
/// F.fold (col2im, summing overlaps): [N, C * kH * kW, L] -> [N, C, outH, outW].
Tensor fold(const Tensor &input, IntList outputSize, IntList kernelSize, IntList dilation,
            IntList padding, IntList stride);

} // namespace kiln::ops

#pragma once
/// Internal helpers of the convolution ops: window geometry over up to three spatial dims,
/// im2col (image -> column matrix, the GEMM operand of a convolution) and its adjoint col2im
/// (used by transposed convolution and fold), and the argument checks conv, fold and unfold
/// share. Not part of the public op API.

#include "runtime/onednn.h"
#include "runtime/tensor.h"

#include <array>

namespace kiln::ops::detail {

/// A sliding window over a [channels, in[0], in[1], in[2]] image. 1-D and 2-D ops use size-1
/// leading spatial dims, so one kernel serves conv1d, conv2d and conv3d.
struct ConvGeometry {
  int64_t channels = 1;
  std::array<int64_t, 3> in{1, 1, 1};
  std::array<int64_t, 3> out{1, 1, 1};
  std::array<int64_t, 3> kernel{1, 1, 1};
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> padBefore{0, 0, 0};
  std::array<int64_t, 3> dilation{1, 1, 1};

  int64_t kernelVolume() const { return kernel[0] * kernel[1] * kernel[2]; }
  int64_t inVolume() const { return in[0] * in[1] * in[2]; }
  int64_t outVolume() const { return out[0] * out[1] * out[2]; }
  /// Rows of the column matrix: channels x kernel positions.
  int64_t colRows() const { return channels * kernelVolume(); }
  /// Output "lines" (positions of the two outer spatial dims); im2col works on ranges of them.
  int64_t outLines() const { return out[0] * out[1]; }
  /// True when the column matrix is the image itself (1x1 kernel, stride 1, no padding).
  bool isPointwise() const;
};

/// Fills col[colRows, (line1 - line0) * out[2]] with the windows of output lines
/// [line0, line1) of `image` ([channels, in...], contiguous); padding reads as zero.
template <typename T>
void im2col(const ConvGeometry &g, const T *image, T *col, int64_t line0, int64_t line1);

/// The adjoint of im2col: image[...] += col[...] for output lines [line0, line1) (image is
/// [channels, in...], contiguous; entries that fall in the padding are dropped).
template <typename T>
void col2im(const ConvGeometry &g, const T *col, T *image, int64_t line0, int64_t line1);

/// How many output lines to process per im2col chunk so the column buffer stays ~16 MiB.
int64_t linesPerChunk(const ConvGeometry &g, int64_t itemsize);

/// True when convDirect computes this float32 convolution: stride 1 in every dim, at least four
/// output channels per group, not pointwise (that is one GEMM on the input already), an image
/// large enough that most computed positions are outputs, and a CPU with AVX-512F.
bool convDirectApplies(const ConvGeometry &g, int64_t outPerGroup);

/// out[batch, groups * outPerGroup, out...] = the convolution of x [batch, groups * channels,
/// in...] with w [groups * outPerGroup, channels, kernel...] plus bias (nullable), all
/// contiguous float32, for a geometry convDirectApplies accepts (conv_direct.cc).
void convDirect(const ConvGeometry &g, int64_t batch, int64_t groups, int64_t outPerGroup,
                const float *x, const float *w, const float *bias, float *out);

/// The same convolution for one input channel per group (g.channels == 1: depthwise), any
/// stride, padding and dilation, float or double (conv_depthwise.cc).
template <typename T>
void convDepthwise(const ConvGeometry &g, int64_t batch, int64_t groups, int64_t outPerGroup,
                   const T *x, const T *w, const T *bias, T *out);

/// oneDNN's description of the convolution of geometry `g` over its last `nd` spatial dims
/// (batch images, groups, in/out channels in all groups, the trailing pads per dim).
onednn::ConvShape onednnShape(const ConvGeometry &g, int64_t nd, int64_t batch, int64_t groups,
                              int64_t inChannels, int64_t outChannels, IntList padAfter);

/// A per-dim parameter given as one value or one per spatial dim, expanded to `nd` values.
/// Throws torch's "expected stride to be a single integer value or a list of 2 values" error.
Shape expandParam(const char *op, const char *name, IntList v, int64_t nd);

/// Fills g.kernel/stride/dilation/padBefore (right-aligned into the 3 slots) from nd values.
void setWindow(ConvGeometry &g, IntList kernel, IntList stride, IntList padBefore,
               IntList dilation);

/// Output size of a window along one dim: floor((in + pads - dilation * (k - 1) - 1) / s) + 1.
inline int64_t windowOutSize(int64_t in, int64_t padTotal, int64_t k, int64_t stride,
                             int64_t dilation) {
  int64_t num = in + padTotal - dilation * (k - 1) - 1;
  // Floor division: a window larger than the padded input gives <= 0 blocks, never 1.
  return (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
}

/// "[1, 2, 3]" -> "(1 x 2 x 3)", the way torch prints spatial sizes in conv errors.
std::string spatialStr(IntList v);

} // namespace kiln::ops::detail

// Depthwise convolution (one input channel per group: MobileNet's 3x3 blocks, ConvNeXt's 7x7)
// as a direct loop over a zero-padded copy of each plane.
//
// With one input channel per group, im2col + GEMM is a 1 x taps x positions product per plane:
// building the column matrix costs more than the multiply-adds. Here each plane is copied once
// into a zero-padded buffer, split by row and column phase for strided windows (column phase f
// holds padded columns f, f + stride, ...), so that every tap reads a contiguous run: output
// column ow of tap kw reads column phase (kw * dilation) % stride at ow + (kw * dilation) /
// stride, and rows likewise. The rows then flatten (as in conv_direct.cc): each tap is a
// constant offset along one line per depth slice, whose positions in the pitch's extra columns
// are computed and dropped. A chunk of the line
// accumulates every tap in registers before it is stored. Each output is summed in tap order
// starting from the bias, so results do not depend on the thread count.
#include "runtime/ops/conv_impl.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace kiln::ops::detail {

namespace {

constexpr int64_t kChunk = 64; // outputs accumulated in registers across all taps

/// The padded, phase-split layout of one plane and the taps' offsets into it.
struct DepthwisePlan {
  int64_t padded[3];               // Dp; Hc and Wc: the rows and columns of one phase
  int64_t phaseSize;               // Dp * Hc * Wc, plus slack the dropped positions read
  int64_t lineLength;              // outputs per depth slice, outH * Wc (Wc is the row pitch)
  std::vector<int64_t> tapOffsets; // per tap: offset from a slice's first input
};

DepthwisePlan makePlan(const ConvGeometry &g) {
  DepthwisePlan d;
  const int64_t sh = g.stride[1], sw = g.stride[2];
  // Each padded extent holds the input after its leading padding and every window's reach.
  int64_t extent[3];
  for (int i = 0; i < 3; ++i)
    extent[i] = std::max(g.in[i] + g.padBefore[i],
                         (g.out[i] - 1) * g.stride[i] + g.dilation[i] * (g.kernel[i] - 1) + 1);
  d.padded[0] = extent[0];
  d.padded[1] = (extent[1] + sh - 1) / sh;
  d.padded[2] = (extent[2] + sw - 1) / sw;
  d.lineLength = g.out[1] * d.padded[2];
  d.phaseSize = d.padded[0] * d.padded[1] * d.padded[2] + d.padded[2] + kChunk;
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
    for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
      for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
        const int64_t row = kh * g.dilation[1], col = kw * g.dilation[2];
        const int64_t phase = (row % sh) * sw + col % sw;
        d.tapOffsets.push_back(phase * d.phaseSize +
                               (kd * g.dilation[0] * d.padded[1] + row / sh) * d.padded[2] +
                               col / sw);
      }
  return d;
}

/// Copies one [in...] plane into `pad`: zero padding, rows and columns split by phase.
template <typename T>
void padPlane(const ConvGeometry &g, const DepthwisePlan &d, const T *image, T *pad) {
  const int64_t sh = g.stride[1], sw = g.stride[2];
  std::fill(pad, pad + sh * sw * d.phaseSize, T(0));
  for (int64_t z = 0; z < g.in[0]; ++z)
    for (int64_t y = 0; y < g.in[1]; ++y) {
      const T *src = image + (z * g.in[1] + y) * g.in[2];
      const int64_t r = y + g.padBefore[1];
      T *row = pad + (r % sh) * sw * d.phaseSize +
               ((z + g.padBefore[0]) * d.padded[1] + r / sh) * d.padded[2];
      if (sw == 1) {
        std::copy(src, src + g.in[2], row + g.padBefore[2]);
        continue;
      }
      // Phase f holds the padded columns c = f (mod sw), i.e. inputs x = c - padBefore.
      for (int64_t f = 0; f < sw; ++f) {
        int64_t c = g.padBefore[2] + (f - g.padBefore[2] % sw + sw) % sw;
        T *dst = row + f * d.phaseSize + c / sw;
        const int64_t x0 = c - g.padBefore[2], n = (g.in[2] - x0 + sw - 1) / sw;
        if (sw == 2) { // the common stride, as a constant: the strided loads vectorize
          for (int64_t k = 0; k < n; ++k)
            dst[k] = src[x0 + 2 * k];
          continue;
        }
        for (int64_t k = 0; k < n; ++k)
          dst[k] = src[x0 + k * sw];
      }
    }
}

/// out[q] = bias + sum over taps of w[tap] * in[q + tapOffsets[tap]], for q in [0, n). The
/// chunk's accumulators are explicit vectors: written as a scalar loop over the chunk, GCC
/// versions it for aliasing between the accumulators and the input and runs the scalar copy.
template <typename T>
void depthwiseLine(const T *in, const int64_t *offsets, const T *w, int64_t taps, T bias, int64_t n,
                   T *out) {
  typedef T Vec __attribute__((vector_size(32)));
  constexpr int64_t kLanes = sizeof(Vec) / sizeof(T), kVecs = kChunk / kLanes;
  for (int64_t q0 = 0; q0 < n; q0 += kChunk) {
    Vec acc[kVecs];
    for (int64_t j = 0; j < kVecs; ++j)
      acc[j] = Vec{} + bias;
    for (int64_t t = 0; t < taps; ++t) {
      const T *src = in + q0 + offsets[t];
      const T wt = w[t];
      for (int64_t j = 0; j < kVecs; ++j) {
        Vec v;
        std::memcpy(&v, src + j * kLanes, sizeof(Vec));
        acc[j] += wt * v;
      }
    }
    std::memcpy(out + q0, acc, std::min(kChunk, n - q0) * sizeof(T));
  }
}

template <typename T>
void depthwisePlane(const ConvGeometry &g, const DepthwisePlan &d, const T *pad, const T *w, T bias,
                    T *line, T *out) {
  const int64_t outW = g.out[2], pitch = d.padded[2];
  for (int64_t od = 0; od < g.out[0]; ++od) {
    const T *slice = pad + od * g.stride[0] * d.padded[1] * pitch;
    depthwiseLine(slice, d.tapOffsets.data(), w, g.kernelVolume(), bias, d.lineLength, line);
    T *o = out + od * g.out[1] * outW;
    for (int64_t oh = 0; oh < g.out[1]; ++oh)
      std::copy(line + oh * pitch, line + oh * pitch + outW, o + oh * outW);
  }
}

} // namespace

template <typename T>
void convDepthwise(const ConvGeometry &g, int64_t batch, int64_t groups, int64_t outPerGroup,
                   const T *x, const T *w, const T *bias, T *out) {
  const DepthwisePlan d = makePlan(g);
  const int64_t images = batch * groups, taps = g.kernelVolume();
  const int64_t lineBuffer = (d.lineLength + kChunk - 1) / kChunk * kChunk;
  const int64_t work = std::max<int64_t>(1, outPerGroup * g.outVolume() * taps);
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / work);
  parallelFor(0, images, grain, [&](int64_t i0, int64_t i1) {
    std::vector<T> pad(g.stride[1] * g.stride[2] * d.phaseSize), line(lineBuffer);
    for (int64_t i = i0; i < i1; ++i) {
      // Image i is group i % groups of batch element i / groups; its outPerGroup output
      // channels are planes i * outPerGroup ... of out, channels (i % groups) * outPerGroup ...
      padPlane(g, d, x + i * g.inVolume(), pad.data());
      for (int64_t k = 0; k < outPerGroup; ++k) {
        const int64_t c = (i % groups) * outPerGroup + k;
        depthwisePlane(g, d, pad.data(), w + c * taps, bias ? bias[c] : T(0), line.data(),
                       out + (i * outPerGroup + k) * g.outVolume());
      }
    }
  });
}

template void convDepthwise<float>(const ConvGeometry &, int64_t, int64_t, int64_t, const float *,
                                   const float *, const float *, float *);
template void convDepthwise<double>(const ConvGeometry &, int64_t, int64_t, int64_t, const double *,
                                    const double *, const double *, double *);

} // namespace kiln::ops::detail

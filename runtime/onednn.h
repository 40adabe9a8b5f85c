#pragma once
/// oneDNN's matmul for the narrow float types and its convolution, opened with dlopen (PyPI's
/// onednn-cpu-gomp: the set-up installs it; KILN_DNNL_LIB names the library, which
/// kiln/_blas_env.py sets to the environment's copy). On a CPU with bfloat16 dot products
/// (AVX512-BF16 or AMX) its bfloat16 GEMM runs them natively, about twice as fast as float32 BLAS,
/// where kiln's own path widens the operands to float32 first; elsewhere (and with KILN_ONEDNN=0,
/// or without the library) `matmul` declines and the caller keeps that path. Primitives are cached
/// by shape, strides and dtype; oneDNN's OpenMP threads follow kiln.set_num_threads.

#include "runtime/dtype.h"

#include <cstdint>
#include <vector>

namespace kiln::onednn {

/// One operand of `matmul`: dims and strides in elements (the same rank for every operand;
/// batch dims of size 1 broadcast), and its data.
struct Operand {
  std::vector<int64_t> dims, strides;
  const void *data = nullptr;
};

/// Whether `matmul` runs `dtype` here (the library loaded, the CPU has the instructions).
bool available(DType dtype);

/// dst = a @ b (+ bias, broadcast over dst) in `dtype` for every operand, accumulating in
/// float32; false (dst untouched) when oneDNN cannot run it, so the caller computes it instead.
bool matmul(DType dtype, const Operand &a, const Operand &b, const Operand *bias,
            const Operand &dst);

/// How many products `matmul` has run (tests and benchmarks check which path ran).
int64_t calls();

/// A convolution over 1 to 3 spatial dims: input [batch, channels, in...], weights
/// [outChannels, channels / groups, kernel...], output [batch, outChannels, out...], all
/// contiguous; bias [outChannels].
struct ConvShape {
  int64_t batch = 0, channels = 0, outChannels = 0, groups = 1;
  std::vector<int64_t> in, out, kernel, stride, dilation, padBefore, padAfter;
};

/// Whether `convolution` runs `dtype` here: float32 with the library loaded, bfloat16 where the
/// CPU also has bfloat16 dot products.
bool convolutionAvailable(DType dtype);

/// out = conv(x, w) (+ bias) in `dtype` (onednn_conv.cc): oneDNN picks the blocked layouts its
/// fastest kernel wants, and the operands are reordered into them and back around each call.
/// False (out untouched) when oneDNN cannot run it, so the caller computes it instead.
bool convolution(DType dtype, const ConvShape &shape, const void *x, const void *w,
                 const void *bias, void *out);

/// A convolution's gradients on oneDNN, as `convolution` (bias gradients are the caller's sum):
/// gradInput from the output's gradient and the weights, gradWeight from the input and the
/// output's gradient. False (output untouched) when oneDNN cannot run it.
bool convolutionBackwardData(DType dtype, const ConvShape &shape, const void *gradOut,
                             const void *w, void *gradInput);
bool convolutionBackwardWeights(DType dtype, const ConvShape &shape, const void *x,
                                const void *gradOut, void *gradWeight);

/// How many convolution passes (forward or backward) oneDNN has run.
int64_t convolutionCalls();

} // namespace kiln::onednn

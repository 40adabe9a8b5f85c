#pragma once
/// Differentiable ops: each runs the eager kernel of kiln::ops and, when grad mode is on and an
/// input requires grad, records its derivative rule (derivatives_*.h) as the outputs' grad_fn.
///
/// `kiln::autograd::ops` re-exports every op of kiln::ops (the using-directive), and declares
/// the differentiable ones with the same signatures, which hide the plain kernels. The bindings
/// call `ops::` through this namespace, so an op gains autograd by being declared here; one that
/// is not declared runs its kernel and its output does not require grad.
///
/// Composite ops without a rule of their own (cross_entropy, scaled_dot_product_attention, ...)
/// run as their decomposition into differentiable ops while recording, and as their fused
/// kernel otherwise.

#include "runtime/ops/activation.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/index.h"
#include "runtime/ops/interpolate.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/pool.h"
#include "runtime/ops/random.h"
#include "runtime/ops/reduce.h"
#include "runtime/ops/scan.h"
#include "runtime/ops/shape_ops.h"
#include "runtime/ops/softmax.h"
#include "runtime/ops/sort.h"
#include "runtime/ops/unary_math.h"
#include "runtime/tensor.h"

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace kiln::autograd::ops {

using namespace kiln::ops; // NOLINT: the ops without a derivative rule are the plain kernels

// ---- elementwise (ops_elementwise.cc) ------------------------------------------------------
Tensor add(const Tensor &a, const Tensor &b, const Scalar &alpha = Scalar(int64_t{1}));
Tensor sub(const Tensor &a, const Tensor &b, const Scalar &alpha = Scalar(int64_t{1}));
Tensor mul(const Tensor &a, const Tensor &b);
Tensor div(const Tensor &a, const Tensor &b, const std::string &roundingMode = "");
Tensor pow(const Tensor &a, const Tensor &b);
Tensor maximum(const Tensor &a, const Tensor &b);
Tensor minimum(const Tensor &a, const Tensor &b);
Tensor where(const Tensor &cond, const Tensor &a, const Tensor &b);
Tensor clamp(const Tensor &a, const std::optional<Tensor> &lo, const std::optional<Tensor> &hi);
Tensor maskedFill(const Tensor &self, const Tensor &mask, const Tensor &value);
Tensor neg(const Tensor &a);
Tensor abs(const Tensor &a);
Tensor square(const Tensor &a);
Tensor reciprocal(const Tensor &a);
Tensor exp(const Tensor &a);
Tensor log(const Tensor &a);
Tensor log1p(const Tensor &a);
Tensor expm1(const Tensor &a);
Tensor sqrt(const Tensor &a);
Tensor rsqrt(const Tensor &a);
Tensor sin(const Tensor &a);
Tensor cos(const Tensor &a);
Tensor tanh(const Tensor &a);
Tensor sigmoid(const Tensor &a);
Tensor erf(const Tensor &a);

// ---- more math, piecewise-constant ops, activations and binary ops (ops_math.cc) -------------
Tensor tan(const Tensor &a);
Tensor asin(const Tensor &a);
Tensor acos(const Tensor &a);
Tensor atan(const Tensor &a);
Tensor sinh(const Tensor &a);
Tensor cosh(const Tensor &a);
Tensor asinh(const Tensor &a);
Tensor acosh(const Tensor &a);
Tensor atanh(const Tensor &a);
Tensor exp2(const Tensor &a);
Tensor log2(const Tensor &a);
Tensor log10(const Tensor &a);
Tensor erfc(const Tensor &a);
Tensor frac(const Tensor &a);
Tensor floor(const Tensor &a);
Tensor ceil(const Tensor &a);
Tensor trunc(const Tensor &a);
Tensor sign(const Tensor &a);
Tensor round(const Tensor &a, std::optional<int64_t> decimals = std::nullopt);
Tensor nanToNum(const Tensor &a, std::optional<double> nan = 0.0,
                std::optional<double> posinf = std::nullopt,
                std::optional<double> neginf = std::nullopt);
Tensor selu(const Tensor &a);
Tensor celu(const Tensor &a, double alpha = 1.0);
Tensor hardsigmoid(const Tensor &a);
Tensor hardswish(const Tensor &a);
Tensor mish(const Tensor &a);
Tensor logsigmoid(const Tensor &a);
Tensor softsign(const Tensor &a);
Tensor tanhshrink(const Tensor &a);
Tensor hardshrink(const Tensor &a, double lambd = 0.5);
Tensor softshrink(const Tensor &a, double lambd = 0.5);
Tensor threshold(const Tensor &a, const Scalar &threshold, const Scalar &value);
Tensor atan2(const Tensor &a, const Tensor &b);
Tensor hypot(const Tensor &a, const Tensor &b);
Tensor fmax(const Tensor &a, const Tensor &b);
Tensor fmin(const Tensor &a, const Tensor &b);
Tensor fmod(const Tensor &a, const Tensor &b);
Tensor remainder(const Tensor &a, const Tensor &b);
Tensor floatPower(const Tensor &a, const Tensor &b);
Tensor lerp(const Tensor &a, const Tensor &end, const Tensor &weight);
Tensor addcmul(const Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value);
Tensor addcdiv(const Tensor &self, const Tensor &t1, const Tensor &t2, const Scalar &value);

// ---- activations (ops_elementwise.cc) --------------------------------------------------------
Tensor relu(const Tensor &a);
Tensor gelu(const Tensor &a, const std::string &approximate = "none");
Tensor silu(const Tensor &a);
Tensor softplus(const Tensor &a, double beta = 1.0, double threshold = 20.0);
Tensor leakyRelu(const Tensor &a, double negativeSlope = 0.01);
Tensor elu(const Tensor &a, double alpha = 1.0);
Tensor hardtanh(const Tensor &a, const Scalar &minVal = Scalar(-1.0),
                const Scalar &maxVal = Scalar(1.0));
Tensor relu6(const Tensor &a);
Tensor dropout(const Tensor &input, double p, bool train, Generator *gen = nullptr);

// ---- reductions (ops_reduce.cc) --------------------------------------------------------------
Tensor sum(const Tensor &a, const DimList &dims = {}, bool keepdim = false,
           std::optional<DType> dtype = {});
Tensor mean(const Tensor &a, const DimList &dims = {}, bool keepdim = false,
            std::optional<DType> dtype = {});
Tensor nanmean(const Tensor &a, const DimList &dims = {}, bool keepdim = false,
               std::optional<DType> dtype = {});
std::pair<Tensor, Tensor> aminmax(const Tensor &a, std::optional<int64_t> dim = {},
                                  bool keepdim = false);
Tensor amax(const Tensor &a, const DimList &dims = {}, bool keepdim = false);
Tensor amin(const Tensor &a, const DimList &dims = {}, bool keepdim = false);
Tensor max(const Tensor &a);
Tensor min(const Tensor &a);
Tensor var(const Tensor &a, const DimList &dims = {}, double correction = 1.0,
           bool keepdim = false);
Tensor stdDev(const Tensor &a, const DimList &dims = {}, double correction = 1.0,
              bool keepdim = false);
Tensor logsumexp(const Tensor &a, const DimList &dims, bool keepdim = false);
Tensor softmax(const Tensor &a, int64_t dim, std::optional<DType> dtype = {});
Tensor logSoftmax(const Tensor &a, int64_t dim, std::optional<DType> dtype = {});

// ---- linear algebra (ops_linalg.cc) ----------------------------------------------------------
Tensor matmul(const Tensor &a, const Tensor &b);
Tensor mm(const Tensor &a, const Tensor &b);
Tensor bmm(const Tensor &a, const Tensor &b);
Tensor linear(const Tensor &input, const Tensor &weight, const std::optional<Tensor> &bias);
Tensor addmm(const Tensor &self, const Tensor &mat1, const Tensor &mat2,
             const Scalar &beta = Scalar(int64_t{1}), const Scalar &alpha = Scalar(int64_t{1}));
Tensor mv(const Tensor &mat, const Tensor &vec);
Tensor dot(const Tensor &a, const Tensor &b, const char *op = "dot");
Tensor outer(const Tensor &a, const Tensor &b);
Tensor addmv(const Tensor &self, const Tensor &mat, const Tensor &vec,
             const Scalar &beta = Scalar(int64_t{1}), const Scalar &alpha = Scalar(int64_t{1}));
Tensor baddbmm(const Tensor &self, const Tensor &batch1, const Tensor &batch2,
               const Scalar &beta = Scalar(int64_t{1}), const Scalar &alpha = Scalar(int64_t{1}));
// The LAPACK-backed ops (runtime/ops/linalg.h), recording the rules of derivatives_linalg.h.
Tensor linalgSolve(const Tensor &a, const Tensor &b, bool inverse = false);
Tensor linalgSolveTriangular(const Tensor &a, const Tensor &b, bool upper, bool unitriangular);
Tensor linalgCholesky(const Tensor &a);
Tensor linalgLogabsdet(const Tensor &a);
Tensor linalgEighPacked(const Tensor &a, bool upper);
Tensor bilinear(const Tensor &input1, const Tensor &input2, const Tensor &weight,
                const std::optional<Tensor> &bias);

// ---- nn (ops_nn.cc) -------------------------------------------------------------------------
/// A loss's per-element values reduced as `reduction` says (differentiable).
Tensor reduced(const Tensor &perElement, Reduction reduction);
Tensor layerNorm(const Tensor &input, IntList normalizedShape, const Tensor &weight,
                 const Tensor &bias, double eps);
Tensor rmsNorm(const Tensor &input, IntList normalizedShape, const Tensor &weight,
               std::optional<double> eps);
Tensor groupNorm(const Tensor &input, int64_t numGroups, const Tensor &weight, const Tensor &bias,
                 double eps);
Tensor embedding(const Tensor &indices, const Tensor &weight,
                 std::optional<int64_t> paddingIdx = {});
Tensor nllLoss(const Tensor &input, const Tensor &target, const Tensor &weight, Reduction reduction,
               int64_t ignoreIndex);
Tensor crossEntropy(const Tensor &input, const Tensor &target, const Tensor &weight,
                    Reduction reduction, int64_t ignoreIndex, double labelSmoothing);
Tensor mseLoss(const Tensor &input, const Tensor &target, const Tensor &weight,
               Reduction reduction);
Tensor scaledDotProductAttention(const Tensor &query, const Tensor &key, const Tensor &value,
                                 const Tensor &attnMask, double dropoutP, bool isCausal,
                                 std::optional<double> scale, bool enableGqa);

// ---- more losses, normalize, var_mean, adaptive max pooling (ops_loss.cc) --------------------
Tensor l1Loss(const Tensor &input, const Tensor &target, const Tensor &weight, Reduction reduction);
Tensor smoothL1Loss(const Tensor &input, const Tensor &target, Reduction reduction, double beta);
Tensor huberLoss(const Tensor &input, const Tensor &target, const Tensor &weight,
                 Reduction reduction, double delta);
Tensor klDiv(const Tensor &input, const Tensor &target, Reduction reduction, bool logTarget);
Tensor binaryCrossEntropyWithLogits(const Tensor &input, const Tensor &target, const Tensor &weight,
                                    const Tensor &posWeight, Reduction reduction);
Tensor binaryCrossEntropy(const Tensor &input, const Tensor &target, const Tensor &weight,
                          Reduction reduction);
Tensor normalize(const Tensor &input, double p, int64_t dim, double eps);
std::pair<Tensor, Tensor> varMean(const Tensor &a, const DimList &dims, double correction,
                                  bool keepdim, bool takeSqrt);
std::pair<Tensor, Tensor> adaptiveMaxPool(int64_t nd, const Tensor &input,
                                          const AdaptiveSize &outputSize, bool withIndices);

// ---- convolution, pooling, batch norm, padding (ops_conv_pool.cc) ---------------------------
Tensor convolution(int64_t spatialDims, const Tensor &input, const Tensor &weight,
                   const std::optional<Tensor> &bias, const ConvOptions &opts);
Tensor pad(const Tensor &self, IntList pad, const std::string &mode = "constant",
           std::optional<double> value = {});
std::pair<Tensor, Tensor> maxPool(int64_t nd, const Tensor &input, const PoolOptions &opts,
                                  bool withIndices);
Tensor avgPool(int64_t nd, const Tensor &input, const PoolOptions &opts, bool countIncludePad,
               std::optional<int64_t> divisorOverride);
Tensor adaptiveAvgPool(int64_t nd, const Tensor &input, const AdaptiveSize &outputSize);
Tensor batchNorm(const Tensor &input, const Tensor &weight, const Tensor &bias,
                 const Tensor &runningMean, const Tensor &runningVar, bool training,
                 double momentum, double eps);

// ---- sorts, scans, products, norms, flip/roll/repeat (ops_sort_scan.cc) ----------------------
std::pair<Tensor, Tensor> sort(const Tensor &a, int64_t dim = -1, bool descending = false,
                               bool stable = false);
std::pair<Tensor, Tensor> topk(const Tensor &a, int64_t k, int64_t dim = -1, bool largest = true,
                               bool sorted = true);
Tensor cumsum(const Tensor &a, int64_t dim, std::optional<DType> dtype = {});
Tensor cumprod(const Tensor &a, int64_t dim, std::optional<DType> dtype = {});
Tensor logcumsumexp(const Tensor &a, int64_t dim);
std::pair<Tensor, Tensor> cummax(const Tensor &a, int64_t dim);
std::pair<Tensor, Tensor> cummin(const Tensor &a, int64_t dim);
std::pair<Tensor, Tensor> kthvalue(const Tensor &a, int64_t k, int64_t dim = -1,
                                   bool keepdim = false);
Tensor median(const Tensor &a);
Tensor nanmedian(const Tensor &a);
std::pair<Tensor, Tensor> maxDim(const Tensor &a, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> minDim(const Tensor &a, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> medianDim(const Tensor &a, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> nanmedianDim(const Tensor &a, int64_t dim, bool keepdim = false);
std::pair<Tensor, Tensor> mode(const Tensor &a, int64_t dim = -1, bool keepdim = false);
Tensor prod(const Tensor &a, std::optional<int64_t> dim = {}, bool keepdim = false,
            std::optional<DType> dtype = {});
Tensor vectorNorm(const Tensor &a, double ord = 2.0, const DimList &dims = {}, bool keepdim = false,
                  std::optional<DType> dtype = {});
Tensor nansum(const Tensor &a, const DimList &dims = {}, bool keepdim = false,
              std::optional<DType> dtype = {});
Tensor flip(const Tensor &self, IntList dims);
Tensor roll(const Tensor &self, IntList shifts, IntList dims);
Tensor repeat(const Tensor &self, IntList repeats);
Tensor tile(const Tensor &self, IntList reps);

// ---- joins and indexing (ops_shape.cc) -------------------------------------------------------
Tensor cat(std::span<const Tensor> tensors, int64_t dim = 0);
Tensor stack(std::span<const Tensor> tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor &self, int64_t splitSize, int64_t dim = 0);
std::vector<Tensor> splitWithSizes(const Tensor &self, IntList sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor &self, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> tensorSplit(const Tensor &self, int64_t sections, int64_t dim = 0);
std::vector<Tensor> tensorSplitIndices(const Tensor &self, IntList indices, int64_t dim = 0);
Tensor repeatInterleave(const Tensor &self, int64_t repeats, std::optional<int64_t> dim = {});
Tensor repeatInterleave(const Tensor &self, const Tensor &repeats, std::optional<int64_t> dim = {});
Tensor diagonal(const Tensor &self, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
Tensor diag(const Tensor &self, int64_t diagonal = 0);
Tensor diagEmbed(const Tensor &self, int64_t offset = 0, int64_t dim1 = -2, int64_t dim2 = -1);
Tensor index(const Tensor &self, std::span<const Tensor> indices);
Tensor gather(const Tensor &self, int64_t dim, const Tensor &index);
Tensor take(const Tensor &self, const Tensor &index);
// The out-of-place scatters (ops_scatter.cc); the bindings' in-place forms apply them in place.
Tensor scatter(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &src);
Tensor scatterAdd(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &src);
/// scatter_reduce with reduce sum, mean, amax or amin (prod is not differentiable here).
Tensor scatterReduce(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &src,
                     const std::string &reduce, bool includeSelf);
Tensor indexAdd(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &source,
                const Scalar &alpha);
Tensor indexPut(const Tensor &self, std::span<const Tensor> indices, const Tensor &values,
                bool accumulate = false);
// conv_transpose1d / 2d (ops_conv_pool.cc): the adjoint of the convolution.
Tensor convTranspose(int64_t spatialDims, const Tensor &input, const Tensor &weight,
                     const std::optional<Tensor> &bias,
                     const kiln::ops::ConvTransposeOptions &opts);
// im2col and col2im (ops_conv_pool.cc): each is the other's derivative.
Tensor unfold(const Tensor &input, IntList kernelSize, IntList dilation, IntList padding,
              IntList stride);
Tensor fold(const Tensor &input, IntList outputSize, IntList kernelSize, IntList dilation,
            IntList padding, IntList stride);
// The upsamples (ops_scatter.cc): their backward adds each output gradient to what it read.
Tensor upsampleNearest(const Tensor &input, IntList outputSize,
                       const kiln::ops::UpsampleScales &scales, bool exact);
Tensor upsampleLinear(const Tensor &input, IntList outputSize, bool alignCorners,
                      const kiln::ops::UpsampleScales &scales);
Tensor indexSelect(const Tensor &self, int64_t dim, const Tensor &index);
Tensor tril(const Tensor &self, int64_t diagonal = 0);
Tensor triu(const Tensor &self, int64_t diagonal = 0);
std::vector<Tensor> meshgrid(std::span<const Tensor> tensors, const std::string &indexing = "ij");
Tensor movedim(const Tensor &self, IntList source, IntList destination);
std::vector<Tensor> broadcastTensors(std::span<const Tensor> tensors);
Tensor maskedSelect(const Tensor &self, const Tensor &mask);

} // namespace kiln::autograd::ops

namespace kiln::autograd {

// ---- views and copies (views.cc): Tensor's view methods with history --------------------------
Tensor view(const Tensor &self, IntList sizes);
Tensor reshape(const Tensor &self, IntList sizes);
Tensor transpose(const Tensor &self, int64_t d0, int64_t d1);
Tensor permute(const Tensor &self, IntList dims);
Tensor expand(const Tensor &self, IntList sizes);
Tensor slice(const Tensor &self, int64_t dim, std::optional<int64_t> start,
             std::optional<int64_t> end, int64_t step = 1);
Tensor narrow(const Tensor &self, int64_t dim, int64_t start, int64_t length);
Tensor select(const Tensor &self, int64_t dim, int64_t index);
Tensor squeeze(const Tensor &self);
Tensor squeeze(const Tensor &self, IntList dims);
Tensor unsqueeze(const Tensor &self, int64_t dim);
Tensor flatten(const Tensor &self, int64_t startDim = 0, int64_t endDim = -1);
Tensor unflatten(const Tensor &self, int64_t dim, IntList sizes);
std::vector<Tensor> unbind(const Tensor &self, int64_t dim);
Tensor t(const Tensor &self);
Tensor mT(const Tensor &self);
Tensor asStrided(const Tensor &self, IntList sizes, IntList strides,
                 std::optional<int64_t> offset = {});
Tensor contiguous(const Tensor &self);
Tensor clone(const Tensor &self);
/// Tensor.clone() (torch's preserve_format): a permuted dense tensor's copy keeps its strides;
/// any other one is row-major, as clone's.
Tensor clonePreservingLayout(const Tensor &self);
Tensor to(const Tensor &self, DType dtype, bool copy = false);
Tensor to(const Tensor &self, Device device, bool copy = false);

/// The in-place form of an op whose out-of-place `result` was computed from self: writes it into
/// self and makes result's history self's (refusing what autograd cannot follow).
Tensor &applyInplace(const char *op, Tensor &self, const Tensor &result);
/// The operand an in-place op computes from: self, or a recorded clone of it when the op records
/// (the rule may save self, which the write would overwrite).
Tensor inplaceOperand(const Tensor &self, std::initializer_list<const Tensor *> others = {});

} // namespace kiln::autograd

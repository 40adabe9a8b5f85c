// Pooling ops: torch's argument checks and output sizes, then the shared window kernels.
#include "runtime/ops/pool.h"
#include "runtime/device_ops.h"

#include "runtime/error.h"
#include "runtime/ops/linalg_impl.h"
#include "runtime/ops/pool_impl.h"

#include <fmt/ranges.h>

namespace kiln::ops {

using namespace detail;

namespace {

/// A pool resolved to its window geometry over the batched, contiguous input.
struct PoolPlan {
  PoolGeometry geom;
  Shape outShape; // batched: [N, C, *out]
  bool batched = true;
};

Shape poolParam(const std::string &op, const char *name, IntList v, int64_t nd) {
  if (static_cast<int64_t>(v.size()) == nd)
    return Shape(v.begin(), v.end());
  KILN_CHECK(v.size() == 1, "{}: {} must either be a single int, or a tuple of {} ints (got {})",
             op, name, nd, shapeToString(v));
  return Shape(nd, v[0]);
}

/// Checks rank nd+1 (unbatched) or nd+2 and non-empty non-batch dims; returns whether batched.
bool checkPoolInput(const std::string &op, int64_t nd, const Tensor &input) {
  KILN_CHECK(input.dim() == nd + 1 || input.dim() == nd + 2,
             "{}: Expected {}D or {}D (batch mode) tensor with optional 0 dim batch size for "
             "input, but got: {}",
             op, nd + 1, nd + 2, input.shapeStr());
  bool batched = input.dim() == nd + 2;
  for (int64_t d = batched ? 1 : 0; d < input.dim(); ++d)
    KILN_CHECK(input.size(d) > 0,
               "{}: Expected input to have non-zero size for non-batch dimensions, but input has "
               "sizes {} with dimension {} being empty",
               op, input.shapeStr(), d);
  return batched;
}

/// torch's pooling_output_shape: floor or ceil division, and a ceil-mode window may not start
/// in the right padding.
int64_t poolOutSize(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil ? stride - 1 : 0);
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil && (out - 1) * stride >= in + pad)
    --out;
  return out;
}

/// The batched view's geometry, with windows on the trailing nd axes and unit axes before.
PoolPlan startPlan(int64_t nd, const Tensor &input, bool batched) {
  PoolPlan p;
  p.batched = batched;
  Tensor x = batched ? input : input.unsqueeze(0);
  p.geom.planes = x.size(0) * x.size(1);
  p.outShape = {x.size(0), x.size(1)};
  for (int a = 0; a < 3 - nd; ++a)
    p.geom.axes[a] = adaptiveWindows(1, 1);
  for (int64_t d = 0; d < nd; ++d)
    p.geom.in[3 - nd + d] = x.size(d + 2);
  return p;
}

PoolPlan planPool(const std::string &op, int64_t nd, const Tensor &input, const PoolOptions &o,
                  bool isMax) {
  bool batched = checkPoolInput(op, nd, input);
  Shape kernel = poolParam(op, "kernel_size", o.kernelSize, nd);
  Shape stride = o.stride.empty() ? kernel : poolParam(op, "stride", o.stride, nd);
  Shape pad = poolParam(op, "padding", o.padding, nd);
  Shape dil = isMax ? poolParam(op, "dilation", o.dilation, nd) : Shape(nd, 1);
  for (int64_t d = 0; d < nd; ++d) {
    KILN_CHECK(kernel[d] > 0, "{}: kernel size should be greater than zero, but got {}", op,
               shapeToString(kernel));
    KILN_CHECK(stride[d] > 0, "{}: stride should be greater than zero, but got {}", op,
               shapeToString(stride));
    KILN_CHECK(dil[d] > 0, "{}: dilation should be greater than zero, but got {}", op,
               shapeToString(dil));
    KILN_CHECK(pad[d] >= 0, "{}: pad must be non-negative, but got pad: {}", op,
               shapeToString(pad));
    KILN_CHECK(pad[d] <= ((kernel[d] - 1) * dil[d] + 1) / 2,
               "{}: pad should be at most half of effective kernel size, but got pad={}, "
               "kernel_size={} and dilation={}",
               op, shapeToString(pad), shapeToString(kernel), shapeToString(dil));
    // torch then checks the raw kernel too, which is stricter when dilated.
    KILN_CHECK(pad[d] <= kernel[d] / 2,
               "{}: pad should be smaller than or equal to half of kernel size, but got pad={}, "
               "kernel_size={}",
               op, shapeToString(pad), shapeToString(kernel));
  }
  PoolPlan p = startPlan(nd, input, batched);
  Shape inSizes{p.outShape[1]}, outSizes{p.outShape[1]};
  for (int64_t d = 0; d < nd; ++d) {
    int64_t in = p.geom.in[3 - nd + d];
    int64_t out = poolOutSize(in, kernel[d], pad[d], stride[d], dil[d], o.ceilMode);
    inSizes.push_back(in);
    outSizes.push_back(out);
    p.outShape.push_back(out);
    p.geom.axes[3 - nd + d] = slidingWindows(in, out, kernel[d], stride[d], pad[d], dil[d]);
  }
  for (int64_t d = 0; d < nd; ++d)
    KILN_CHECK(outSizes[d + 1] >= 1,
               "{}: Given input size: ({}). Calculated output size: ({}). Output size is too "
               "small",
               op, fmt::join(inSizes, "x"), fmt::join(outSizes, "x"));
  return p;
}

PoolPlan planAdaptive(const std::string &op, int64_t nd, const Tensor &input,
                      const AdaptiveSize &size) {
  KILN_CHECK(input.dim() == nd + 1 || input.dim() == nd + 2,
             "{}(): Expected {}D or {}D tensor, but got {}", op, nd + 1, nd + 2, input.shapeStr());
  KILN_CHECK(static_cast<int64_t>(size.size()) == nd, "{}: output_size must be {} (got {} values)",
             op, nd, size.size());
  bool batched = checkPoolInput(op, nd, input);
  PoolPlan p = startPlan(nd, input, batched);
  for (int64_t d = 0; d < nd; ++d) {
    int64_t in = p.geom.in[3 - nd + d], out = size[d].value_or(in);
    KILN_CHECK(out >= 0,
               "{}: elements of output_size must be greater than or equal to 0 but received {}", op,
               out);
    p.outShape.push_back(out);
    p.geom.axes[3 - nd + d] = adaptiveWindows(in, out);
  }
  return p;
}

/// Runs kernel<T>(in, out, indices) in the compute dtype and shapes the results like the input.
template <typename Kernel>
std::pair<Tensor, Tensor> runPool(const PoolPlan &p, const Tensor &input, bool withIndices,
                                  Kernel kernel) {
  DType dt = input.dtype(), compute = computeDType(dt);
  Tensor x = input.to(compute).contiguous();
  Tensor out = Tensor::empty(p.outShape, compute, input.device());
  Tensor idx = withIndices ? Tensor::empty(p.outShape, DType::Int64, input.device()) : Tensor();
  if (out.numel() > 0)
    dispatchCompute(compute, [&]<typename T>() {
      if constexpr (!std::is_same_v<T, bool>)
        kernel.template operator()<T>(x.data<T>(), out.data<T>(),
                                      withIndices ? idx.data<int64_t>() : nullptr);
    });
  if (compute != dt)
    out = out.to(dt);
  if (!p.batched) {
    out = out.squeeze({0});
    if (withIndices)
      idx = idx.squeeze({0});
  }
  return {out, idx};
}

/// avg_pool3d's extra rule (torch's pool3d_shape_check): the unpadded input must hold a kernel.
void checkInputCoversKernel(const std::string &op, const PoolPlan &p, IntList kernelSize) {
  Shape kernel = poolParam(op, "kernel_size", kernelSize, 3);
  bool ok = true;
  for (int d = 0; d < 3; ++d)
    ok = ok && p.geom.in[d] >= kernel[d];
  KILN_CHECK(ok,
             "{}: input image (T: {} H: {} W: {}) smaller than kernel size (kT: {} kH: {} kW: {})",
             op, p.geom.in[0], p.geom.in[1], p.geom.in[2], kernel[0], kernel[1], kernel[2]);
}

std::string opName(const char *base, int64_t nd) { return fmt::format("{}{}d", base, nd); }

void checkSpatialDims(int64_t nd) {
  KILN_CHECK(nd >= 1 && nd <= 3, "pooling: expected 1 to 3 spatial dims, got {}", nd);
}

} // namespace

namespace {
/// The graph IR's attributes of a 2-d pool (kernel_size, stride, padding, [dilation], ceil_mode).
std::string poolAttrs(const PoolOptions &opts, bool dilation) {
  return joinAttrs(
      {fmt::format("kernel_size = [{}]", fmt::join(opts.kernelSize, ", ")),
       opts.stride.empty() ? "" : fmt::format("stride = [{}]", fmt::join(opts.stride, ", ")),
       fmt::format("padding = [{}]", fmt::join(opts.padding, ", ")),
       dilation ? fmt::format("dilation = [{}]", fmt::join(opts.dilation, ", ")) : "",
       opts.ceilMode ? "ceil_mode = true" : ""});
}
} // namespace

std::pair<Tensor, Tensor> maxPool(int64_t nd, const Tensor &input, const PoolOptions &opts,
                                  bool withIndices) {
  checkSpatialDims(nd);
  if (onDevice({&input})) {
    KILN_CHECK_KIND(NotImplemented, nd == 2 && !withIndices,
                    "kiln: max_pool{}d{} has no CUDA implementation yet", nd,
                    withIndices ? " with indices" : "");
    return {deviceOp("max_pool2d", {input}, poolAttrs(opts, true)), Tensor()};
  }
  std::string op = opName("max_pool", nd);
  // torch's 1-D kernel without indices is floating-point only; the others take integers too.
  if (input.dtype() == DType::Bool || (nd == 1 && !withIndices && !isFloating(input.dtype())))
    notImplementedFor(op.c_str(), input.dtype());
  PoolPlan p = planPool(op, nd, input, opts, true);
  return runPool(p, input, withIndices, [&]<typename T>(const T *in, T *out, int64_t *idx) {
    windowMax<T>(p.geom, in, out, idx);
  });
}

Tensor avgPool(int64_t nd, const Tensor &input, const PoolOptions &opts, bool countIncludePad,
               std::optional<int64_t> divisorOverride) {
  checkSpatialDims(nd);
  if (onDevice({&input})) {
    KILN_CHECK_KIND(NotImplemented, nd == 2, "kiln: avg_pool{}d has no CUDA implementation yet",
                    nd);
    return deviceOp(
        "avg_pool2d", {input},
        joinAttrs({poolAttrs(opts, false), countIncludePad ? "" : "count_include_pad = false",
                   divisorOverride ? fmt::format("divisor_override = {}", *divisorOverride) : ""}));
  }
  std::string op = opName("avg_pool", nd);
  if (!isFloating(input.dtype()) && input.dtype() != DType::Int64)
    notImplementedFor(op.c_str(), input.dtype());
  KILN_CHECK(!divisorOverride || *divisorOverride != 0, "{}: divisor must be not zero", op);
  PoolPlan p = planPool(op, nd, input, opts, false);
  if (nd == 3)
    checkInputCoversKernel(op, p, opts.kernelSize);
  AvgDivisor div{countIncludePad, divisorOverride};
  return runPool(p, input, false,
                 [&]<typename T>(const T *in, T *out, int64_t *) {
                   windowAvg<T>(p.geom, in, out, div);
                 })
      .first;
}

Tensor adaptiveAvgPool(int64_t nd, const Tensor &input, const AdaptiveSize &outputSize) {
  checkSpatialDims(nd);
  if (onDevice({&input})) {
    Shape sizes;
    for (size_t d = 0; d < outputSize.size(); ++d)
      sizes.push_back(outputSize[d].value_or(input.size(input.dim() - outputSize.size() + d)));
    KILN_CHECK_KIND(NotImplemented, nd == 2,
                    "kiln: adaptive_avg_pool{}d has no CUDA implementation yet", nd);
    return deviceOp("adaptive_avg_pool2d", {input},
                    fmt::format("output_size = [{}]", fmt::join(sizes, ", ")));
  }
  std::string op = opName("adaptive_avg_pool", nd);
  if (!isFloating(input.dtype()))
    notImplementedFor(op.c_str(), input.dtype());
  PoolPlan p = planAdaptive(op, nd, input, outputSize);
  return runPool(p, input, false,
                 [&]<typename T>(const T *in, T *out, int64_t *) {
                   windowAvg<T>(p.geom, in, out, AvgDivisor{});
                 })
      .first;
}

std::pair<Tensor, Tensor> adaptiveMaxPool(int64_t nd, const Tensor &input,
                                          const AdaptiveSize &outputSize, bool withIndices) {
  checkSpatialDims(nd);
  std::string op = opName("adaptive_max_pool", nd);
  if (!isFloating(input.dtype()))
    notImplementedFor(op.c_str(), input.dtype());
  PoolPlan p = planAdaptive(op, nd, input, outputSize);
  return runPool(p, input, withIndices, [&]<typename T>(const T *in, T *out, int64_t *idx) {
    windowMax<T>(p.geom, in, out, idx);
  });
}

namespace {
template <typename T>
void maxPoolBackwardKernel(const T *g, const int64_t *ix, T *out, int64_t planes, int64_t plane,
                           int64_t outPlane) {
  const int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(outPlane, 1));
  parallelFor(0, planes, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      T *dst = out + p * plane;
      for (int64_t j = p * outPlane; j < (p + 1) * outPlane; ++j)
        dst[ix[j]] += g[j];
    }
  });
}
} // namespace

Tensor maxPoolBackward(const Tensor &grad, const Tensor &indices, IntList inputSizes,
                       int64_t spatialDims) {
  const char *op = "max_pool_backward";
  KILN_CHECK(grad.sizes() == indices.sizes() && indices.dtype() == DType::Int64,
             "{}: expected int64 indices of the gradient's shape {}, got {} {}", op,
             grad.shapeStr(), dtypeName(indices.dtype()), indices.shapeStr());
  if (grad.dtype() != DType::Float32 && grad.dtype() != DType::Float64) // half: in float
    return maxPoolBackward(grad.to(DType::Float32), indices, inputSizes, spatialDims)
        .to(grad.dtype());
  const int64_t rank = static_cast<int64_t>(inputSizes.size());
  int64_t planes = 1, plane = 1;
  for (int64_t d = 0; d < rank; ++d)
    (d < rank - spatialDims ? planes : plane) *= inputSizes[d];
  const int64_t outPlane = planes == 0 ? 0 : grad.numel() / planes;
  Tensor out = Tensor::empty(inputSizes, grad.dtype());
  out.fill_(Scalar(0.0));
  // The indices come from maxPool: each lies inside its plane.
  Tensor g = grad.contiguous(), idx = indices.contiguous();
  if (grad.dtype() == DType::Float32)
    maxPoolBackwardKernel(g.data<float>(), idx.data<int64_t>(), out.data<float>(), planes, plane,
                          outPlane);
  else
    maxPoolBackwardKernel(g.data<double>(), idx.data<int64_t>(), out.data<double>(), planes, plane,
                          outPlane);
  return out;
}

} // namespace kiln::ops

// F.unfold (im2col) and F.fold (col2im) over 2-D images.
#include "runtime/error.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/conv_impl.h"
#include "runtime/ops/linalg_impl.h"
#include "runtime/thread_pool.h"

#include <algorithm>

namespace kiln::ops {

using namespace detail;

namespace {

/// The four window parameters of fold/unfold, each expanded to two values and checked.
struct Window2d {
  Shape kernel, dilation, padding, stride;
};

Window2d makeWindow(const char *op, IntList kernel, IntList dilation, IntList padding,
                    IntList stride) {
  Window2d w{expandParam(op, "kernel_size", kernel, 2), expandParam(op, "dilation", dilation, 2),
             expandParam(op, "padding", padding, 2), expandParam(op, "stride", stride, 2)};
  for (int d = 0; d < 2; ++d) {
    KILN_CHECK(w.kernel[d] > 0, "{}: kernel size should be greater than zero, but got {}", op,
               shapeToString(w.kernel));
    KILN_CHECK(w.stride[d] > 0, "{}: stride should be greater than zero, but got {}", op,
               shapeToString(w.stride));
    KILN_CHECK(w.dilation[d] > 0, "{}: dilation should be greater than zero, but got {}", op,
               shapeToString(w.dilation));
    KILN_CHECK(w.padding[d] >= 0, "{}: padding should be non-negative, but got {}", op,
               shapeToString(w.padding));
  }
  return w;
}

/// The geometry of sliding `w` over an image of `channels` x `size`, checking at least one block.
ConvGeometry blockGeometry(const char *op, int64_t channels, IntList size, const Window2d &w) {
  ConvGeometry g;
  g.channels = channels;
  Shape blocks(2);
  for (int d = 0; d < 2; ++d) {
    g.in[1 + d] = size[d];
    blocks[d] = windowOutSize(size[d], 2 * w.padding[d], w.kernel[d], w.stride[d], w.dilation[d]);
    g.out[1 + d] = blocks[d];
  }
  KILN_CHECK(blocks[0] >= 1 && blocks[1] >= 1,
             "{}: Given input with spatial size {}, kernel_size={}, dilation={}, padding={}, "
             "calculated shape of the array of sliding blocks as {}, but its components must be "
             "at least one.",
             op, spatialStr(size), shapeToString(w.kernel), shapeToString(w.dilation),
             shapeToString(w.padding), spatialStr(blocks));
  setWindow(g, w.kernel, w.stride, w.padding, w.dilation);
  return g;
}

/// Runs fn(n) for each image, in parallel when the images are large enough to pay for it.
template <typename Fn> void forEachImage(int64_t n, int64_t workEach, Fn &&fn) {
  int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, workEach));
  parallelFor(0, n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      fn(i);
  });
}

} // namespace

Tensor unfold(const Tensor &input, IntList kernelSize, IntList dilation, IntList padding,
              IntList stride) {
  KILN_CHECK_KIND(NotImplemented, input.dim() == 3 || input.dim() == 4,
                  "unfold: Input Error: Only 3D or 4D input Tensors are supported (got {}D)",
                  input.dim());
  if (!isFloating(input.dtype()) && input.dtype() != DType::Bool)
    notImplementedFor("unfold", input.dtype());
  bool batched = input.dim() == 4;
  Tensor x = batched ? input : input.unsqueeze(0);
  Window2d w = makeWindow("unfold", kernelSize, dilation, padding, stride);
  KILN_CHECK(x.size(1) > 0 && x.size(2) > 0 && x.size(3) > 0,
             "unfold: expected non-empty channel and spatial dims, but got input of size {}",
             input.shapeStr());
  ConvGeometry g = blockGeometry("unfold", x.size(1), {x.size(2), x.size(3)}, w);
  DType dt = input.dtype(), compute = computeDType(dt);
  Tensor xc = x.to(compute).contiguous();
  Tensor out = Tensor::empty({x.size(0), g.colRows(), g.outVolume()}, compute, input.device());
  dispatchCompute(compute, [&]<typename T>() {
    const T *src = xc.data<T>();
    T *dst = out.data<T>();
    int64_t inSize = g.channels * g.inVolume(), outSize = g.colRows() * g.outVolume();
    forEachImage(x.size(0), outSize, [&](int64_t n) {
      im2col(g, src + n * inSize, dst + n * outSize, 0, g.outLines());
    });
  });
  if (compute != dt)
    out = out.to(dt);
  return batched ? out : out.squeeze({0});
}

Tensor fold(const Tensor &input, IntList outputSize, IntList kernelSize, IntList dilation,
            IntList padding, IntList stride) {
  KILN_CHECK_KIND(NotImplemented, input.dim() == 2 || input.dim() == 3,
                  "fold: Input Error: Only unbatched (2D) or batched (3D) input Tensors are "
                  "supported (got {}D)",
                  input.dim());
  if (!isFloating(input.dtype()))
    notImplementedFor("fold", input.dtype());
  bool batched = input.dim() == 3;
  Tensor x = batched ? input : input.unsqueeze(0);
  Window2d w = makeWindow("fold", kernelSize, dilation, padding, stride);
  Shape size = expandParam("fold", "output_size", outputSize, 2);
  int64_t kvol = w.kernel[0] * w.kernel[1];
  KILN_CHECK(x.size(1) % kvol == 0,
             "fold: Expected size of input's dimension 1 to be divisible by the product of "
             "kernel_size, but got input.size(1)={} and kernel_size={}",
             x.size(1), shapeToString(w.kernel));
  ConvGeometry g = blockGeometry("fold", x.size(1) / kvol, size, w);
  KILN_CHECK(x.size(2) == g.outVolume(),
             "fold: Given output_size={}, kernel_size={}, dilation={}, padding={}, stride={}, "
             "expected size of input's dimension 2 to match the calculated number of sliding "
             "blocks {} * {} = {}, but got input.size(2)={}",
             shapeToString(size), shapeToString(w.kernel), shapeToString(w.dilation),
             shapeToString(w.padding), shapeToString(w.stride), g.out[1], g.out[2], g.outVolume(),
             x.size(2));
  DType dt = input.dtype(), compute = computeDType(dt);
  Tensor xc = x.to(compute).contiguous();
  Tensor out = Tensor::empty({x.size(0), g.channels, size[0], size[1]}, compute, input.device());
  dispatchCompute(compute, [&]<typename T>() {
    if constexpr (std::is_floating_point_v<T>) {
      const T *src = xc.data<T>();
      T *dst = out.data<T>();
      int64_t inSize = g.colRows() * g.outVolume(), outSize = g.channels * g.inVolume();
      forEachImage(x.size(0), inSize, [&](int64_t n) {
        std::fill(dst + n * outSize, dst + (n + 1) * outSize, T(0));
        col2im(g, src + n * inSize, dst + n * outSize, 0, g.outLines());
      });
    }
  });
  if (compute != dt)
    out = out.to(dt);
  return batched ? out : out.squeeze({0});
}

} // namespace kiln::ops

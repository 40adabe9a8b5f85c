// im2col / col2im over up to three spatial dims, and the shared convolution argument helpers.
#include "runtime/error.h"
#include "runtime/ops/conv_impl.h"

#include <algorithm>
#include <cstring>

namespace kiln::ops::detail {

bool ConvGeometry::isPointwise() const {
  for (int d = 0; d < 3; ++d)
    if (kernel[d] != 1 || stride[d] != 1 || padBefore[d] != 0 || in[d] != out[d])
      return false;
  return true;
}

int64_t linesPerChunk(const ConvGeometry &g, int64_t itemsize) {
  constexpr int64_t kColBudgetBytes = int64_t{16} << 20;
  int64_t lineBytes = std::max<int64_t>(1, g.colRows() * g.out[2] * itemsize);
  return std::clamp<int64_t>(kColBudgetBytes / lineBytes, 1, std::max<int64_t>(1, g.outLines()));
}

Shape expandParam(const char *op, const char *name, IntList v, int64_t nd) {
  if (static_cast<int64_t>(v.size()) == nd)
    return Shape(v.begin(), v.end());
  KILN_CHECK(v.size() == 1,
             "{}: expected {} to be a single integer value or a list of {} values to match the "
             "convolution dimensions, but got {}={}",
             op, name, nd, name, shapeToString(v));
  return Shape(nd, v[0]);
}

void setWindow(ConvGeometry &g, IntList kernel, IntList stride, IntList padBefore,
               IntList dilation) {
  size_t off = 3 - kernel.size();
  for (size_t d = 0; d < kernel.size(); ++d) {
    g.kernel[off + d] = kernel[d];
    g.stride[off + d] = stride[d];
    g.padBefore[off + d] = padBefore[d];
    g.dilation[off + d] = dilation[d];
  }
}

std::string spatialStr(IntList v) {
  std::string s = "(";
  for (size_t i = 0; i < v.size(); ++i)
    s += (i ? " x " : "") + std::to_string(v[i]);
  return s + ")";
}

namespace {

/// The output columns [lo, hi) of one line whose input column ow * stride + offset is inside
/// [0, width); the rest read padding.
inline void validRange(int64_t outW, int64_t width, int64_t stride, int64_t offset, int64_t &lo,
                       int64_t &hi) {
  // ow * stride + offset >= 0  <=>  ow >= ceil(-offset / stride)
  lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  // ow * stride + offset <= width - 1  <=>  ow <= floor((width - 1 - offset) / stride)
  int64_t last = width - 1 - offset;
  hi = last < 0 ? 0 : std::min(outW, last / stride + 1);
  lo = std::min(lo, hi);
}

/// Calls fn(k, kernel offsets, channel) for every row of the column matrix.
template <typename Fn> void forEachColRow(const ConvGeometry &g, Fn &&fn) {
  int64_t k = 0;
  for (int64_t c = 0; c < g.channels; ++c)
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw)
          fn(k++, c, kd, kh, kw);
}

} // namespace

template <typename T>
void im2col(const ConvGeometry &g, const T *image, T *col, int64_t line0, int64_t line1) {
  const int64_t ow = g.out[2], width = line1 - line0;
  forEachColRow(g, [&](int64_t k, int64_t c, int64_t kd, int64_t kh, int64_t kw) {
    T *dst = col + k * width * ow;
    int64_t offW = kw * g.dilation[2] - g.padBefore[2], lo, hi;
    validRange(ow, g.in[2], g.stride[2], offW, lo, hi);
    for (int64_t line = line0; line < line1; ++line, dst += ow) {
      int64_t od = line / g.out[1], oh = line % g.out[1];
      int64_t id = od * g.stride[0] - g.padBefore[0] + kd * g.dilation[0];
      int64_t ih = oh * g.stride[1] - g.padBefore[1] + kh * g.dilation[1];
      if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1] || lo >= hi) {
        std::fill(dst, dst + ow, T(0));
        continue;
      }
      const T *src = image + ((c * g.in[0] + id) * g.in[1] + ih) * g.in[2];
      std::fill(dst, dst + lo, T(0));
      if (g.stride[2] == 1) {
        std::copy(src + lo + offW, src + hi + offW, dst + lo);
      } else {
        for (int64_t x = lo; x < hi; ++x)
          dst[x] = src[x * g.stride[2] + offW];
      }
      std::fill(dst + hi, dst + ow, T(0));
    }
  });
}

template <typename T>
void col2im(const ConvGeometry &g, const T *col, T *image, int64_t line0, int64_t line1) {
  const int64_t ow = g.out[2], width = line1 - line0;
  forEachColRow(g, [&](int64_t k, int64_t c, int64_t kd, int64_t kh, int64_t kw) {
    const T *src = col + k * width * ow;
    int64_t offW = kw * g.dilation[2] - g.padBefore[2], lo, hi;
    validRange(ow, g.in[2], g.stride[2], offW, lo, hi);
    for (int64_t line = line0; line < line1; ++line, src += ow) {
      int64_t od = line / g.out[1], oh = line % g.out[1];
      int64_t id = od * g.stride[0] - g.padBefore[0] + kd * g.dilation[0];
      int64_t ih = oh * g.stride[1] - g.padBefore[1] + kh * g.dilation[1];
      if (id < 0 || id >= g.in[0] || ih < 0 || ih >= g.in[1])
        continue;
      T *dst = image + ((c * g.in[0] + id) * g.in[1] + ih) * g.in[2];
      for (int64_t x = lo; x < hi; ++x)
        dst[x * g.stride[2] + offW] += src[x];
    }
  });
}

// bool only needs im2col (unfold of a mask); col2im sums, which bool has no use for.
template void im2col<bool>(const ConvGeometry &, const bool *, bool *, int64_t, int64_t);
#define KILN_INSTANTIATE_IM2COL(T)                                                                 \
  template void im2col<T>(const ConvGeometry &, const T *, T *, int64_t, int64_t);                 \
  template void col2im<T>(const ConvGeometry &, const T *, T *, int64_t, int64_t);
KILN_INSTANTIATE_IM2COL(uint8_t)
KILN_INSTANTIATE_IM2COL(int8_t)
KILN_INSTANTIATE_IM2COL(int16_t)
KILN_INSTANTIATE_IM2COL(int32_t)
KILN_INSTANTIATE_IM2COL(int64_t)
KILN_INSTANTIATE_IM2COL(float)
KILN_INSTANTIATE_IM2COL(double)
#undef KILN_INSTANTIATE_IM2COL

} // namespace kiln::ops::detail

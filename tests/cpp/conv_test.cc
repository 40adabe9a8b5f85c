// Forward convolution against a naive float64 reference: the direct stride-1 float32 kernel
// (AVX-512 CPUs), the im2col + GEMM path it falls back to, and thread-count independence.
#include "runtime/ops/conv.h"
#include "runtime/thread_pool.h"

#include <kiln_catch.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

using namespace kiln;

namespace {

/// A float32 tensor of `sizes` filled with a fixed pseudo-random sequence in [-1, 1).
Tensor filled(Shape sizes, uint32_t seed) {
  Tensor t = Tensor::empty(sizes, DType::Float32);
  float *p = t.data<float>();
  uint32_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    s = s * 1664525u + 1013904223u;
    p[i] = static_cast<float>((s >> 8) * (1.0 / (1 << 23)) - 1.0);
  }
  return t;
}

/// One 2-D convolution case: [n, c, h, w] input, [o, c / groups, kh, kw] weight.
struct Case {
  Shape input, weight;
  int64_t stride, pad, dilation, groups;
  bool bias;
};

/// The convolution in float64 with explicit loops (symmetric padding).
std::vector<double> reference(const Case &k, const Tensor &x, const Tensor &w,
                              const std::optional<Tensor> &b, Shape &outShape) {
  int64_t n = k.input[0], c = k.input[1], h = k.input[2], wd = k.input[3];
  int64_t o = k.weight[0], cg = k.weight[1], kh = k.weight[2], kw = k.weight[3];
  int64_t og = o / k.groups;
  int64_t oh = (h + 2 * k.pad - k.dilation * (kh - 1) - 1) / k.stride + 1;
  int64_t ow = (wd + 2 * k.pad - k.dilation * (kw - 1) - 1) / k.stride + 1;
  outShape = {n, o, oh, ow};
  const float *xp = x.data<float>(), *wp = w.data<float>();
  std::vector<double> out(n * o * oh * ow);
  for (int64_t ni = 0; ni < n; ++ni)
    for (int64_t oi = 0; oi < o; ++oi)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          double acc = b ? b->data<float>()[oi] : 0.0;
          int64_t g = oi / og;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                int64_t iy = y * k.stride - k.pad + i * k.dilation;
                int64_t iz = z * k.stride - k.pad + j * k.dilation;
                if (iy < 0 || iy >= h || iz < 0 || iz >= wd)
                  continue;
                acc += double(xp[((ni * c + g * cg + ci) * h + iy) * wd + iz]) *
                       wp[((oi * cg + ci) * kh + i) * kw + j];
              }
          out[((ni * o + oi) * oh + y) * ow + z] = acc;
        }
  return out;
}

Tensor run(const Case &k, const Tensor &x, const Tensor &w, const std::optional<Tensor> &b) {
  ops::ConvOptions opts;
  opts.stride = {k.stride};
  opts.padding = {k.pad};
  opts.dilation = {k.dilation};
  opts.groups = k.groups;
  return ops::convolution(2, x, w, b, opts);
}

void checkCase(const Case &k) {
  Tensor x = filled(k.input, 1), w = filled(k.weight, 2);
  std::optional<Tensor> b;
  if (k.bias)
    b = filled({k.weight[0]}, 3);
  Shape outShape;
  std::vector<double> want = reference(k, x, w, b, outShape);
  Tensor got = run(k, x, w, b);
  REQUIRE(got.sizes() == outShape);
  const float *g = got.data<float>();
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::abs(g[i] - want[i]) / (1.0 + std::abs(want[i])));
  CHECK(worst < 2e-5);
}

} // namespace

TEST_CASE("conv2d equals the float64 reference on the direct and im2col paths", "[conv]") {
  const std::vector<Case> cases = {
      {{1, 64, 56, 56}, {64, 64, 3, 3}, 1, 1, 1, 1, false}, // the ResNet block shape
      {{2, 16, 13, 11}, {24, 16, 3, 3}, 1, 1, 1, 1, true},  // odd sizes, batch > 1, bias
      {{3, 5, 9, 7}, {12, 5, 3, 3}, 1, 0, 1, 1, true},      // no padding; 12 = 8 + 4 channels
      {{1, 8, 20, 17}, {8, 8, 5, 3}, 1, 2, 1, 1, false},    // pad wider than a 3-wide window
      {{2, 8, 15, 15}, {16, 8, 3, 3}, 1, 2, 2, 1, true},    // dilated
      {{2, 8, 12, 10}, {16, 4, 3, 3}, 1, 1, 1, 2, true},    // groups
      {{1, 3, 40, 40}, {9, 3, 7, 7}, 1, 3, 1, 1, true},     // few input channels, wide kernel
      {{1, 4, 1, 30}, {8, 4, 1, 5}, 1, 0, 1, 1, false},     // one output row
      {{2, 6, 7, 9}, {6, 6, 1, 1}, 1, 0, 1, 1, true},       // pointwise: GEMM on the input
      {{2, 6, 7, 9}, {6, 6, 1, 1}, 1, 1, 1, 1, true},       // 1x1 with padding
      {{2, 8, 13, 13}, {16, 8, 3, 3}, 2, 1, 1, 1, true},    // strided: im2col
      {{2, 32, 7, 7}, {48, 32, 3, 3}, 1, 1, 1, 1, true},    // mostly padding: im2col
      {{2, 6, 9, 9}, {6, 1, 3, 3}, 1, 1, 1, 6, true},       // depthwise: im2col
  };
  for (const Case &k : cases) {
    INFO("input " << shapeToString(k.input) << " weight " << shapeToString(k.weight) << " stride "
                  << k.stride << " pad " << k.pad << " dilation " << k.dilation << " groups "
                  << k.groups);
    setNumThreads(1);
    checkCase(k);
    setNumThreads(4);
    checkCase(k);
  }
  setNumThreads(0);
}

TEST_CASE("conv2d results do not depend on the thread count", "[conv]") {
  // One image over several threads is split by positions only in the direct (AVX-512) kernel;
  // elsewhere it is im2col + OpenBLAS, whose sums follow the thread count.
  bool direct = __builtin_cpu_supports("avx512f");
  for (Shape input : {Shape{1, 32, 30, 30}, Shape{5, 32, 30, 30}}) {
    if (input[0] == 1 && !direct)
      continue;
    Case k{input, {40, 32, 3, 3}, 1, 1, 1, 1, true};
    Tensor x = filled(k.input, 4), w = filled(k.weight, 5);
    std::optional<Tensor> b = filled({40}, 6);
    setNumThreads(1);
    Tensor one = run(k, x, w, b);
    setNumThreads(3);
    Tensor three = run(k, x, w, b);
    setNumThreads(0);
    REQUIRE(one.numel() == three.numel());
    for (int64_t i = 0; i < one.numel(); ++i)
      REQUIRE(one.data<float>()[i] == three.data<float>()[i]);
  }
}

TEST_CASE("conv1d and conv3d with stride 1 equal conv2d with unit dims", "[conv]") {
  Tensor x = filled({2, 8, 6, 7, 9}, 7), w = filled({12, 8, 3, 2, 3}, 8);
  ops::ConvOptions o;
  o.padding = {1};
  Tensor y3 = ops::convolution(3, x, w, std::nullopt, o);
  // Depth as a sum of 2-D convolutions over each (output depth, kernel depth) pair.
  REQUIRE(y3.sizes() == Shape{2, 12, 6, 8, 9});
  for (int64_t d = 0; d < 6; ++d) {
    std::vector<double> want(2 * 12 * 8 * 9, 0.0);
    for (int64_t kd = 0; kd < 3; ++kd) {
      int64_t id = d - 1 + kd;
      if (id < 0 || id >= 6)
        continue;
      Tensor xs = x.select(2, id).contiguous(), ws = w.select(2, kd).contiguous();
      ops::ConvOptions o2;
      o2.padding = {1};
      Tensor y2 = ops::convolution(2, xs, ws, std::nullopt, o2);
      for (int64_t i = 0; i < y2.numel(); ++i)
        want[i] += y2.data<float>()[i];
    }
    Tensor got = y3.select(2, d).contiguous();
    for (int64_t i = 0; i < got.numel(); ++i)
      REQUIRE(std::abs(got.data<float>()[i] - want[i]) < 1e-4);
  }
  Tensor x1 = filled({3, 8, 50}, 9), w1 = filled({16, 8, 5}, 10);
  ops::ConvOptions o1;
  o1.padding = {2};
  o1.dilation = {2};
  Tensor y1 = ops::convolution(1, x1, w1, std::nullopt, o1);
  Tensor y2 = ops::convolution(2, x1.unsqueeze(2), w1.unsqueeze(2), std::nullopt, [] {
    ops::ConvOptions o;
    o.padding = {0, 2};
    o.dilation = {1, 2};
    return o;
  }());
  REQUIRE(y1.sizes() == Shape{3, 16, 46});
  for (int64_t i = 0; i < y1.numel(); ++i)
    REQUIRE(y1.data<float>()[i] == y2.contiguous().data<float>()[i]);
}

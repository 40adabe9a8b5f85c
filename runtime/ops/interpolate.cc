// Nearest and (bi/tri)linear upsampling with torch's source-index arithmetic (ATen UpSample.h):
// per-axis index/weight tables, then a gather (nearest) or a nested 2-tap blend (linear).
#include "runtime/ops/interpolate.h"

#include "runtime/error.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/index.h"
#include "runtime/ops/linalg_impl.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace kiln::ops {

using namespace detail;

namespace {

/// The batched input seen as `planes` images of in[0..2] -> out[0..2] (leading unit axes).
struct UpsamplePlan {
  int64_t nd = 0;
  int64_t planes = 0;
  std::array<int64_t, 3> in{1, 1, 1}, out{1, 1, 1};
  Shape outShape;
  int64_t inVolume() const { return in[0] * in[1] * in[2]; }
  int64_t outVolume() const { return out[0] * out[1] * out[2]; }
};

std::string sizesStr(int64_t nd, IntList v) {
  static const char *names[] = {"D", "H", "W"};
  std::string s = "(";
  for (int64_t d = 0; d < nd; ++d)
    s += fmt::format("{}{}: {}", d ? ", " : "", names[3 - nd + d], v[d]);
  return s + ")";
}

UpsamplePlan planUpsample(const char *op, const Tensor &input, IntList outputSize,
                          const UpsampleScales &scales) {
  int64_t nd = input.dim() - 2;
  KILN_CHECK(nd >= 1 && nd <= 3,
             "{}: expected a 3-D, 4-D or 5-D input ([N, C, *spatial]), but got input of size {}",
             op, input.shapeStr());
  KILN_CHECK(static_cast<int64_t>(outputSize.size()) == nd,
             "{}: expected output_size to have {} elements, but got {}", op, nd,
             shapeToString(outputSize));
  KILN_CHECK(scales.empty() || static_cast<int64_t>(scales.size()) == nd,
             "{}: expected {} scale factors, but got {}", op, nd, scales.size());
  Shape in(input.sizes().begin() + 2, input.sizes().end());
  bool ok = true;
  for (int64_t d = 0; d < nd; ++d)
    ok = ok && in[d] > 0 && outputSize[d] > 0;
  KILN_CHECK(ok, "{}: Input and output sizes should be greater than 0, but got input {} output {}",
             op, sizesStr(nd, in), sizesStr(nd, outputSize));
  UpsamplePlan p;
  p.nd = nd;
  p.planes = input.size(0) * input.size(1);
  p.outShape = {input.size(0), input.size(1)};
  for (int64_t d = 0; d < nd; ++d) {
    p.in[3 - nd + d] = in[d];
    p.out[3 - nd + d] = outputSize[d];
    p.outShape.push_back(outputSize[d]);
  }
  return p;
}

std::optional<double> scaleOf(const UpsampleScales &scales, int64_t d) {
  return scales.empty() ? std::nullopt : scales[d];
}

/// torch's compute_scales_value / area_pixel_compute_scale.
template <typename O>
O computeScale(int64_t in, int64_t out, bool alignCorners, std::optional<double> scale) {
  if (alignCorners)
    return out > 1 ? static_cast<O>(in - 1) / static_cast<O>(out - 1) : O(0);
  return (scale && *scale > 0.) ? static_cast<O>(1.0 / *scale)
                                : static_cast<O>(in) / static_cast<O>(out);
}

/// torch's generic nearest indices (HelperInterpNearest(Exact), used for 1-D and 3-D): the
/// source coordinate in the op-math type O (double for float64 inputs, else float).
template <typename O>
std::vector<int64_t> nearestIndices(int64_t in, int64_t out, std::optional<double> scale,
                                    bool exact) {
  std::vector<int64_t> idx(out);
  O s = computeScale<O>(in, out, false, scale);
  for (int64_t o = 0; o < out; ++o) {
    O real = s * static_cast<O>(o);
    if (exact) {
      real = s * (static_cast<O>(o) + O(0.5)) - O(0.5);
      real = (real < O(0) ? O(0) : real) + O(0.5);
    }
    idx[o] = std::min(static_cast<int64_t>(std::floor(static_cast<float>(real))), in - 1);
  }
  return idx;
}

/// torch's nearest_idx / nearest_exact_idx (ATen UpSample.h, used by its 2-D kernel): a float
/// scale, and for 'nearest' the shortcuts out == in and out == 2 * in.
std::vector<int64_t> nearestIndices2d(int64_t in, int64_t out, std::optional<double> scale,
                                      bool exact) {
  std::vector<int64_t> idx(out);
  float s = computeScale<float>(in, out, false, scale);
  for (int64_t o = 0; o < out; ++o) {
    if (!exact && out == in)
      idx[o] = o;
    else if (!exact && out == 2 * in)
      idx[o] = o >> 1;
    else if (exact)
      idx[o] =
          std::min(static_cast<int64_t>(std::floor(static_cast<float>((o + 0.5) * s))), in - 1);
    else
      idx[o] = std::min(static_cast<int64_t>(std::floor(o * s)), in - 1);
  }
  return idx;
}

/// Gathers out[p, d, h, w] = in[p, id[d], ih[h], iw[w]] on raw elements of U's size.
template <typename U>
void nearestKernel(const UpsamplePlan &p, const std::array<std::vector<int64_t>, 3> &idx,
                   const U *in, U *out) {
  int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, p.outVolume()));
  parallelFor(0, p.planes, grain, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl) {
      const U *src = in + pl * p.inVolume();
      U *dst = out + pl * p.outVolume();
      for (int64_t od = 0; od < p.out[0]; ++od)
        for (int64_t oh = 0; oh < p.out[1]; ++oh) {
          const U *row = src + (idx[0][od] * p.in[1] + idx[1][oh]) * p.in[2];
          for (int64_t ow = 0; ow < p.out[2]; ++ow)
            *dst++ = row[idx[2][ow]];
        }
    }
  });
}

/// One axis of a linear resample: out[o] = w0[o] * in[i0[o]] + w1[o] * in[i1[o]].
template <typename O> struct LinearTaps {
  std::vector<int64_t> i0, i1;
  std::vector<O> w0, w1;
};

/// Rounds a weight through the input's storage type, as torch stores its weight tables.
template <typename O> O storeWeight(O w, DType dt) {
  if (dt == DType::Float16)
    return static_cast<O>(static_cast<float>(Half(static_cast<float>(w))));
  if (dt == DType::BFloat16)
    return static_cast<O>(static_cast<float>(BFloat16(static_cast<float>(w))));
  return w;
}

/// torch's compute_source_index_and_lambda for every output index of one axis.
template <typename O>
LinearTaps<O> linearTaps(int64_t in, int64_t out, bool alignCorners, std::optional<double> scale,
                         DType dt) {
  LinearTaps<O> t;
  O ratio = computeScale<O>(in, out, alignCorners, scale);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i0 = o;
    O l1 = 0;
    if (out != in) {
      O real = alignCorners ? ratio * o : ratio * (o + O(0.5)) - O(0.5);
      if (!alignCorners && real < O(0))
        real = O(0);
      i0 = std::min(static_cast<int64_t>(std::floor(static_cast<float>(real))), in - 1);
      l1 = std::min(std::max(real - static_cast<O>(i0), O(0)), O(1));
    }
    l1 = storeWeight(l1, dt);
    t.i0.push_back(i0);
    t.i1.push_back(i0 + (out != in && i0 < in - 1 ? 1 : 0));
    t.w0.push_back(storeWeight(O(1) - l1, dt));
    t.w1.push_back(l1);
  }
  return t;
}

/// Converts a blended value to the output type (uint8 rounds and saturates).
template <typename T, typename O> T finish(O v) {
  if constexpr (std::is_same_v<T, uint8_t>)
    return static_cast<T>(std::clamp<O>(std::nearbyint(v), O(0), O(255)));
  else
    return static_cast<T>(v);
}

/// The nested 2-tap blend of one output plane, in torch's evaluation order (outer axis last).
template <typename T, typename O>
void linearPlane(const UpsamplePlan &p, const std::array<LinearTaps<O>, 3> &tp, const T *src,
                 T *dst) {
  const LinearTaps<O> &td = tp[0], &th = tp[1], &tw = tp[2];
  auto blendW = [&](const T *row, int64_t ow) {
    return static_cast<O>(row[tw.i0[ow]]) * tw.w0[ow] + static_cast<O>(row[tw.i1[ow]]) * tw.w1[ow];
  };
  const int64_t hw = p.in[1] * p.in[2], w = p.in[2];
  for (int64_t od = 0; od < p.out[0]; ++od)
    for (int64_t oh = 0; oh < p.out[1]; ++oh) {
      const T *r00 = src + td.i0[od] * hw + th.i0[oh] * w,
              *r01 = src + td.i0[od] * hw + th.i1[oh] * w;
      const T *r10 = src + td.i1[od] * hw + th.i0[oh] * w,
              *r11 = src + td.i1[od] * hw + th.i1[oh] * w;
      for (int64_t ow = 0; ow < p.out[2]; ++ow) {
        O v;
        if (p.nd == 1) {
          v = blendW(r00, ow);
        } else {
          O a = blendW(r00, ow) * th.w0[oh] + blendW(r01, ow) * th.w1[oh];
          if (p.nd == 2) {
            v = a;
          } else {
            O b = blendW(r10, ow) * th.w0[oh] + blendW(r11, ow) * th.w1[oh];
            v = a * td.w0[od] + b * td.w1[od];
          }
        }
        *dst++ = finish<T, O>(v);
      }
    }
}

template <typename T, typename O>
void linearKernel(const UpsamplePlan &p, bool alignCorners, const UpsampleScales &scales, DType dt,
                  const T *in, T *out) {
  std::array<LinearTaps<O>, 3> taps;
  for (int a = 0; a < 3; ++a) {
    int64_t d = a - (3 - p.nd);
    taps[a] = linearTaps<O>(p.in[a], p.out[a], alignCorners,
                            d >= 0 ? scaleOf(scales, d) : std::nullopt, dt);
  }
  int64_t grain = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(1, p.outVolume()));
  parallelFor(0, p.planes, grain, [&](int64_t b, int64_t e) {
    for (int64_t pl = b; pl < e; ++pl)
      linearPlane<T, O>(p, taps, in + pl * p.inVolume(), out + pl * p.outVolume());
  });
}

const char *nearestName(int64_t nd, bool exact) {
  static const char *names[2][3] = {
      {"upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d"},
      {"_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d"}};
  return names[exact][std::clamp<int64_t>(nd, 1, 3) - 1];
}

const char *linearName(int64_t nd) {
  static const char *names[] = {"upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d"};
  return names[std::clamp<int64_t>(nd, 1, 3) - 1];
}

/// The nearest source index of every output index of spatial axis `a` (as the forward uses).
std::vector<int64_t> nearestAxis(const UpsamplePlan &p, int a, const UpsampleScales &scales,
                                 bool exact, DType dt) {
  int64_t d = a - (3 - p.nd);
  auto scale = d >= 0 ? scaleOf(scales, d) : std::nullopt;
  if (p.nd == 2)
    return nearestIndices2d(p.in[a], p.out[a], scale, exact);
  if (dt == DType::Float64)
    return nearestIndices<double>(p.in[a], p.out[a], scale, exact);
  return nearestIndices<float>(p.in[a], p.out[a], scale, exact);
}

Tensor indexTensor(const std::vector<int64_t> &v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::Int64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

/// `g` with dim `dim` (its size out) folded back to size `in`: each slice added at idx[o], times
/// weight[o] when given (the transpose of one axis's interpolation).
Tensor foldAxis(const Tensor &g, int64_t dim, int64_t in, const std::vector<int64_t> &idx,
                const Tensor &weight) {
  Shape sizes = g.sizes();
  sizes[dim] = in;
  Tensor out = zeros(sizes, g.dtype());
  Tensor src = g;
  if (weight.defined()) {
    Shape view(g.dim(), 1);
    view[dim] = weight.numel();
    src = mul(g, weight.to(g.dtype()).view(view));
  }
  indexAdd_(out, dim, indexTensor(idx), src.contiguous());
  return out;
}

/// The grad of an upsample's input: its output grad folded back axis by axis (both modes are
/// separable), in the compute dtype.
template <typename Fold>
Tensor foldAxes(const char *op, const Tensor &grad, IntList inputSize, Fold fold) {
  KILN_CHECK(grad.dim() == static_cast<int64_t>(inputSize.size()) && grad.dim() >= 3,
             "{} backward: a gradient of rank {} for an input of rank {}", op, grad.dim(),
             inputSize.size());
  int64_t nd = grad.dim() - 2;
  Tensor g = grad.to(computeDType(grad.dtype()));
  for (int64_t k = 0; k < nd; ++k) {
    int a = static_cast<int>(3 - nd + k);
    g = fold(g, k + 2, a);
  }
  return g.to(grad.dtype());
}

UpsamplePlan backwardPlan(const char *op, const Tensor &grad, IntList inputSize) {
  // A stride-0 view of the input's sizes: planning reads sizes only, so nothing is allocated.
  Tensor like = Tensor::empty({}, grad.dtype()).expand(Shape(inputSize.begin(), inputSize.end()));
  Shape outSize(grad.sizes().begin() + 2, grad.sizes().end());
  return planUpsample(op, like, outSize, {});
}

} // namespace

Tensor upsampleNearestBackward(const Tensor &grad, IntList inputSize, const UpsampleScales &scales,
                               bool exact) {
  const char *op = nearestName(grad.dim() - 2, exact);
  UpsamplePlan p = backwardPlan(op, grad, inputSize);
  return foldAxes(op, grad, inputSize, [&](const Tensor &g, int64_t dim, int a) {
    return foldAxis(g, dim, p.in[a], nearestAxis(p, a, scales, exact, grad.dtype()), Tensor());
  });
}

Tensor upsampleLinearBackward(const Tensor &grad, IntList inputSize, bool alignCorners,
                              const UpsampleScales &scales) {
  const char *op = linearName(grad.dim() - 2);
  UpsamplePlan p = backwardPlan(op, grad, inputSize);
  return foldAxes(op, grad, inputSize, [&](const Tensor &g, int64_t dim, int a) {
    int64_t d = a - (3 - p.nd);
    auto scale = d >= 0 ? scaleOf(scales, d) : std::nullopt;
    auto fold = [&](const auto &taps) {
      using O = typename std::decay_t<decltype(taps.w0)>::value_type;
      Tensor w0 = Tensor::empty({p.out[a]}, sizeof(O) == 8 ? DType::Float64 : DType::Float32);
      Tensor w1 = Tensor::empty({p.out[a]}, w0.dtype());
      std::copy(taps.w0.begin(), taps.w0.end(), w0.data<O>());
      std::copy(taps.w1.begin(), taps.w1.end(), w1.data<O>());
      return add(foldAxis(g, dim, p.in[a], taps.i0, w0), foldAxis(g, dim, p.in[a], taps.i1, w1));
    };
    if (grad.dtype() == DType::Float64)
      return fold(linearTaps<double>(p.in[a], p.out[a], alignCorners, scale, grad.dtype()));
    return fold(linearTaps<float>(p.in[a], p.out[a], alignCorners, scale, grad.dtype()));
  });
}

Tensor upsampleNearest(const Tensor &input, IntList outputSize, const UpsampleScales &scales,
                       bool exact) {
  const char *op = nearestName(input.dim() - 2, exact);
  if (!isFloating(input.dtype()) && input.dtype() != DType::UInt8)
    notImplementedFor(op, input.dtype());
  UpsamplePlan p = planUpsample(op, input, outputSize, scales);
  std::array<std::vector<int64_t>, 3> idx;
  for (int a = 0; a < 3; ++a) {
    int64_t d = a - (3 - p.nd);
    auto scale = d >= 0 ? scaleOf(scales, d) : std::nullopt;
    if (p.nd == 2)
      idx[a] = nearestIndices2d(p.in[a], p.out[a], scale, exact);
    else if (input.dtype() == DType::Float64)
      idx[a] = nearestIndices<double>(p.in[a], p.out[a], scale, exact);
    else
      idx[a] = nearestIndices<float>(p.in[a], p.out[a], scale, exact);
  }
  Tensor x = input.contiguous();
  Tensor out = Tensor::empty(p.outShape, input.dtype(), input.device());
  // A gather moves bits, so one instantiation per element size serves every dtype.
  switch (input.itemsize()) {
  case 1:
    nearestKernel(p, idx, x.data<uint8_t>(), out.data<uint8_t>());
    break;
  case 2:
    nearestKernel(p, idx, x.data<uint16_t>(), out.data<uint16_t>());
    break;
  case 4:
    nearestKernel(p, idx, x.data<uint32_t>(), out.data<uint32_t>());
    break;
  default:
    nearestKernel(p, idx, x.data<uint64_t>(), out.data<uint64_t>());
    break;
  }
  return out;
}

Tensor upsampleLinear(const Tensor &input, IntList outputSize, bool alignCorners,
                      const UpsampleScales &scales) {
  int64_t nd = input.dim() - 2;
  const char *op = linearName(nd);
  DType dt = input.dtype();
  if (!isFloating(dt) && !(dt == DType::UInt8 && nd == 2))
    notImplementedFor(op, dt);
  UpsamplePlan p = planUpsample(op, input, outputSize, scales);
  DType compute = computeDType(dt);
  Tensor x = input.to(compute).contiguous();
  Tensor out = Tensor::empty(p.outShape, compute, input.device());
  if (compute == DType::Float64)
    linearKernel<double, double>(p, alignCorners, scales, dt, x.data<double>(), out.data<double>());
  else if (compute == DType::Float32)
    linearKernel<float, float>(p, alignCorners, scales, dt, x.data<float>(), out.data<float>());
  else
    linearKernel<uint8_t, float>(p, alignCorners, scales, dt, x.data<uint8_t>(),
                                 out.data<uint8_t>());
  return compute == dt ? out : out.to(dt);
}

} // namespace kiln::ops

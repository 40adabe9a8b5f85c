// Shape rules of the model-zoo ops: arange's length and the pooled sizes of max_pool2d,
// avg_pool2d and adaptive_avg_pool2d (torch's formulas). batch_norm and contiguous keep their
// input's sizes (shape_rules.cc).

#include "ir/shape_rules_nn_impl.h"
#include "ir/verifier_impl.h"

namespace kiln::ir::detail {

DType arangeDType(const Node &n) {
  const Attribute *a = n.attr("dtype");
  return a ? a->toDType() : DType::Int64;
}

std::vector<SymInt> fullSizes(const Node &n) {
  std::vector<SymInt> sizes = n.attr("size")->toSymInts();
  for (const SymInt &s : sizes)
    if (std::optional<int64_t> c = s.constant(); c && *c < 0)
      ruleFails("full: negative dimension {} in size {}", *c, printSizes(sizes));
  return sizes;
}

std::vector<SymInt> arangeSizes(const Node &n) {
  int64_t start = intAttrOr(n, "start", 0), step = intAttrOr(n, "step", 1);
  SymInt end = n.attr("end")->toSymInt();
  if (step == 0)
    ruleFails("arange's step must be nonzero");
  SymInt span = end - SymInt(start);
  if (std::optional<int64_t> c = span.constant()) {
    if ((*c > 0 && step < 0) || (*c < 0 && step > 0))
      ruleFails("arange's bounds [{}, {}) disagree with the sign of its step {}", start, *c + start,
                step);
    int64_t count = step > 0 ? (*c + step - 1) / step : (-*c - step - 1) / -step;
    return {SymInt(count)};
  }
  if (step < 0)
    ruleFails("arange with a symbolic end needs a positive step, got {}", step);
  // Guards establish end >= start, as they do for a slice's symbolic bounds.
  return {step == 1 ? span : floorDiv(span + SymInt(step - 1), SymInt(step))};
}

namespace {

/// A pool size list as two values: one value serves both dims; an absent list is `fallback`.
std::array<int64_t, 2> pair(const Node &n, std::string_view name, std::array<int64_t, 2> fallback) {
  const Attribute *a = n.attr(name);
  if (!a)
    return fallback;
  std::vector<int64_t> v = a->toInts();
  if (v.size() == 1)
    return {v[0], v[0]};
  if (v.size() != 2)
    ruleFails("'{}' of {} needs 1 or 2 values, got {}", name, n.keyword(), a->str());
  return {v[0], v[1]};
}

/// The channel-leading rank check shared by the pools: [C, H, W] or [N, C, H, W].
const TensorMeta &poolInput(const Node &n) {
  const TensorMeta &x = tensorOperand(n, 0);
  if (x.rank() != 3 && x.rank() != 4)
    ruleFails("{} needs a 3-d or 4-d input, got {}", n.keyword(), printSizes(x.sizes));
  return x;
}

/// torch's pooling_output_shape: windows that start inside the input or its left padding.
SymInt pooledSize(const SymInt &in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceilMode,
                  const Node &n) {
  int64_t reach = d * (k - 1) + 1; // the span one window covers
  SymInt span = in + SymInt(2 * p - reach + (ceilMode ? s - 1 : 0));
  SymInt out = floorDiv(span, SymInt(s)) + SymInt(1);
  if (ceilMode) {
    // The last window must start inside the input or the left padding: (out - 1) * s < in + p.
    if (std::optional<int64_t> c = in.constant()) {
      int64_t o = *out.constant();
      if ((o - 1) * s >= *c + p)
        out = SymInt(o - 1);
    } else if (p + s > reach) { // the correction depends on the size: no single expression
      ruleFails("{} with ceil_mode needs a constant spatial size unless padding + stride <= the "
                "window span, got size {}",
                n.keyword(), in.str());
    }
  }
  if (std::optional<int64_t> c = out.constant(); c && *c < 1)
    ruleFails("{} of spatial size {} gives an output size {} (too small for the window)",
              n.keyword(), in.str(), *c);
  return out;
}

} // namespace

PoolWindow poolWindow(const Node &n) {
  PoolWindow w;
  w.kernel = pair(n, "kernel_size", {0, 0});
  w.stride = pair(n, "stride", w.kernel);
  if (const Attribute *a = n.attr("stride"); a && a->toInts().empty())
    w.stride = w.kernel; // torch's stride=[]: the kernel size
  w.padding = pair(n, "padding", {0, 0});
  w.dilation = pair(n, "dilation", {1, 1});
  const Attribute *ceil = n.attr("ceil_mode");
  w.ceilMode = ceil && ceil->toBool();
  for (int i = 0; i < 2; ++i) {
    if (w.kernel[i] < 1 || w.stride[i] < 1 || w.dilation[i] < 1)
      ruleFails("{} needs kernel_size, stride and dilation >= 1, got {}, {} and {}", n.keyword(),
                w.kernel[i], w.stride[i], w.dilation[i]);
    if (w.padding[i] < 0 || w.padding[i] > w.kernel[i] / 2)
      ruleFails("{} padding {} must be between 0 and half the kernel size {}", n.keyword(),
                w.padding[i], w.kernel[i]);
  }
  return w;
}

std::vector<SymInt> poolSizes(const Node &n) {
  const TensorMeta &x = poolInput(n);
  int64_t h = x.rank() - 2;
  std::vector<SymInt> out(x.sizes.begin(), x.sizes.begin() + h);
  if (n.op() == OpKind::AdaptiveAvgPool2d) {
    std::vector<int64_t> size = n.attr("output_size")->toInts();
    if (size.size() == 1)
      size.push_back(size[0]);
    if (size.size() != 2 || size[0] < 1 || size[1] < 1)
      ruleFails("adaptive_avg_pool2d's output_size must be 1 or 2 positive ints, got {}",
                n.attr("output_size")->str());
    out.push_back(size[0]);
    out.push_back(size[1]);
    return out;
  }
  PoolWindow w = poolWindow(n);
  for (int i = 0; i < 2; ++i)
    out.push_back(pooledSize(x.sizes[h + i], w.kernel[i], w.stride[i], w.padding[i], w.dilation[i],
                             w.ceilMode, n));
  return out;
}

} // namespace kiln::ir::detail

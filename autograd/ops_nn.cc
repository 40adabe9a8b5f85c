// Differentiable nn ops: layer_norm and embedding have rules; the losses and attention run as
// their decomposition into differentiable ops while recording (their fused kernels otherwise).
#include "autograd/autocast.h"
#include "autograd/derivatives_layout.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/error.h"
#include "runtime/ops/compare.h"
#include "runtime/ops/factory.h"

#include <cmath>
#include <limits>

namespace kiln::autograd::ops {
namespace {
using rules::infoOf;
using rules::Needs;
using B = EagerBuilder;

/// weight (C) viewed to broadcast along dim 1 of a rank-`rank` input (dim 0 when rank is 1).
Tensor classWeight(const Tensor &weight, int64_t rank) {
  Shape sizes(std::max<int64_t>(rank, 1), 1);
  sizes[rank == 1 ? 0 : 1] = weight.numel();
  return autograd::reshape(weight, sizes);
}

/// torch's class-weighted losses take the weight as a constant.
void checkWeightConstant(const Tensor &weight) {
  KILN_CHECK(!anyRequiresGrad({&weight}),
             "The function 'nll_loss_forward' is not differentiable with respect to argument "
             "'weight'. This input cannot have requires_grad True.");
}

} // namespace

Tensor reduced(const Tensor &perElement, Reduction reduction) {
  if (reduction == Reduction::None)
    return perElement;
  return reduction == Reduction::Sum ? sum(perElement) : mean(perElement);
}

Tensor layerNorm(const Tensor &input_, IntList normalizedShape, const Tensor &weight_,
                 const Tensor &bias_, double eps) {
  const Tensor input = autocast::widenOnCuda(input_);
  const Tensor weight = autocast::widenOnCuda(weight_);
  const Tensor bias = autocast::widenOnCuda(bias_);
  Tensor out = kiln::ops::layerNorm(input, normalizedShape, weight, bias, eps);
  record("NativeLayerNormBackward0", {&input, &weight, &bias}, out, [&](const NodePtr &) {
    std::optional<rules::InputInfo<B>> bi;
    if (bias.defined())
      bi = infoOf<B>(bias);
    return [sx = SavedTensor(input), sw = SavedTensor(weight), bi,
            shape = Shape(normalizedShape.begin(), normalizedShape.end()),
            eps](B &bd, const Node &n, Grads &g) {
      std::optional<Tensor> w;
      if (sw.defined())
        w = sw.unpack(n);
      Tensor x = sx.unpack(n);
      Needs need = Needs::of(n);
      if (!isGradEnabled() && x.isCpu() && g[0].isCpu()) { // one fused pass per row
        auto r = kiln::ops::layerNormBackward(g[0], x, shape, w ? *w : Tensor(), eps, need[0],
                                              need[1] && w, need[2] && bi);
        // parameters wider than the input (float32 under autocast) get their own dtype back
        if (r.weight.defined() && w)
          r.weight = r.weight.to(w->dtype());
        if (r.bias.defined() && bi)
          r.bias = r.bias.to(bi->dtype);
        return Grads{r.input, r.weight, r.bias};
      }
      return rules::layerNorm(bd, g[0], x, w, bi, static_cast<int64_t>(shape.size()), eps, need);
    };
  });
  return out;
}

Tensor rmsNorm(const Tensor &input, IntList normalizedShape, const Tensor &weight,
               std::optional<double> eps) {
  if (!anyRequiresGrad({&input, &weight}))
    return kiln::ops::rmsNorm(input, normalizedShape, weight, eps);
  // The kernel checks the arguments (and is the result on a device, where the decomposition
  // does not run yet).
  Tensor out = kiln::ops::rmsNorm(input, normalizedShape, weight, eps);
  if (recordUnsupportedOnDevice("rms_norm", {&input, &weight}, out))
    return out;
  Shape dims;
  for (size_t i = 0; i < normalizedShape.size(); ++i)
    dims.push_back(input.dim() - static_cast<int64_t>(normalizedShape.size() - i));
  // torch's default eps is the dtype's machine epsilon.
  double e = eps ? *eps
                 : (input.dtype() == DType::Float64 ? std::numeric_limits<double>::epsilon()
                                                    : std::numeric_limits<float>::epsilon());
  Tensor ms = mean(mul(input, input), DimList(dims), true);
  Tensor y = mul(input, rsqrt(add(ms, number(e))));
  // The kernel's dtype (the input's), also for a weight of a wider dtype (autocast's float32
  // parameters with a bfloat16 input), as torch's.
  return weight.defined() ? autograd::to(mul(y, weight), out.dtype()) : y;
}

Tensor groupNorm(const Tensor &input_, int64_t numGroups, const Tensor &weight_,
                 const Tensor &bias_, double eps) {
  const Tensor input = autocast::widenOnCuda(input_);
  const Tensor weight = autocast::widenOnCuda(weight_);
  const Tensor bias = autocast::widenOnCuda(bias_);
  if (!anyRequiresGrad({&input, &weight, &bias}))
    return kiln::ops::groupNorm(input, numGroups, weight, bias, eps);
  Tensor out = kiln::ops::groupNorm(input, numGroups, weight, bias, eps); // as rms_norm
  if (recordUnsupportedOnDevice("group_norm", {&input, &weight, &bias}, out))
    return out;
  // Each group normalized over its elements is a layer_norm of the grouped rows: its fused
  // kernel and one-pass backward, not a chain of mean/sub/mul nodes (3x slower to train).
  Tensor grouped = autograd::reshape(input, {input.size(0), numGroups, -1});
  Tensor y = autograd::reshape(layerNorm(grouped, {grouped.size(2)}, Tensor(), Tensor(), eps),
                               input.sizes());
  if (weight.defined())
    y = mul(y, classWeight(weight, input.dim()));
  if (bias.defined())
    y = add(y, classWeight(bias, input.dim()));
  return autograd::to(y, out.dtype()); // the kernel's dtype, as rms_norm
}

Tensor embedding(const Tensor &indices, const Tensor &weight, std::optional<int64_t> paddingIdx) {
  Tensor out = kiln::ops::embedding(indices, weight, paddingIdx);
  record("EmbeddingBackward0", {nullptr, &weight}, out, [&](const NodePtr &) {
    std::optional<int64_t> pad = paddingIdx;
    if (pad && *pad < 0)
      *pad += weight.size(0);
    return [si = SavedTensor(indices), ws = weight.sizes(), pad](B &bd, const Node &n, Grads &g) {
      Grads r(2);
      r[1] = rules::embedding(bd, g[0], si.unpack(n).reshape({-1}), ws, pad);
      return r;
    };
  });
  return out;
}

Tensor nllLoss(const Tensor &input_, const Tensor &target, const Tensor &weight_,
               Reduction reduction, int64_t ignoreIndex) {
  const Tensor input = autocast::widen(input_);
  const Tensor weight = autocast::widen(weight_);
  checkWeightConstant(weight);
  Tensor out = kiln::ops::nllLoss(input, target, weight, reduction, ignoreIndex);
  if (anyRequiresGrad({&input}) && recordUnsupportedOnDevice("nll_loss", {&input}, out))
    return out;
  record("NllLossBackward0", {&input}, out, [&](const NodePtr &) {
    const int64_t classDim = input.dim() == 1 ? 0 : 1;
    // Per target element: -weight[target], 0 where ignored; the mean divides by their sum.
    Tensor valid = kiln::ops::ne(target, Tensor::wrapScalar(Scalar(ignoreIndex)));
    Tensor safe = kiln::ops::where(valid, target, Tensor::wrapScalar(Scalar(int64_t{0})));
    Tensor w = weight.defined()
                   ? kiln::ops::indexSelect(weight, 0, safe.reshape({-1})).reshape(target.sizes())
                   : kiln::ops::ones(target.sizes(), input.dtype());
    w = kiln::ops::mul(w, valid);
    if (reduction == Reduction::Mean)
      w = kiln::ops::div(w, kiln::ops::sum(w));
    return [w = kiln::ops::neg(w), safe, classDim, sizes = input.sizes()](B &bd, const Node &,
                                                                          Grads &g) {
      Tensor src = bd.mul(g[0], w);
      return Grads{
          bd.scatterAdd(sizes, classDim, safe.unsqueeze(classDim), src.unsqueeze(classDim))};
    };
  });
  return out;
}

Tensor crossEntropy(const Tensor &input_, const Tensor &target_, const Tensor &weight_,
                    Reduction reduction, int64_t ignoreIndex, double labelSmoothing) {
  const Tensor input = autocast::widen(input_);
  const Tensor target = autocast::widen(target_);
  const Tensor weight = autocast::widen(weight_);
  checkWeightConstant(weight);
  if (!anyRequiresGrad({&input}))
    return kiln::ops::crossEntropy(input, target, weight, reduction, ignoreIndex, labelSmoothing);
  if (Tensor out; onDevice({&input, &target})) {
    out = kiln::ops::crossEntropy(input, target, weight, reduction, ignoreIndex, labelSmoothing);
    recordUnsupportedOnDevice("cross_entropy", {&input}, out);
    return out;
  }
  KILN_CHECK(input.dim() >= 1, "cross_entropy: input must have a class dim, got a 0-d tensor");
  const int64_t classDim = input.dim() == 1 ? 0 : 1;
  const double classes = static_cast<double>(input.size(classDim));
  Tensor lsm = logSoftmax(input, classDim);
  if (isFloating(target.dtype())) {
    // Class probabilities: -sum(p * log_softmax) per element, smoothed towards uniform.
    Tensor p = labelSmoothing > 0 ? add(mul(target, number(1.0 - labelSmoothing)),
                                        number(labelSmoothing / classes))
                                  : target;
    Tensor prod = mul(lsm, p);
    if (weight.defined())
      prod = mul(prod, classWeight(weight, input.dim()));
    Tensor per = neg(sum(prod, DimList(Shape{classDim})));
    if (reduction == Reduction::Mean)
      return div(sum(per), number(static_cast<double>(input.numel()) / classes));
    return reduced(per, reduction);
  }
  Tensor nll = autograd::ops::nllLoss(lsm, target, weight, reduction, ignoreIndex);
  if (labelSmoothing <= 0)
    return nll;
  // torch's label smoothing: (1 - e) nll + e / C * (-sum of the (weighted) log-probabilities).
  Tensor weighted = weight.defined() ? mul(lsm, classWeight(weight, input.dim())) : lsm;
  Tensor smooth = neg(sum(weighted, DimList(Shape{classDim})));
  Tensor ignored = kiln::ops::eq(target, Tensor::wrapScalar(Scalar(ignoreIndex)));
  smooth = maskedFill(smooth, ignored, number(0.0));
  Tensor smoothReduced;
  if (reduction == Reduction::None) {
    smoothReduced = smooth;
  } else if (reduction == Reduction::Sum) {
    smoothReduced = sum(smooth);
  } else {
    Tensor valid = kiln::ops::logicalNot(ignored);
    Tensor denom;
    if (weight.defined()) {
      Tensor safe = kiln::ops::where(valid, target, Tensor::wrapScalar(Scalar(int64_t{0})));
      denom = kiln::ops::sum(kiln::ops::mul(
          kiln::ops::indexSelect(weight, 0, safe.reshape({-1})).reshape(target.sizes()), valid));
    } else {
      denom = kiln::ops::sum(valid).to(input.dtype());
    }
    smoothReduced = div(sum(smooth), denom);
  }
  return add(mul(nll, number(1.0 - labelSmoothing)),
             mul(smoothReduced, number(labelSmoothing / classes)));
}

Tensor mseLoss(const Tensor &input_, const Tensor &target_, const Tensor &weight_,
               Reduction reduction) {
  const Tensor input = autocast::widen(input_);
  const Tensor target = autocast::widen(target_);
  const Tensor weight = autocast::widen(weight_);
  if (!anyRequiresGrad({&input, &target, &weight}))
    return kiln::ops::mseLoss(input, target, weight, reduction);
  if (onDevice({&input, &target, &weight})) {
    Tensor out = kiln::ops::mseLoss(input, target, weight, reduction);
    recordUnsupportedOnDevice("mse_loss", {&input, &target, &weight}, out);
    return out;
  }
  Tensor d = sub(input, target);
  Tensor l = mul(d, d);
  if (!weight.defined())
    return reduced(l, reduction);
  Tensor wl = mul(l, weight);
  if (reduction == Reduction::Mean)
    return div(sum(wl), sum(weight));
  return reduced(wl, reduction);
}

Tensor scaledDotProductAttention(const Tensor &query_, const Tensor &key_, const Tensor &value_,
                                 const Tensor &attnMask_, double dropoutP, bool isCausal,
                                 std::optional<double> scale, bool enableGqa) {
  const Tensor query = autocast::lower(query_);
  Tensor key = autocast::lower(key_);
  Tensor value = autocast::lower(value_);
  const Tensor attnMask = autocast::lower(attnMask_);
  if (!anyRequiresGrad({&query, &key, &value, &attnMask}))
    return kiln::ops::scaledDotProductAttention(query, key, value, attnMask, dropoutP, isCausal,
                                                scale, enableGqa);
  if (onDevice({&query, &key, &value, &attnMask})) {
    Tensor out = kiln::ops::scaledDotProductAttention(query, key, value, attnMask, dropoutP,
                                                      isCausal, scale, enableGqa);
    recordUnsupportedOnDevice("scaled_dot_product_attention", {&query, &key, &value}, out);
    return out;
  }
  if (enableGqa && query.dim() >= 3) {
    // Query head h reads key (value) head h / (query heads / key heads): those heads repeated,
    // each one's gradient the sum over the query heads that read it.
    auto spread = [&](Tensor &t, const char *what) {
      if (t.dim() < 3 || t.size(-3) == query.size(-3))
        return;
      KILN_CHECK_KIND(Value, t.size(-3) > 0 && query.size(-3) % t.size(-3) == 0,
                      "scaled_dot_product_attention: enable_gqa needs the query heads ({}) to be "
                      "a multiple of the {} heads ({})",
                      query.size(-3), what, t.size(-3));
      t = repeatInterleave(t, query.size(-3) / t.size(-3), -3);
    };
    spread(key, "key");
    spread(value, "value");
  }
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  Tensor attn = mul(matmul(query, autograd::transpose(key, -2, -1)), number(s));
  const double ninf = -std::numeric_limits<double>::infinity();
  if (isCausal) {
    Tensor allowed =
        kiln::ops::tril(kiln::ops::ones({query.size(-2), key.size(-2)}, DType::Bool), 0);
    attn = maskedFill(attn, kiln::ops::logicalNot(allowed), number(ninf));
  }
  if (attnMask.defined())
    attn = attnMask.dtype() == DType::Bool
               ? maskedFill(attn, kiln::ops::logicalNot(attnMask), number(ninf))
               : add(attn, attnMask);
  // torch's safe softmax: a row with every key masked attends to nothing (zeros, not NaN).
  Tensor fullyMasked = kiln::ops::eq(kiln::ops::amax(attn, DimList(Shape{-1}), true),
                                     Tensor::wrapScalar(Scalar(ninf)));
  attn = maskedFill(softmax(attn, -1), fullyMasked, number(0.0));
  if (dropoutP > 0)
    attn = dropout(attn, dropoutP, true);
  return matmul(attn, value);
}

} // namespace kiln::autograd::ops

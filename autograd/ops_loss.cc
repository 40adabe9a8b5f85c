// Differentiable losses beyond cross entropy, nll and mse (ops_nn.cc), normalize, var_mean and
// adaptive max pooling: decompositions into differentiable ops while recording, the fused
// kernels otherwise (and on device tensors, where a backward raises).
#include "autograd/autocast.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/error.h"
#include "runtime/ops/compare.h"

namespace kiln::autograd::ops {
namespace {

/// Whether to decompose: something requires grad and everything is on the CPU. On a device the
/// kernel's result gets a node that raises.
template <class Kernel>
bool decompose(const char *op, std::initializer_list<const Tensor *> inputs, Tensor &out,
               Kernel kernel) {
  if (!anyRequiresGrad(inputs)) {
    out = kernel();
    return false;
  }
  if (onDevice(inputs)) {
    out = kernel();
    recordUnsupportedOnDevice(op, inputs, out);
    return false;
  }
  return true;
}
} // namespace

Tensor l1Loss(const Tensor &input_, const Tensor &target_, const Tensor &weight_,
              Reduction reduction) {
  const Tensor input = autocast::widen(input_);
  const Tensor target = autocast::widen(target_);
  const Tensor weight = autocast::widen(weight_);
  Tensor out;
  if (!decompose("l1_loss", {&input, &target, &weight}, out,
                 [&] { return kiln::ops::l1Loss(input, target, weight, reduction); }))
    return out;
  Tensor l = abs(sub(input, target));
  if (!weight.defined())
    return reduced(l, reduction);
  Tensor wl = mul(l, weight);
  return reduction == Reduction::Mean ? div(sum(wl), sum(weight)) : reduced(wl, reduction);
}

Tensor smoothL1Loss(const Tensor &input_, const Tensor &target_, Reduction reduction, double beta) {
  const Tensor input = autocast::widen(input_);
  const Tensor target = autocast::widen(target_);
  Tensor out;
  if (!decompose("smooth_l1_loss", {&input, &target}, out,
                 [&] { return kiln::ops::smoothL1Loss(input, target, reduction, beta); }))
    return out;
  Tensor d = abs(sub(input, target));
  Tensor l = beta == 0 ? d
                       : where(kiln::ops::lt(d, number(beta)), mul(mul(d, d), number(0.5 / beta)),
                               sub(d, number(0.5 * beta)));
  return reduced(l, reduction);
}

Tensor huberLoss(const Tensor &input_, const Tensor &target_, const Tensor &weight_,
                 Reduction reduction, double delta) {
  const Tensor input = autocast::widen(input_);
  const Tensor target = autocast::widen(target_);
  const Tensor weight = autocast::widen(weight_);
  Tensor out;
  if (!decompose("huber_loss", {&input, &target, &weight}, out,
                 [&] { return kiln::ops::huberLoss(input, target, weight, reduction, delta); }))
    return out;
  Tensor d = abs(sub(input, target));
  Tensor l = where(kiln::ops::le(d, number(delta)), mul(mul(d, d), number(0.5)),
                   mul(sub(d, number(0.5 * delta)), number(delta)));
  return reduced(weight.defined() ? mul(l, weight) : l, reduction);
}

Tensor klDiv(const Tensor &input_, const Tensor &target_, Reduction reduction, bool logTarget) {
  const Tensor input = autocast::widen(input_);
  const Tensor target = autocast::widen(target_);
  Tensor out;
  if (!decompose("kl_div", {&input, &target}, out,
                 [&] { return kiln::ops::klDiv(input, target, reduction, logTarget); }))
    return out;
  Tensor l;
  if (logTarget) {
    l = mul(exp(target), sub(target, input));
  } else {
    // xlogy: a zero target contributes 0 (and no NaN gradient through log 0).
    Tensor positive = kiln::ops::gt(target, number(0.0));
    Tensor safe = where(positive, target, number(1.0));
    l = where(positive, mul(target, sub(log(safe), input)), number(0.0));
  }
  return reduced(l, reduction);
}

Tensor binaryCrossEntropyWithLogits(const Tensor &input_, const Tensor &target_,
                                    const Tensor &weight_, const Tensor &posWeight_,
                                    Reduction reduction) {
  const Tensor input = autocast::widen(input_);
  const Tensor target = autocast::widen(target_);
  const Tensor weight = autocast::widen(weight_);
  const Tensor posWeight = autocast::widen(posWeight_);
  Tensor out;
  if (!decompose("binary_cross_entropy_with_logits", {&input, &target, &weight, &posWeight}, out,
                 [&] {
                   return kiln::ops::binaryCrossEntropyWithLogits(input, target, weight, posWeight,
                                                                  reduction);
                 }))
    return out;
  // (1 - t) x + (1 + (pw - 1) t) softplus(-x), softplus(-x) = -logsigmoid(x): one op whose
  // derivative is right at x = 0 (abs and relu, each with a zero derivative there, summed to 0
  // where the loss's slope is -1/2).
  Tensor sp = neg(logsigmoid(input));
  Tensor coef =
      posWeight.defined() ? add(mul(sub(posWeight, number(1.0)), target), number(1.0)) : Tensor();
  Tensor l = add(mul(sub(number(1.0), target), input), coef.defined() ? mul(coef, sp) : sp);
  return reduced(weight.defined() ? mul(l, weight) : l, reduction);
}

Tensor binaryCrossEntropy(const Tensor &input_, const Tensor &target_, const Tensor &weight_,
                          Reduction reduction) {
  const Tensor input = autocast::widen(input_);
  const Tensor target = autocast::widen(target_);
  const Tensor weight = autocast::widen(weight_);
  Tensor out;
  if (!decompose("binary_cross_entropy", {&input, &target, &weight}, out,
                 [&] { return kiln::ops::binaryCrossEntropy(input, target, weight, reduction); }))
    return out;
  kiln::ops::binaryCrossEntropy(input, target, weight, reduction); // the kernel's range checks
  // torch clamps each log at -100, and its gradient is torch's formula, not the logs':
  // (x - t) / max(x (1 - x), 1e-12), finite where x saturates at 0 or 1 (a sigmoid of a large
  // logit, whose chained gradient is then torch's too). The loss is computed from x detached,
  // plus (x - x.detach()) times that gradient: zero in value, the gradient in derivative. The
  // target's gradient comes from the logs, which read 1 where their argument is 0 (safe logs,
  // so no 0 * 1/0 either).
  auto clampedLog = [](const Tensor &v) {
    Tensor nonzero = kiln::ops::ne(v, number(0.0));
    Tensor safe = where(nonzero, v, number(1.0));
    return maximum(where(nonzero, log(safe), number(-100.0)), number(-100.0));
  };
  const Tensor x = detach(input);
  Tensor l = neg(add(mul(target, clampedLog(x)),
                     mul(sub(number(1.0), target), clampedLog(sub(number(1.0), x)))));
  Tensor slope = detach(div(sub(x, target), maximum(mul(x, sub(number(1.0), x)), number(1e-12))));
  l = add(l, mul(sub(input, x), slope));
  return reduced(weight.defined() ? mul(l, weight) : l, reduction);
}

Tensor normalize(const Tensor &input, double p, int64_t dim, double eps) {
  Tensor out;
  if (!decompose("normalize", {&input}, out,
                 [&] { return kiln::ops::normalize(input, p, dim, eps); }))
    return out;
  Tensor norm = vectorNorm(input, p, DimList(Shape{dim}), true);
  return div(input, maximum(norm, number(eps)));
}

std::pair<Tensor, Tensor> varMean(const Tensor &a, const DimList &dims, double correction,
                                  bool keepdim, bool takeSqrt) {
  if (!anyRequiresGrad({&a}) || onDevice({&a}))
    return kiln::ops::varMean(a, dims, correction, keepdim, takeSqrt);
  Tensor spread =
      takeSqrt ? stdDev(a, dims, correction, keepdim) : var(a, dims, correction, keepdim);
  return {spread, mean(a, dims, keepdim)};
}

std::pair<Tensor, Tensor> adaptiveMaxPool(int64_t nd, const Tensor &input,
                                          const AdaptiveSize &outputSize, bool withIndices) {
  if (!anyRequiresGrad({&input}))
    return kiln::ops::adaptiveMaxPool(nd, input, outputSize, withIndices);
  if (onDevice({&input})) { // as max_pool: no indices are forced on the device
    auto result = kiln::ops::adaptiveMaxPool(nd, input, outputSize, withIndices);
    recordUnsupportedOnDevice("adaptive_max_pool", {&input}, result.first);
    return result;
  }
  auto [out, indices] = kiln::ops::adaptiveMaxPool(nd, input, outputSize, true);
  recordIndexedPool("AdaptiveMaxPool2DBackward0", input, out, indices, nd);
  return {out, withIndices ? indices : Tensor()};
}

} // namespace kiln::autograd::ops

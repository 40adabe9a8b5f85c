// Neural-network ops: normalization, attention and losses. Functions torch exposes at top level
// (torch.layer_norm, torch.batch_norm, ...) keep torch's names and argument order; the ones that
// only exist in torch.nn.functional are bound with a leading underscore and wrapped by
// kiln/nn/_functional_*.py, which owns the Python-level argument handling.
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/loss.h"
#include "runtime/ops/norm.h"
#include "runtime/ops/optim.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

using OptTensor = std::optional<Tensor>;

/// None -> an undefined Tensor, the runtime's "absent" optional argument.
Tensor opt(const OptTensor &t) { return t.value_or(Tensor()); }

void bindNorms(py::module_ &m) {
  m.def(
      "layer_norm",
      [](const Tensor &input, py::handle normalizedShape, const OptTensor &weight,
         const OptTensor &bias, double eps, bool) {
        return ops::layerNorm(input, toIntList(normalizedShape, "layer_norm"), opt(weight),
                              opt(bias), eps);
      },
      py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("eps") = 1e-5, py::arg("cudnn_enable") = true);
  m.def(
      "group_norm",
      [](const Tensor &input, int64_t numGroups, const OptTensor &weight, const OptTensor &bias,
         double eps,
         bool) { return ops::groupNorm(input, numGroups, opt(weight), opt(bias), eps); },
      py::arg("input"), py::arg("num_groups"), py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("eps") = 1e-5, py::arg("cudnn_enabled") = true);
  m.def(
      "batch_norm",
      [](const Tensor &input, const OptTensor &weight, const OptTensor &bias,
         const OptTensor &runningMean, const OptTensor &runningVar, bool training, double momentum,
         double eps, bool) {
        return ops::batchNorm(input, opt(weight), opt(bias), opt(runningMean), opt(runningVar),
                              training, momentum, eps);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("running_mean"),
      py::arg("running_var"), py::arg("training"), py::arg("momentum"), py::arg("eps"),
      py::arg("cudnn_enabled"));
  m.def(
      "instance_norm",
      [](const Tensor &input, const OptTensor &weight, const OptTensor &bias,
         const OptTensor &runningMean, const OptTensor &runningVar, bool useInputStats,
         double momentum, double eps, bool) {
        return ops::instanceNorm(input, opt(weight), opt(bias), opt(runningMean), opt(runningVar),
                                 useInputStats, momentum, eps);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias"), py::arg("running_mean"),
      py::arg("running_var"), py::arg("use_input_stats"), py::arg("momentum"), py::arg("eps"),
      py::arg("cudnn_enabled"));
  m.def("_normalize", &ops::normalize, py::arg("input"), py::arg("p") = 2.0, py::arg("dim") = 1,
        py::arg("eps") = 1e-12);
}

void bindAttention(py::module_ &m) {
  m.def(
      "_scaled_dot_product_attention",
      [](const Tensor &query, const Tensor &key, const Tensor &value, const OptTensor &attnMask,
         double dropoutP, bool isCausal, std::optional<double> scale, bool enableGqa) {
        return ops::scaledDotProductAttention(query, key, value, opt(attnMask), dropoutP, isCausal,
                                              scale, enableGqa);
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(),
      py::arg("dropout_p") = 0.0, py::arg("is_causal") = false, py::arg("scale") = py::none(),
      py::arg("enable_gqa") = false);
}

/// Losses take torch's integer reduction code (0 none, 1 mean, 2 sum); kiln.nn.functional maps
/// the strings.
void bindLosses(py::module_ &m) {
  auto red = [](int64_t r, const char *op) { return ops::reductionFromInt(r, op); };
  m.def(
      "_smooth_l1_loss",
      [red](const Tensor &input, const Tensor &target, int64_t reduction, double beta) {
        return ops::smoothL1Loss(input, target, red(reduction, "smooth_l1_loss"), beta);
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = 1, py::arg("beta") = 1.0);
  m.def(
      "_huber_loss",
      [red](const Tensor &input, const Tensor &target, int64_t reduction, double delta,
            const OptTensor &weight) {
        return ops::huberLoss(input, target, opt(weight), red(reduction, "huber_loss"), delta);
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = 1, py::arg("delta") = 1.0,
      py::arg("weight") = py::none());
  m.def(
      "_binary_cross_entropy",
      [red](const Tensor &input, const Tensor &target, const OptTensor &weight, int64_t reduction) {
        return ops::binaryCrossEntropy(input, target, opt(weight),
                                       red(reduction, "binary_cross_entropy"));
      },
      py::arg("input"), py::arg("target"), py::arg("weight") = py::none(),
      py::arg("reduction") = 1);
  // torch.binary_cross_entropy_with_logits and torch.kl_div are top-level torch functions.
  m.def(
      "binary_cross_entropy_with_logits",
      [red](const Tensor &input, const Tensor &target, const OptTensor &weight,
            const OptTensor &posWeight, int64_t reduction) {
        return ops::binaryCrossEntropyWithLogits(
            input, target, opt(weight), opt(posWeight),
            red(reduction, "binary_cross_entropy_with_logits"));
      },
      py::arg("input"), py::arg("target"), py::arg("weight") = py::none(),
      py::arg("pos_weight") = py::none(), py::arg("reduction") = 1);
  m.def(
      "kl_div",
      [red](const Tensor &input, const Tensor &target, int64_t reduction, bool logTarget) {
        return ops::klDiv(input, target, red(reduction, "kl_div"), logTarget);
      },
      py::arg("input"), py::arg("target"), py::arg("reduction") = 1, py::kw_only(),
      py::arg("log_target") = false);
}

} // namespace

void bindNN(py::module_ &m) {
  // Each parameter's step counter (a 0-d tensor) of Adam, RMSprop and Adagrad is incremented
  // once the group's update is done.
  auto countSteps = [](const std::vector<Tensor> &steps) {
    std::vector<double> counts;
    for (const Tensor &s : steps)
      counts.push_back(s.item().toDouble() + 1);
    return counts;
  };
  auto storeSteps = [](std::vector<Tensor> &steps, const std::vector<double> &counts) {
    for (size_t i = 0; i < steps.size(); ++i)
      steps[i].fill_(Scalar(counts[i]));
  };
  // Adam/AdamW's foreach / fused=True update over a whole parameter group in one call.
  m.def(
      "_adam_multi_step_",
      [=](std::vector<Tensor> params, const std::vector<Tensor> &grads, std::vector<Tensor> expAvgs,
          std::vector<Tensor> expAvgSqs, std::optional<std::vector<Tensor>> maxExpAvgSqs,
          std::vector<Tensor> steps, double lr, double beta1, double beta2, double eps,
          double weightDecay, bool decoupled, bool amsgrad, bool maximize) {
        KILN_CHECK(steps.size() == params.size(),
                   "adam step: the parameter and step lists differ in length");
        ops::AdamOptions o{lr, beta1, beta2, eps, weightDecay, decoupled, amsgrad, maximize};
        std::vector<double> counts = countSteps(steps);
        std::vector<Tensor> vmax = maxExpAvgSqs.value_or(std::vector<Tensor>{});
        {
          py::gil_scoped_release release;
          ops::adamMultiStep_(params, grads, expAvgs, expAvgSqs, vmax, counts, o);
        }
        storeSteps(steps, counts);
      },
      py::arg("params"), py::arg("grads"), py::arg("exp_avgs"), py::arg("exp_avg_sqs"),
      py::arg("max_exp_avg_sqs"), py::arg("steps"), py::arg("lr"), py::arg("beta1"),
      py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("decoupled"),
      py::arg("amsgrad"), py::arg("maximize"));
  // SGD's foreach / fused=True update over a parameter group in one call. With momentum, a
  // parameter without a buffer (None) gets one, filled by this first step; returns the buffers.
  m.def(
      "_sgd_multi_step_",
      [](std::vector<Tensor> params, const std::vector<Tensor> &grads,
         std::vector<std::optional<Tensor>> bufs, double lr, double momentum, double dampening,
         double weightDecay, bool nesterov, bool maximize) {
        const size_t n = params.size();
        KILN_CHECK(bufs.size() == n, "sgd step: the parameter and buffer lists differ in length");
        ops::SgdOptions o{lr, momentum, dampening, weightDecay, nesterov, maximize};
        std::vector<Tensor> buffers(n);
        std::vector<uint8_t> first(n, 0);
        for (size_t i = 0; i < n; ++i) {
          first[i] = momentum != 0 && !bufs[i];
          if (first[i])
            buffers[i] = Tensor::empty(params[i].sizes(), params[i].dtype());
          else if (bufs[i])
            buffers[i] = *bufs[i];
        }
        {
          py::gil_scoped_release release;
          ops::sgdMultiStep_(params, grads, buffers, first, o);
        }
        std::vector<std::optional<Tensor>> out(n);
        if (momentum != 0)
          for (size_t i = 0; i < n; ++i)
            out[i] = buffers[i];
        return out;
      },
      py::arg("params"), py::arg("grads"), py::arg("momentum_buffers"), py::arg("lr"),
      py::arg("momentum"), py::arg("dampening"), py::arg("weight_decay"), py::arg("nesterov"),
      py::arg("maximize"));
  // RMSprop's and Adagrad's foreach update over a parameter group in one call (step counters
  // as for Adam).
  m.def(
      "_rmsprop_multi_step_",
      [=](std::vector<Tensor> params, const std::vector<Tensor> &grads,
          std::vector<Tensor> squareAvgs, std::optional<std::vector<Tensor>> gradAvgs,
          std::optional<std::vector<Tensor>> bufs, std::vector<Tensor> steps, double lr,
          double alpha, double eps, double weightDecay, double momentum, bool centered,
          bool maximize) {
        KILN_CHECK(steps.size() == params.size(),
                   "rmsprop step: the parameter and step lists differ in length");
        ops::RmspropOptions o{lr, alpha, eps, weightDecay, momentum, centered, maximize};
        std::vector<double> counts = countSteps(steps);
        std::vector<Tensor> avgs = gradAvgs.value_or(std::vector<Tensor>{}),
                            buffers = bufs.value_or(std::vector<Tensor>{});
        {
          py::gil_scoped_release release;
          ops::rmspropMultiStep_(params, grads, squareAvgs, avgs, buffers, o);
        }
        storeSteps(steps, counts);
      },
      py::arg("params"), py::arg("grads"), py::arg("square_avgs"), py::arg("grad_avgs"),
      py::arg("momentum_buffers"), py::arg("steps"), py::arg("lr"), py::arg("alpha"),
      py::arg("eps"), py::arg("weight_decay"), py::arg("momentum"), py::arg("centered"),
      py::arg("maximize"));
  m.def(
      "_adagrad_multi_step_",
      [=](std::vector<Tensor> params, const std::vector<Tensor> &grads, std::vector<Tensor> sums,
          std::vector<Tensor> steps, double lr, double lrDecay, double eps, double weightDecay,
          bool maximize) {
        KILN_CHECK(steps.size() == params.size(),
                   "adagrad step: the parameter and step lists differ in length");
        ops::AdagradOptions o{lr, lrDecay, eps, weightDecay, maximize};
        std::vector<double> counts = countSteps(steps);
        {
          py::gil_scoped_release release;
          ops::adagradMultiStep_(params, grads, sums, counts, o);
        }
        storeSteps(steps, counts);
      },
      py::arg("params"), py::arg("grads"), py::arg("sums"), py::arg("steps"), py::arg("lr"),
      py::arg("lr_decay"), py::arg("eps"), py::arg("weight_decay"), py::arg("maximize"));
  bindNorms(m);
  bindAttention(m);
  bindLosses(m);
}

} // namespace kiln::frontend

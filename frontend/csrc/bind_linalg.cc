// einsum's kernel, unfold/fold, pooling and interpolation helpers, and oneDNN's counters. `@`,
// mm, bmm, addmm, conv1d ... conv_transpose3d are op-table rows
// (eager_kernels_linalg.cc). F.* wrappers that parse torch's flexible arguments live in
// kiln/nn/_functional_conv.py and kiln/nn/_functional_linalg.py.
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/onednn.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/interpolate.h"
#include "runtime/ops/linalg.h"
#include "runtime/ops/pool.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

void bindMatrixProducts(py::module_ &m) {
  m.def("_einsum", [](const std::string &equation, const std::vector<Tensor> &operands) {
    return ops::einsum(equation, operands);
  });
  // Whether bfloat16 products run on oneDNN here, and how many it has run.
  m.def("_onednn_stats",
        [] { return py::make_tuple(onednn::available(DType::BFloat16), onednn::calls()); });
  // Whether float32 and bfloat16 convolutions run on oneDNN here, and how many it has run.
  m.def("_onednn_conv_stats", [] {
    return py::make_tuple(onednn::convolutionAvailable(DType::Float32),
                          onednn::convolutionAvailable(DType::BFloat16),
                          onednn::convolutionCalls());
  });
}

void bindConvolutions(py::module_ &m) {
  m.def(
      "_unfold",
      [](const Tensor &input, py::handle kernel, py::handle dilation, py::handle padding,
         py::handle stride) {
        return ops::unfold(input, toIntList(kernel, "unfold"), toIntList(dilation, "unfold"),
                           toIntList(padding, "unfold"), toIntList(stride, "unfold"));
      },
      py::arg("input"), py::arg("kernel_size"), py::arg("dilation") = 1, py::arg("padding") = 0,
      py::arg("stride") = 1);
  m.def(
      "_fold",
      [](const Tensor &input, py::handle outputSize, py::handle kernel, py::handle dilation,
         py::handle padding, py::handle stride) {
        return ops::fold(input, toIntList(outputSize, "fold"), toIntList(kernel, "fold"),
                         toIntList(dilation, "fold"), toIntList(padding, "fold"),
                         toIntList(stride, "fold"));
      },
      py::arg("input"), py::arg("output_size"), py::arg("kernel_size"), py::arg("dilation") = 1,
      py::arg("padding") = 0, py::arg("stride") = 1);
}

/// None (torch's default stride) becomes an empty list: stride = kernel_size.
Shape optionalIntList(py::handle obj, const char *op) {
  return obj.is_none() ? Shape{} : toIntList(obj, op);
}

py::object poolResult(const std::pair<Tensor, Tensor> &r, bool withIndices) {
  if (withIndices)
    return py::make_tuple(r.first, r.second);
  return wrap(r.first);
}

// The pools are bound once with the spatial rank as an argument; kiln/_ops_linalg.py gives
// them torch's per-rank names and signatures.
void bindPooling(py::module_ &m) {
  m.def("_max_pool", [](int64_t nd, const Tensor &input, py::handle kernel, py::handle stride,
                        py::handle padding, py::handle dilation, bool ceilMode, bool withIndices) {
    ops::PoolOptions o{toIntList(kernel, "max_pool"), optionalIntList(stride, "max_pool"),
                       toIntList(padding, "max_pool"), toIntList(dilation, "max_pool"), ceilMode};
    return poolResult(ops::maxPool(nd, input, o, withIndices), withIndices);
  });
  m.def("_avg_pool", [](int64_t nd, const Tensor &input, py::handle kernel, py::handle stride,
                        py::handle padding, bool ceilMode, bool countIncludePad,
                        std::optional<int64_t> divisorOverride) {
    ops::PoolOptions o{toIntList(kernel, "avg_pool"), optionalIntList(stride, "avg_pool"),
                       toIntList(padding, "avg_pool"), Shape{1}, ceilMode};
    return ops::avgPool(nd, input, o, countIncludePad, divisorOverride);
  });
  m.def("_adaptive_avg_pool", [](int64_t nd, const Tensor &input, const ops::AdaptiveSize &size) {
    return ops::adaptiveAvgPool(nd, input, size);
  });
  m.def("_adaptive_max_pool",
        [](int64_t nd, const Tensor &input, const ops::AdaptiveSize &size, bool withIndices) {
          return poolResult(ops::adaptiveMaxPool(nd, input, size, withIndices), withIndices);
        });
}

// F.interpolate's argument handling is in kiln/nn/_functional_conv.py; these take resolved
// output sizes and the user's scale factors (None entries when absent).
void bindInterpolation(py::module_ &m) {
  m.def("_upsample_nearest",
        [](const Tensor &input, const Shape &outputSize, const ops::UpsampleScales &scales,
           bool exact) { return ops::upsampleNearest(input, outputSize, scales, exact); });
  m.def("_upsample_linear", [](const Tensor &input, const Shape &outputSize, bool alignCorners,
                               const ops::UpsampleScales &scales) {
    return ops::upsampleLinear(input, outputSize, alignCorners, scales);
  });
}

} // namespace

void bindLinalg(py::module_ &m) {
  bindInterpolation(m);
  bindMatrixProducts(m);
  bindConvolutions(m);
  bindPooling(m);
}

} // namespace kiln::frontend

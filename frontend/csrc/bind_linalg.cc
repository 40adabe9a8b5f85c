// Matrix products, convolution, pooling and interpolation: kiln.<op> functions, Tensor methods
// and the `@` operator. F.* wrappers that parse torch's flexible arguments live in
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

py::class_<Tensor> tensorClass(py::module_ &m) {
  return py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
}

/// Binds kiln.name(input, other) and Tensor.name(other) for a two-tensor product.
template <typename Fn>
void bindProduct(py::module_ &m, py::class_<Tensor> &t, const char *name, const char *other,
                 Fn fn) {
  m.def(name, fn, py::arg("input"), py::arg(other));
  t.def(name, fn, py::arg(other));
}

/// Binds kiln.name(input, a, b, *, beta=1, alpha=1), the Tensor method and its in-place form
/// (`inplaceName`, e.g. addmm_) of an add-product op.
template <typename Fn>
void bindAddProduct(py::module_ &m, py::class_<Tensor> &t, const char *name,
                    const char *inplaceName, const char *a, const char *b, Fn fn) {
  auto impl = [fn, name](const Tensor &self, const Tensor &x, const Tensor &y, py::handle beta,
                         py::handle alpha) {
    return fn(self, x, y, toScalar(beta, name), toScalar(alpha, name));
  };
  m.def(name, impl, py::arg("input"), py::arg(a), py::arg(b), py::kw_only(), py::arg("beta") = 1,
        py::arg("alpha") = 1);
  t.def(name, impl, py::arg(a), py::arg(b), py::kw_only(), py::arg("beta") = 1,
        py::arg("alpha") = 1);
  t.def(
      inplaceName,
      [impl, inplaceName](py::object self, const Tensor &x, const Tensor &y, py::handle beta,
                          py::handle alpha) {
        Tensor &s = self.cast<Tensor &>();
        autograd::applyInplace(inplaceName, s,
                               impl(autograd::inplaceOperand(s, {&x, &y}), x, y, beta, alpha));
        return self;
      },
      py::arg(a), py::arg(b), py::kw_only(), py::arg("beta") = 1, py::arg("alpha") = 1);
}

void bindMatrixProducts(py::module_ &m) {
  auto t = tensorClass(m);
  bindProduct(m, t, "mm", "mat2", &ops::mm);
  bindProduct(m, t, "bmm", "mat2", &ops::bmm);
  bindProduct(m, t, "mv", "vec", &ops::mv);
  auto dot = [](const Tensor &a, const Tensor &b) { return ops::dot(a, b); };
  auto vdot = [](const Tensor &a, const Tensor &b) { return ops::dot(a, b, "vdot"); };
  bindProduct(m, t, "dot", "tensor", dot);
  bindProduct(m, t, "vdot", "other", vdot);
  bindProduct(m, t, "outer", "vec2", &ops::outer);
  bindProduct(m, t, "ger", "vec2", &ops::outer);
  // Only Tensor operands take part in `@`: anything else lets Python try the reflection.
  t.def("__matmul__", [](const Tensor &a, py::handle b) -> py::object {
    if (!py::isinstance<Tensor>(b))
      return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    return wrap(ops::matmul(a, b.cast<const Tensor &>()));
  });
  t.def("__rmatmul__", [](const Tensor &a, py::handle b) -> py::object {
    if (!py::isinstance<Tensor>(b))
      return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    return wrap(ops::matmul(b.cast<const Tensor &>(), a));
  });
  bindAddProduct(m, t, "addmm", "addmm_", "mat1", "mat2", &ops::addmm);
  bindAddProduct(m, t, "addmv", "addmv_", "mat", "vec", &ops::addmv);
  bindAddProduct(m, t, "baddbmm", "baddbmm_", "batch1", "batch2", &ops::baddbmm);
  m.def("bilinear", &ops::bilinear, py::arg("input1"), py::arg("input2"), py::arg("weight"),
        py::arg("bias") = py::none());
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

/// Binds torch.convNd(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1);
/// padding may also be 'same' or 'valid'.
void bindConv(py::module_ &m, const char *name, int64_t nd) {
  m.def(
      name,
      [name, nd](const Tensor &input, const Tensor &weight, const std::optional<Tensor> &bias,
                 py::handle stride, py::handle padding, py::handle dilation, int64_t groups) {
        ops::ConvOptions opts;
        opts.stride = toIntList(stride, name);
        if (py::isinstance<py::str>(padding))
          opts.paddingMode = padding.cast<std::string>();
        else
          opts.padding = toIntList(padding, name);
        opts.dilation = toIntList(dilation, name);
        opts.groups = groups;
        return ops::convolution(nd, input, weight, bias, opts);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1);
}

/// Binds torch.conv_transposeNd(input, weight, bias=None, stride=1, padding=0,
/// output_padding=0, groups=1, dilation=1).
void bindConvTranspose(py::module_ &m, const char *name, int64_t nd) {
  m.def(
      name,
      [name, nd](const Tensor &input, const Tensor &weight, const std::optional<Tensor> &bias,
                 py::handle stride, py::handle padding, py::handle outputPadding, int64_t groups,
                 py::handle dilation) {
        ops::ConvTransposeOptions opts;
        opts.stride = toIntList(stride, name);
        opts.padding = toIntList(padding, name);
        opts.outputPadding = toIntList(outputPadding, name);
        opts.dilation = toIntList(dilation, name);
        opts.groups = groups;
        return ops::convTranspose(nd, input, weight, bias, opts);
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none(), py::arg("stride") = 1,
      py::arg("padding") = 0, py::arg("output_padding") = 0, py::arg("groups") = 1,
      py::arg("dilation") = 1);
}

void bindConvolutions(py::module_ &m) {
  bindConv(m, "conv1d", 1);
  bindConv(m, "conv2d", 2);
  bindConv(m, "conv3d", 3);
  bindConvTranspose(m, "conv_transpose1d", 1);
  bindConvTranspose(m, "conv_transpose2d", 2);
  bindConvTranspose(m, "conv_transpose3d", 3);
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

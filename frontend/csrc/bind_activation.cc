// Activation functions as kiln.<name> (and Tensor methods where torch has them). The
// kiln.nn.functional forms, with their `inplace=` arguments, wrap these in Python.
#include "frontend/csrc/bind_elementwise.h"

namespace kiln::frontend::elementwise {

namespace {
/// Binds kiln.name(input, extra...) and, when inplaceName is set, kiln.name_ (in-place).
template <typename... Extra, typename... Args>
void defActivation(py::module_ &m, const char *name, const char *inplaceName,
                   Tensor (*fn)(const Tensor &, Extra...), const Args &...args) {
  m.def(name, fn, py::arg("input"), args...);
  if (inplaceName)
    m.def(
        inplaceName,
        [fn, inplaceName](py::object self, Extra... extra) {
          return applyInplace(inplaceName, self, fn(autograd::inplaceOperand(self.cast<const Tensor &>()), extra...));
        },
        py::arg("input"), args...);
}

Tensor gelu(const Tensor &a, const std::string &approximate) { return ops::gelu(a, approximate); }
Tensor hardtanh(const Tensor &a, py::handle lo, py::handle hi) {
  return ops::hardtanh(a, toScalar(lo, "hardtanh"), toScalar(hi, "hardtanh"));
}
Tensor relu6(const Tensor &a) { return ops::relu6(a); }
Tensor threshold(const Tensor &a, py::handle threshold, py::handle value) {
  return ops::threshold(a, toScalar(threshold, "threshold"), toScalar(value, "threshold"));
}
} // namespace

void bindActivations(py::module_ &m) {
  auto t = tensorClass(m);
  defActivation(m, "relu", "relu_", &ops::relu);
  t.def("relu", &ops::relu);
  t.def("relu_", UnaryInplace{"relu_", &ops::relu});
  defActivation(m, "relu6", "relu6_", &relu6);
  defActivation(m, "hardtanh", "hardtanh_", &hardtanh, py::arg("min_val") = -1.0,
                py::arg("max_val") = 1.0);
  defActivation(m, "threshold", "threshold_", &threshold, py::arg("threshold"), py::arg("value"));
  defActivation(m, "gelu", nullptr, &gelu, py::arg("approximate") = "none");
  defActivation(m, "silu", "silu_", &ops::silu);
  defActivation(m, "softplus", nullptr, &ops::softplus, py::arg("beta") = 1.0,
                py::arg("threshold") = 20.0);
  defActivation(m, "leaky_relu", "leaky_relu_", &ops::leakyRelu, py::arg("negative_slope") = 0.01);
  defActivation(m, "elu", "elu_", &ops::elu, py::arg("alpha") = 1.0);
  defActivation(m, "selu", "selu_", &ops::selu);
  defActivation(m, "celu", "celu_", &ops::celu, py::arg("alpha") = 1.0);
  defActivation(m, "hardsigmoid", "hardsigmoid_", &ops::hardsigmoid);
  defActivation(m, "hardswish", "hardswish_", &ops::hardswish);
  defActivation(m, "mish", "mish_", &ops::mish);
  defActivation(m, "logsigmoid", nullptr, &ops::logsigmoid);
  defActivation(m, "softsign", nullptr, &ops::softsign);
  defActivation(m, "tanhshrink", nullptr, &ops::tanhshrink);
  defActivation(m, "hardshrink", nullptr, &ops::hardshrink, py::arg("lambd") = 0.5);
  defActivation(m, "softshrink", nullptr, &ops::softshrink, py::arg("lambd") = 0.5);
  t.def("hardshrink", &ops::hardshrink, py::arg("lambd") = 0.5);
}

} // namespace kiln::frontend::elementwise

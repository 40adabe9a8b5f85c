// Elementwise ops: Tensor operators and methods, and kiln.<op> functions.
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/ops/elementwise.h"

namespace kiln::frontend {

namespace {
py::class_<Tensor> tensorClass(py::module_ &m) {
  return py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
}

/// Binds a binary op as kiln.name(a, b), Tensor.name(b), the operator and its reflection.
template <typename Fn>
void bindBinary(py::module_ &m, py::class_<Tensor> &t, const char *name, const char *dunder,
                const char *rdunder, Fn fn) {
  m.def(name, [fn, name](py::handle a, py::handle b) {
    return fn(toOperand(a, name), toOperand(b, name));
  }, py::arg("input"), py::arg("other"));
  t.def(name, [fn, name](const Tensor &a, py::handle b) { return fn(a, toOperand(b, name)); },
        py::arg("other"));
  if (dunder)
    t.def(dunder, [fn, name](const Tensor &a, py::handle b) { return fn(a, toOperand(b, name)); });
  if (rdunder)
    t.def(rdunder, [fn, name](const Tensor &a, py::handle b) { return fn(toOperand(b, name), a); });
}

/// Binds name_ and __iname__ as in-place forms that return self.
template <typename Fn>
void bindInplace(py::class_<Tensor> &t, const char *name, const char *idunder, Fn fn) {
  auto impl = [fn, name](py::object self, py::handle b) {
    Tensor &s = self.cast<Tensor &>();
    ops::inplace(name, s, fn(s, toOperand(b, name)));
    return self;
  };
  t.def(name, impl);
  if (idunder)
    t.def(idunder, impl);
}
} // namespace

void bindElementwise(py::module_ &m) {
  auto t = tensorClass(m);
  auto add = [](const Tensor &a, const Tensor &b) { return ops::add(a, b); };
  auto sub = [](const Tensor &a, const Tensor &b) { return ops::sub(a, b); };
  auto mul = [](const Tensor &a, const Tensor &b) { return ops::mul(a, b); };
  auto div = [](const Tensor &a, const Tensor &b) { return ops::div(a, b); };
  bindBinary(m, t, "add", "__add__", "__radd__", add);
  bindBinary(m, t, "sub", "__sub__", "__rsub__", sub);
  bindBinary(m, t, "mul", "__mul__", "__rmul__", mul);
  bindBinary(m, t, "div", "__truediv__", "__rtruediv__", div);
  bindInplace(t, "add_", "__iadd__", add);
  bindInplace(t, "sub_", "__isub__", sub);
  bindInplace(t, "mul_", "__imul__", mul);
  bindInplace(t, "div_", "__itruediv__", div);
  m.def("_add_alpha", [](py::handle a, py::handle b, py::handle alpha) {
    return ops::add(toOperand(a, "add"), toOperand(b, "add"), toScalar(alpha, "add"));
  });
  m.def("_sub_alpha", [](py::handle a, py::handle b, py::handle alpha) {
    return ops::sub(toOperand(a, "sub"), toOperand(b, "sub"), toScalar(alpha, "sub"));
  });
  m.def("_div_mode", [](py::handle a, py::handle b, const std::string &mode) {
    return ops::div(toOperand(a, "div"), toOperand(b, "div"), mode);
  });
  m.def("neg", &ops::neg);
  t.def("neg", &ops::neg);
  t.def("__neg__", &ops::neg);
  m.def("exp", &ops::exp);
  t.def("exp", &ops::exp);
}

} // namespace kiln::frontend

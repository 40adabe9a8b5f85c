// Elementwise ops that have no op-table row yet, bound by hand (every spelling of a row is
// bound by bind_op_table.cc): rsub, float_power, the shifts, equal/isclose/allclose. The unary
// ones are in bind_elementwise_math.cc.
#include "frontend/csrc/bind_elementwise.h"

#include "frontend/csrc/bindings.h"
#include "runtime/error.h"

namespace kiln::frontend {

namespace elementwise {

std::optional<Tensor> asOperand(py::handle obj) {
  if (py::isinstance<Tensor>(obj))
    return obj.cast<const Tensor &>();
  PyObject *p = obj.ptr();
  if (PyBool_Check(p) || PyLong_Check(p) || PyFloat_Check(p))
    return Tensor::wrapScalar(toScalar(obj, "operand"));
  // NumPy scalars (np.float32(2), np.int64(3)) act as Python numbers.
  if (PyNumber_Check(p) && !PySequence_Check(p) && PyObject_HasAttrString(p, "dtype") &&
      PyObject_HasAttrString(p, "item"))
    return Tensor::wrapScalar(toScalar(obj.attr("item")(), "operand"));
  return std::nullopt;
}

Tensor operand(py::handle obj, const char *op) {
  if (std::optional<Tensor> t = asOperand(obj))
    return *t;
  fail(ErrorKind::Type, "{}: unsupported operand of type '{}' (expected a kiln.Tensor or a number)",
       op, std::string(py::str(py::type::of(obj).attr("__name__"))));
}

py::object finish(const char *op, Tensor result, py::handle out) {
  if (out.is_none())
    return wrap(std::move(result));
  KILN_CHECK_KIND(Type, py::isinstance<Tensor>(out), "{}: out= must be a kiln.Tensor, got {}", op,
                  std::string(py::str(py::type::of(out).attr("__name__"))));
  ops::writeOut(op, out.cast<Tensor &>(), result);
  return py::reinterpret_borrow<py::object>(out);
}

py::object applyInplace(const char *op, py::object self, const Tensor &result) {
  autograd::applyInplace(op, self.cast<Tensor &>(), result);
  return self;
}

void defUnary(py::module_ &m, py::class_<Tensor> &t, const char *name, const char *inplaceName,
              UnaryFn fn) {
  m.def(name, UnaryFunction{name, fn}, py::arg("input"), py::kw_only(),
        py::arg("out") = py::none());
  t.def(name, fn);
  if (inplaceName) {
    t.def(inplaceName, UnaryInplace{inplaceName, fn});
    m.def(inplaceName, UnaryInplace{inplaceName, fn}, py::arg("input"));
  }
}

void defBinary(py::module_ &m, py::class_<Tensor> &t, const char *name, const char *inplaceName,
               BinaryFn fn) {
  m.def(name, BinaryFunction{name, fn}, py::arg("input"), py::arg("other"), py::kw_only(),
        py::arg("out") = py::none());
  t.def(name, BinaryMethod{name, fn, false}, py::arg("other"));
  if (inplaceName)
    t.def(inplaceName, BinaryInplace{inplaceName, fn}, py::arg("other"));
}

void defOperator(py::class_<Tensor> &t, const char *name, const char *dunder, const char *rdunder,
                 const char *idunder, BinaryFn fn) {
  if (dunder)
    t.def(dunder, BinaryMethod{name, fn, false});
  if (rdunder)
    t.def(rdunder, BinaryMethod{name, fn, true});
  if (idunder)
    t.def(idunder, BinaryInplace{name, fn});
}

} // namespace elementwise

namespace {
using namespace elementwise;

/// Ops without an op-table row yet (the rows' spellings are bound by bind_op_table.cc): rsub,
/// float_power, the shifts, equal/isclose/allclose.
void bindArithmetic(py::module_ &m, py::class_<Tensor> &t) {
  m.def(
      "rsub",
      [](py::handle a, py::handle b, py::handle alpha, py::handle out) {
        return finish(
            "rsub", ops::sub(operand(b, "rsub"), operand(a, "rsub"), toScalar(alpha, "rsub")), out);
      },
      py::arg("input"), py::arg("other"), py::kw_only(), py::arg("alpha") = 1,
      py::arg("out") = py::none());
  BinaryFn floatPower = &ops::floatPower;
  m.def("float_power", BinaryFunction{"float_power", floatPower}, py::arg("input"),
        py::arg("exponent"), py::kw_only(), py::arg("out") = py::none());
  t.def("float_power", BinaryMethod{"float_power", floatPower, false}, py::arg("exponent"));
}

void bindComparisons(py::module_ &m, py::class_<Tensor> &t) {
  m.def(
      "equal", [](const Tensor &a, const Tensor &b) { return ops::equal(a, b); }, py::arg("input"),
      py::arg("other"));
  t.def(
      "equal", [](const Tensor &a, const Tensor &b) { return ops::equal(a, b); }, py::arg("other"));
  auto isclose = [](py::handle a, py::handle b, double rtol, double atol, bool equalNan) {
    return ops::isclose(operand(a, "isclose"), operand(b, "isclose"), rtol, atol, equalNan);
  };
  auto allclose = [](py::handle a, py::handle b, double rtol, double atol, bool equalNan) {
    return ops::allclose(operand(a, "allclose"), operand(b, "allclose"), rtol, atol, equalNan);
  };
  m.def("isclose", isclose, py::arg("input"), py::arg("other"), py::arg("rtol") = 1e-5,
        py::arg("atol") = 1e-8, py::arg("equal_nan") = false);
  t.def("isclose", isclose, py::arg("other"), py::arg("rtol") = 1e-5, py::arg("atol") = 1e-8,
        py::arg("equal_nan") = false);
  m.def("allclose", allclose, py::arg("input"), py::arg("other"), py::arg("rtol") = 1e-5,
        py::arg("atol") = 1e-8, py::arg("equal_nan") = false);
  t.def("allclose", allclose, py::arg("other"), py::arg("rtol") = 1e-5, py::arg("atol") = 1e-8,
        py::arg("equal_nan") = false);
}

void bindShifts(py::module_ &m, py::class_<Tensor> &t) {
  defBinary(m, t, "bitwise_left_shift", "bitwise_left_shift_", &ops::bitwiseLeftShift);
  defBinary(m, t, "bitwise_right_shift", "bitwise_right_shift_", &ops::bitwiseRightShift);
  defOperator(t, "bitwise_left_shift", "__lshift__", "__rlshift__", "__ilshift__",
              &ops::bitwiseLeftShift);
  defOperator(t, "bitwise_right_shift", "__rshift__", "__rrshift__", "__irshift__",
              &ops::bitwiseRightShift);
}
} // namespace

void bindElementwise(py::module_ &m) {
  auto t = elementwise::tensorClass(m);
  bindArithmetic(m, t);
  bindComparisons(m, t);
  bindShifts(m, t);
  elementwise::bindElementwiseMath(m);
}

} // namespace kiln::frontend

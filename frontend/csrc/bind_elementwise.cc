// Elementwise ops: arithmetic, comparison, logical and bitwise ops as kiln.<op> functions,
// Tensor methods, operators (with reflected and in-place forms). The unary math and activation
// bindings live in bind_elementwise_math.cc and bind_activation.cc.
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

/// add/sub with the `alpha` keyword: kiln.add(input, other, *, alpha=1, out=None), Tensor.add.
void bindAddSub(py::module_ &m, py::class_<Tensor> &t) {
  using AlphaFn = Tensor (*)(const Tensor &, const Tensor &, const Scalar &);
  struct AlphaFunction {
    const char *name;
    AlphaFn fn;
    py::object operator()(py::handle a, py::handle b, py::handle alpha, py::handle out) const {
      return finish(name, fn(operand(a, name), operand(b, name), toScalar(alpha, name)), out);
    }
  };
  struct AlphaMethod {
    const char *name;
    AlphaFn fn;
    bool inplace;
    py::object operator()(py::object self, py::handle b, py::handle alpha) const {
      Tensor other = operand(b, name);
      const Tensor &self_ = self.cast<const Tensor &>();
      const Tensor s = inplace ? autograd::inplaceOperand(self_, {&other}) : self_;
      Tensor r = fn(s, other, toScalar(alpha, name));
      return inplace ? applyInplace(name, self, r) : wrap(r);
    }
  };
  AlphaFn add = &ops::add, sub = &ops::sub;
  AlphaFn rsub = [](const Tensor &a, const Tensor &b, const Scalar &alpha) {
    return ops::sub(b, a, alpha);
  };
  using Named = std::pair<const char *, AlphaFn>;
  for (auto [name, fn] :
       {Named{"add", add}, Named{"sub", sub}, Named{"subtract", sub}, Named{"rsub", rsub}})
    m.def(name, AlphaFunction{name, fn}, py::arg("input"), py::arg("other"), py::kw_only(),
          py::arg("alpha") = 1, py::arg("out") = py::none());
  using NamedMethod = std::tuple<const char *, AlphaFn, bool>;
  for (auto [name, fn, inplace] :
       {NamedMethod{"add", add, false}, NamedMethod{"sub", sub, false},
        NamedMethod{"subtract", sub, false}, NamedMethod{"add_", add, true},
        NamedMethod{"sub_", sub, true}, NamedMethod{"subtract_", sub, true}})
    t.def(name, AlphaMethod{name, fn, inplace}, py::arg("other"), py::kw_only(),
          py::arg("alpha") = 1);
  defOperator(t, "add", "__add__", "__radd__", "__iadd__",
              [](const Tensor &a, const Tensor &b) { return ops::add(a, b); });
  defOperator(t, "sub", "__sub__", "__rsub__", "__isub__",
              [](const Tensor &a, const Tensor &b) { return ops::sub(a, b); });
}

/// div with rounding_mode, and its aliases.
void bindDivision(py::module_ &m, py::class_<Tensor> &t) {
  auto mode = [](py::handle h) { return h.is_none() ? std::string() : h.cast<std::string>(); };
  m.def(
      "div",
      [mode](py::handle a, py::handle b, py::handle rounding, py::handle out) {
        return finish("div", ops::div(operand(a, "div"), operand(b, "div"), mode(rounding)), out);
      },
      py::arg("input"), py::arg("other"), py::kw_only(), py::arg("rounding_mode") = py::none(),
      py::arg("out") = py::none());
  m.attr("divide") = m.attr("div");
  for (const char *name : {"div", "divide", "div_", "divide_"}) {
    bool inplace = name[std::string_view(name).size() - 1] == '_';
    t.def(
        name,
        [mode, inplace](py::object self, py::handle b, py::handle rounding) {
          Tensor other = operand(b, "div");
          const Tensor &self_ = self.cast<const Tensor &>();
          const Tensor s = inplace ? autograd::inplaceOperand(self_, {&other}) : self_;
          Tensor r = ops::div(s, other, mode(rounding));
          return inplace ? applyInplace("div_", self, r) : wrap(r);
        },
        py::arg("other"), py::kw_only(), py::arg("rounding_mode") = py::none());
  }
  BinaryFn trueDiv = [](const Tensor &a, const Tensor &b) { return ops::div(a, b); };
  defBinary(m, t, "true_divide", "true_divide_", trueDiv);
  defOperator(t, "div", "__truediv__", "__rtruediv__", "__itruediv__", trueDiv);
  defBinary(m, t, "floor_divide", "floor_divide_", &ops::floorDivide);
  defOperator(t, "floor_divide", "__floordiv__", "__rfloordiv__", "__ifloordiv__",
              &ops::floorDivide);
  defBinary(m, t, "remainder", "remainder_", &ops::remainder);
  defOperator(t, "remainder", "__mod__", "__rmod__", "__imod__", &ops::remainder);
  defBinary(m, t, "fmod", "fmod_", &ops::fmod);
}

void bindArithmetic(py::module_ &m, py::class_<Tensor> &t) {
  bindAddSub(m, t);
  BinaryFn mul = &ops::mul;
  defBinary(m, t, "mul", "mul_", mul);
  defBinary(m, t, "multiply", "multiply_", mul);
  defOperator(t, "mul", "__mul__", "__rmul__", "__imul__", mul);
  bindDivision(m, t);
  // pow's second argument is called `exponent`; kiln.pow(2, t) takes a number as the base.
  using Named = std::pair<const char *, BinaryFn>;
  for (auto [name, fn] : {Named{"pow", &ops::pow}, Named{"float_power", &ops::floatPower}}) {
    m.def(name, BinaryFunction{name, fn}, py::arg("input"), py::arg("exponent"), py::kw_only(),
          py::arg("out") = py::none());
    t.def(name, BinaryMethod{name, fn, false}, py::arg("exponent"));
  }
  t.def("pow_", BinaryInplace{"pow_", &ops::pow}, py::arg("exponent"));
  defOperator(t, "pow", "__pow__", "__rpow__", "__ipow__", &ops::pow);
  defBinary(m, t, "atan2", "atan2_", &ops::atan2);
  defBinary(m, t, "arctan2", "arctan2_", &ops::atan2);
  defBinary(m, t, "hypot", "hypot_", &ops::hypot);
  defBinary(m, t, "maximum", nullptr, &ops::maximum);
  defBinary(m, t, "minimum", nullptr, &ops::minimum);
  defBinary(m, t, "fmax", nullptr, &ops::fmax);
  defBinary(m, t, "fmin", nullptr, &ops::fmin);
}

void bindComparisons(py::module_ &m, py::class_<Tensor> &t) {
  struct Cmp {
    const char *name, *inplaceName, *dunder;
    BinaryFn fn;
  };
  for (const Cmp &c :
       {Cmp{"eq", "eq_", "__eq__", &ops::eq}, Cmp{"ne", "ne_", "__ne__", &ops::ne},
        Cmp{"lt", "lt_", "__lt__", &ops::lt}, Cmp{"le", "le_", "__le__", &ops::le},
        Cmp{"gt", "gt_", "__gt__", &ops::gt}, Cmp{"ge", "ge_", "__ge__", &ops::ge},
        Cmp{"not_equal", "not_equal_", nullptr, &ops::ne}, Cmp{"less", "less_", nullptr, &ops::lt},
        Cmp{"less_equal", "less_equal_", nullptr, &ops::le},
        Cmp{"greater", "greater_", nullptr, &ops::gt},
        Cmp{"greater_equal", "greater_equal_", nullptr, &ops::ge}}) {
    defBinary(m, t, c.name, c.inplaceName, c.fn);
    defOperator(t, c.name, c.dunder, nullptr, nullptr, c.fn);
  }
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

void bindLogicalBitwise(py::module_ &m, py::class_<Tensor> &t) {
  defBinary(m, t, "logical_and", "logical_and_", &ops::logicalAnd);
  defBinary(m, t, "logical_or", "logical_or_", &ops::logicalOr);
  defBinary(m, t, "logical_xor", "logical_xor_", &ops::logicalXor);
  defUnary(m, t, "logical_not", "logical_not_", &ops::logicalNot);
  defBinary(m, t, "bitwise_and", "bitwise_and_", &ops::bitwiseAnd);
  defBinary(m, t, "bitwise_or", "bitwise_or_", &ops::bitwiseOr);
  defBinary(m, t, "bitwise_xor", "bitwise_xor_", &ops::bitwiseXor);
  defUnary(m, t, "bitwise_not", "bitwise_not_", &ops::bitwiseNot);
  defBinary(m, t, "bitwise_left_shift", "bitwise_left_shift_", &ops::bitwiseLeftShift);
  defBinary(m, t, "bitwise_right_shift", "bitwise_right_shift_", &ops::bitwiseRightShift);
  defOperator(t, "bitwise_and", "__and__", "__rand__", "__iand__", &ops::bitwiseAnd);
  defOperator(t, "bitwise_or", "__or__", "__ror__", "__ior__", &ops::bitwiseOr);
  defOperator(t, "bitwise_xor", "__xor__", "__rxor__", "__ixor__", &ops::bitwiseXor);
  defOperator(t, "bitwise_left_shift", "__lshift__", "__rlshift__", "__ilshift__",
              &ops::bitwiseLeftShift);
  defOperator(t, "bitwise_right_shift", "__rshift__", "__rrshift__", "__irshift__",
              &ops::bitwiseRightShift);
  t.def("__invert__", [](const Tensor &a) {
    KILN_CHECK_KIND(Type, !isFloating(a.dtype()),
                    "~ (operator.invert) is only implemented on integer and bool tensors, got {}",
                    dtypeName(a.dtype()));
    return ops::bitwiseNot(a);
  });
}
} // namespace

void bindElementwise(py::module_ &m) {
  auto t = elementwise::tensorClass(m);
  bindArithmetic(m, t);
  bindComparisons(m, t);
  bindLogicalBitwise(m, t);
  elementwise::bindElementwiseMath(m);
  elementwise::bindActivations(m);
}

} // namespace kiln::frontend

#pragma once
// Binding helpers shared by the elementwise binding files (bind_elementwise*.cc).
//
// Ops are bound through a few functor types that hold the op's name and a function pointer, so
// pybind11 instantiates its call machinery once per signature rather than once per op (binding
// translation units are the slowest part of the build).

#include "frontend/csrc/py_convert.h"
#include "runtime/ops/elementwise.h"

namespace kiln::frontend::elementwise {

using UnaryFn = Tensor (*)(const Tensor &);
using BinaryFn = Tensor (*)(const Tensor &, const Tensor &);

inline py::class_<Tensor> tensorClass(py::module_ &m) {
  return py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
}

/// A Tensor operand from a kiln.Tensor or a number (Python or NumPy scalar); nullopt otherwise.
std::optional<Tensor> asOperand(py::handle obj);
/// Like asOperand, but throws TypeError naming `op` for anything else.
Tensor operand(py::handle obj, const char *op);
/// Returns result, or writes it into `out` (when not None) and returns out.
py::object finish(const char *op, Tensor result, py::handle out);
/// Computes into self (torch's in-place casting rule) and returns self.
py::object applyInplace(const char *op, py::object self, const Tensor &result);

/// kiln.op(input, *, out=None).
struct UnaryFunction {
  const char *name;
  UnaryFn fn;
  py::object operator()(const Tensor &a, py::handle out) const { return finish(name, fn(a), out); }
};
/// Tensor.op_() (in-place).
struct UnaryInplace {
  const char *name;
  UnaryFn fn;
  py::object operator()(py::object self) const {
    return applyInplace(name, self, fn(autograd::inplaceOperand(self.cast<const Tensor &>())));
  }
};
/// kiln.op(input, other, *, out=None): either operand may be a number.
struct BinaryFunction {
  const char *name;
  BinaryFn fn;
  py::object operator()(py::handle a, py::handle b, py::handle out) const {
    return finish(name, fn(operand(a, name), operand(b, name)), out);
  }
};
/// Tensor.op(other) and operators: NotImplemented for operands that are not tensors or numbers,
/// so Python tries the other operand's reflected method (and `t == None` is False).
struct BinaryMethod {
  const char *name;
  BinaryFn fn;
  bool reflected;
  py::object operator()(const Tensor &a, py::handle b) const {
    std::optional<Tensor> other = asOperand(b);
    if (!other)
      return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    return wrap(reflected ? fn(*other, a) : fn(a, *other));
  }
};
/// Tensor.op_(other) and the augmented-assignment operators.
struct BinaryInplace {
  const char *name;
  BinaryFn fn;
  py::object operator()(py::object self, py::handle b) const {
    std::optional<Tensor> other = asOperand(b);
    if (!other)
      return py::reinterpret_borrow<py::object>(Py_NotImplemented);
    return applyInplace(
        name, self, fn(autograd::inplaceOperand(self.cast<const Tensor &>(), {&*other}), *other));
  }
};

/// Binds kiln.name, Tensor.name and Tensor.name_ for a unary op.
void defUnary(py::module_ &m, py::class_<Tensor> &t, const char *name, const char *inplaceName,
              UnaryFn fn);
/// Binds kiln.name and Tensor.name for a binary op; `inplaceName` (may be null) is Tensor.name_.
void defBinary(py::module_ &m, py::class_<Tensor> &t, const char *name, const char *inplaceName,
               BinaryFn fn);
/// Binds an operator and its reflection (either may be null) and the augmented assignment.
void defOperator(py::class_<Tensor> &t, const char *name, const char *dunder, const char *rdunder,
                 const char *idunder, BinaryFn fn);

/// Unary math, rounding, classification, clamp/where/lerp and friends.
void bindElementwiseMath(py::module_ &m);

} // namespace kiln::frontend::elementwise

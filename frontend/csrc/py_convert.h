#pragma once
/// Conversions between Python objects and runtime values, shared by every binding file.

#include "autograd/meta.h"
#include "autograd/ops.h"
#include "runtime/tensor.h"

#include <pybind11/pybind11.h>

#include <optional>
#include <vector>

namespace kiln::frontend {

namespace py = pybind11;

/// The bindings call the differentiable ops (autograd/ops.h), which re-export every kernel.
namespace ops = kiln::autograd::ops;

/// A tuple of tensors (split's, unbind's, nonzero(as_tuple=True)'s result).
py::tuple tensorTuple(const std::vector<Tensor> &ts);
/// The name of obj's Python type (`str`, `float`, `Tensor`), as argument errors print it.
std::string typeName(py::handle obj);
/// A Tensor argument, or a Python bool/int/float wrapped as a weak scalar operand.
/// Throws TypeError naming `op` for anything else.
Tensor toOperand(py::handle obj, const char *op);
/// Python number to Scalar; throws TypeError for anything else.
Scalar toScalar(py::handle obj, const char *op);
bool isNumber(py::handle obj);
/// A shape from either f(2, 3) (args) or f((2, 3)) / f([2, 3]) / f(kiln.Size) forms.
Shape toShape(const py::args &args, const char *op);
Shape toIntList(py::handle obj, const char *op);
/// An optional dim list: None -> nullopt, int -> {d}, sequence -> dims.
std::optional<Shape> toDims(py::handle obj, const char *op);

/// Makes a Python object for a Tensor (a kiln.Tensor).
py::object wrap(Tensor t);
/// kiln.return_types.<name>(values, indices), the named tuple torch returns.
py::object returnType(const char *name, Tensor values, Tensor indices);
/// Refuses an op autograd does not follow yet (a write into, or a result of, a tensor that
/// requires grad) rather than computing wrong gradients.
void requireUntracked(const char *op, std::initializer_list<const Tensor *> ts);

} // namespace kiln::frontend

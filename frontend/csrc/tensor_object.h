// kiln._C.Tensor objects on hot paths (guards, compiled calls) without pybind11's per-call type
// lookups: py::isinstance<Tensor> and py::cast hash typeid(Tensor) on every call.
#pragma once

#include "runtime/tensor.h"

#include <pybind11/pybind11.h>

namespace kiln::frontend {

/// The C++ Tensor inside a kiln._C.Tensor (or subclass, e.g. Parameter) instance, or null.
const Tensor *asTensor(PyObject *obj);

/// A new kiln._C.Tensor object owning `t`.
pybind11::object wrapTensor(Tensor t);

} // namespace kiln::frontend

#pragma once
/// Helpers shared by the factory, random and interop binding files (bind_factory*.cc,
/// bind_interop.cc): the keyword arguments every torch factory takes, and tensors from Python
/// data.

#include "frontend/csrc/py_convert.h"
#include "runtime/generator.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>

namespace kiln::frontend {

/// Accepts device=None, 'cpu', 'cpu:0' or a kiln.device for the CPU; throws RuntimeError naming
/// `op` for CUDA (no CUDA device is available to kiln) and ValueError for unknown devices.
void checkDevice(py::handle device, const char *op);
/// The CUDA device a factory's `device=` names (nullopt for none or the CPU); throws when CUDA
/// is unavailable or the index does not exist.
std::optional<Device> targetDevice(py::handle device, const char *op);
/// targetDevice, defaulting to `like`'s device when `device` is None (`*_like`, `new_*`).
std::optional<Device> targetDeviceLike(py::handle device, const Tensor &like, const char *op);
/// `t` moved to `device` when one is given (factories build on the host, then move once).
Tensor placeOn(Tensor t, std::optional<Device> device);

/// Sets requires_grad on a factory's result; only floating tensors may require gradients.
Tensor finishFactory(Tensor t, bool requiresGrad, const char *op);

/// A shape given as varargs (f(2, 3)), one sequence (f((2, 3))) or the size= keyword.
Shape factoryShape(const py::args &args, py::handle size, const char *op);

/// generator=None (the default generator) or a kiln.Generator; TypeError naming `op` otherwise.
Generator *toGenerator(py::handle obj, const char *op);

/// A new tensor holding a copy of `data`: nested sequences of numbers, NumPy arrays and scalars,
/// kiln tensors, or a Python number (0-d). dtype defaults to torch's inference.
Tensor tensorFromData(py::handle data, std::optional<DType> dtype, const char *op);

/// The kiln dtype of a NumPy dtype; TypeError for dtypes kiln lacks.
DType dtypeFromNumpy(const py::dtype &d);
/// A tensor over a NumPy array. Zero-copy when `share`; otherwise the array may be read-only,
/// negatively strided or non-native-endian and the result is a fresh contiguous copy.
Tensor tensorFromNumpy(const py::array &arr, bool share);

/// Binds the random ops and kiln.Generator (bind_factory_random.cc).
void bindRandom(py::module_ &m);
/// Binds kiln.tensor, scalar_tensor and Tensor.new_tensor (bind_factory_data.cc).
void bindTensorData(py::module_ &m);

} // namespace kiln::frontend

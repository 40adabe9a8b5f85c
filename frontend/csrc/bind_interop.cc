// NumPy interop, zero-copy both ways where the memory allows.
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"

#include <pybind11/numpy.h>

namespace kiln::frontend {

namespace {

py::dtype numpyDType(DType t) {
  switch (t) {
  case DType::Bool:
    return py::dtype("bool");
  case DType::UInt8:
    return py::dtype("uint8");
  case DType::Int8:
    return py::dtype("int8");
  case DType::Int16:
    return py::dtype("int16");
  case DType::Int32:
    return py::dtype("int32");
  case DType::Int64:
    return py::dtype("int64");
  case DType::Float16:
    return py::dtype("float16");
  case DType::Float32:
    return py::dtype("float32");
  case DType::Float64:
    return py::dtype("float64");
  case DType::BFloat16:
    break;
  }
  fail(ErrorKind::Type, "Got unsupported ScalarType {}: NumPy has no {} dtype; convert with "
       ".float() first", dtypeName(t), dtypeName(t));
}

DType fromNumpyDType(const py::dtype &d) {
  // Read through Python attributes: NumPy 2 changed the descriptor struct that older pybind11
  // accessors read directly.
  char kind = d.attr("kind").cast<std::string>()[0];
  int64_t size = d.attr("itemsize").cast<int64_t>();
  if (kind == 'b')
    return DType::Bool;
  if (kind == 'u' && size == 1)
    return DType::UInt8;
  if (kind == 'i') {
    switch (size) {
    case 1:
      return DType::Int8;
    case 2:
      return DType::Int16;
    case 4:
      return DType::Int32;
    case 8:
      return DType::Int64;
    }
  }
  if (kind == 'f') {
    switch (size) {
    case 2:
      return DType::Float16;
    case 4:
      return DType::Float32;
    case 8:
      return DType::Float64;
    }
  }
  fail(ErrorKind::Type,
       "can't convert np.ndarray of type {}. The only supported types are: float64, float32, "
       "float16, int64, int32, int16, int8, uint8, and bool.",
       std::string(py::repr(d)));
}

} // namespace

void bindInterop(py::module_ &m) {
  m.def("from_numpy", [](py::array arr) {
    DType dt = fromNumpyDType(arr.dtype());
    const int64_t isz = itemsize(dt);
    Shape sizes(arr.ndim()), strides(arr.ndim());
    for (py::ssize_t i = 0; i < arr.ndim(); ++i) {
      sizes[i] = arr.shape(i);
      KILN_CHECK_KIND(Value, arr.strides(i) >= 0 && arr.strides(i) % isz == 0,
                      "from_numpy: arrays with negative or unaligned strides are not supported "
                      "(stride {} bytes at dim {}); use np.ascontiguousarray first",
                      arr.strides(i), i);
      strides[i] = arr.strides(i) / isz;
    }
    KILN_CHECK_KIND(Value, arr.writeable(),
                    "from_numpy: the given NumPy array is not writable; copy it first");
    PyObject *owner = arr.ptr();
    Py_INCREF(owner);
    size_t nbytes = 0;
    if (arr.size() > 0) {
      int64_t maxOff = 0;
      for (py::ssize_t i = 0; i < arr.ndim(); ++i)
        maxOff += (sizes[i] - 1) * strides[i];
      nbytes = (maxOff + 1) * isz;
    }
    auto storage = Storage::borrow(const_cast<void *>(arr.data()), nbytes, Device{}, [owner] {
      py::gil_scoped_acquire gil;
      Py_DECREF(owner);
    });
    return Tensor::fromStorage(storage, dt, sizes, strides, 0);
  }, py::arg("ndarray"));

  py::class_<Tensor> t = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  t.def("numpy", [](const Tensor &self, bool force) {
    KILN_CHECK(self.device().type == DeviceType::CPU,
               "numpy(): can't convert {} device tensor to numpy; use .cpu() first",
               self.device().str());
    if (self.requiresGrad() && !force)
      fail(ErrorKind::Runtime, "Can't call numpy() on Tensor that requires grad. Use "
           "tensor.detach().numpy() instead.");
    std::vector<py::ssize_t> shape(self.sizes().begin(), self.sizes().end());
    std::vector<py::ssize_t> strides(self.dim());
    for (int64_t i = 0; i < self.dim(); ++i)
      strides[i] = self.strides()[i] * self.itemsize();
    // The capsule keeps the storage alive as long as the array (and its views) exist.
    auto *keep = new Tensor(self);
    py::capsule base(keep, [](void *p) { delete static_cast<Tensor *>(p); });
    return py::array(numpyDType(self.dtype()), shape, strides, self.rawData(), base);
  }, py::arg("force") = false);
}

} // namespace kiln::frontend

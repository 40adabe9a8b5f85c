// kiln.tensor and friends: tensors copied from Python data (nested sequences, NumPy, tensors).
//
// Like torch, the shape comes from following the first element of each nesting level, the dtype
// from promoting the types of all leaves (bool < int64 < default float; NumPy scalars, arrays
// and tensors vote with their own dtype), and a second pass copies the values while checking
// that every level has the expected length.
#include "frontend/csrc/bind_factory.h"
#include "frontend/csrc/bindings.h"
#include "runtime/copy.h"
#include "runtime/error.h"
#include "runtime/ops/factory.h"

namespace kiln::frontend {

namespace {

enum class Kind { Sequence, Block, Number };

bool isNumpyGeneric(py::handle h) {
  // Leaked on purpose: the class outlives every call and must not be released at exit.
  static PyObject *generic =
      py::object(py::module_::import("numpy").attr("generic")).release().ptr();
  return PyObject_IsInstance(h.ptr(), generic) == 1;
}

/// Raised for ragged data: a TypeError (kiln's contract) that torch-style code catching
/// ValueError also sees.
[[noreturn]] void raggedError(const std::string &msg) {
  static PyObject *cls = [] {
    py::tuple bases = py::make_tuple(py::handle(PyExc_TypeError), py::handle(PyExc_ValueError));
    return PyErr_NewException("kiln.RaggedSequenceError", bases.ptr(), nullptr);
  }();
  PyErr_SetString(cls, msg.c_str());
  throw py::error_already_set();
}

Kind classify(py::handle h, const char *op) {
  PyObject *p = h.ptr();
  if (PyList_Check(p) || PyTuple_Check(p))
    return Kind::Sequence;
  // Exact types only: NumPy's float64 subclasses float but votes as float64 (a Block).
  if (PyBool_Check(p) || PyLong_CheckExact(p) || PyFloat_CheckExact(p))
    return Kind::Number;
  if (py::isinstance<Tensor>(h) || py::isinstance<py::array>(h) || isNumpyGeneric(h))
    return Kind::Block;
  KILN_CHECK_KIND(Type, !PyUnicode_Check(p) && !PyBytes_Check(p) && !PyByteArray_Check(p),
                  "{}(): invalid data type '{}' (expected numbers or nested sequences of numbers)",
                  op, typeName(h));
  KILN_CHECK_KIND(Type, !PyComplex_Check(p), "{}(): complex numbers are not supported by kiln", op);
  if (PyLong_Check(p) || PyFloat_Check(p))
    return Kind::Number;
  if (py::hasattr(h, "__array__"))
    return Kind::Block;
  if (PySequence_Check(p))
    return Kind::Sequence;
  if (PyIndex_Check(p) || PyObject_HasAttrString(p, "__float__"))
    return Kind::Number;
  fail(ErrorKind::Runtime, "{}(): Could not infer dtype of {}", op, typeName(h));
}

/// A block as a NumPy array (blocks that are not kiln tensors).
py::array asNumpy(py::handle h) {
  if (py::isinstance<py::array>(h))
    return py::reinterpret_borrow<py::array>(h);
  return py::reinterpret_steal<py::array>(
      py::module_::import("numpy").attr("asarray")(h).release());
}

/// A block (tensor, NumPy array or scalar, array-like) as a kiln tensor (a copy for NumPy data).
Tensor blockTensor(py::handle h) {
  if (py::isinstance<Tensor>(h))
    return h.cast<Tensor>();
  return tensorFromNumpy(asNumpy(h), false);
}

Shape blockShape(py::handle h) {
  if (py::isinstance<Tensor>(h))
    return h.cast<const Tensor &>().sizes();
  py::array arr = asNumpy(h);
  return Shape(arr.shape(), arr.shape() + arr.ndim());
}

DType blockDType(py::handle h) {
  if (py::isinstance<Tensor>(h))
    return h.cast<const Tensor &>().dtype();
  return dtypeFromNumpy(asNumpy(h).dtype());
}

DType numberDType(py::handle h) {
  PyObject *p = h.ptr();
  if (PyBool_Check(p))
    return DType::Bool;
  if (PyLong_Check(p) || (PyIndex_Check(p) && !PyFloat_Check(p)))
    return DType::Int64;
  return defaultFloatDType();
}

void inferDType(py::handle h, std::optional<DType> &acc, const char *op) {
  DType leaf;
  switch (classify(h, op)) {
  case Kind::Sequence:
    for (py::handle item : py::reinterpret_borrow<py::sequence>(h))
      inferDType(item, acc, op);
    return;
  case Kind::Block:
    leaf = blockDType(h);
    break;
  case Kind::Number:
    leaf = numberDType(h);
    break;
  }
  acc = acc ? promoteTypes(*acc, leaf) : leaf;
}

Shape inferShape(py::handle data, const char *op) {
  Shape shape;
  py::object cur = py::reinterpret_borrow<py::object>(data);
  while (true) {
    Kind k = classify(cur, op);
    if (k == Kind::Block) {
      Shape rest = blockShape(cur);
      shape.insert(shape.end(), rest.begin(), rest.end());
      return shape;
    }
    if (k == Kind::Number)
      return shape;
    py::sequence seq = py::reinterpret_borrow<py::sequence>(cur);
    int64_t n = static_cast<int64_t>(py::len(seq));
    shape.push_back(n);
    if (n == 0)
      return shape;
    cur = seq[0];
  }
}

/// A Python number converted to T, with torch's overflow checks for integer results (a Python
/// int beyond int64, or a value outside T's range, is an error rather than a silent wrap).
template <typename T> T numberValue(py::handle h, const char *op) {
  constexpr bool kCheck = std::is_integral_v<T> && !std::is_same_v<T, bool>;
  PyObject *p = h.ptr();
  if (PyBool_Check(p))
    return convertValue<T>(p == Py_True);
  if (PyLong_Check(p) || PyIndex_Check(p)) {
    py::object idx = py::reinterpret_steal<py::object>(PyNumber_Index(p));
    int overflow = 0;
    long long v = idx ? PyLong_AsLongLongAndOverflow(idx.ptr(), &overflow) : -1;
    if (!idx || PyErr_Occurred())
      throw py::error_already_set();
    KILN_CHECK_KIND(Value, !overflow, "{}(): Python int {} is too large for int64 (overflow)", op,
                    std::string(py::str(h)));
    if constexpr (kCheck)
      ops::checkFits(Scalar(static_cast<int64_t>(v)), dtypeOf<T>(), op, false);
    return convertValue<T>(static_cast<int64_t>(v));
  }
  double d = PyFloat_AsDouble(p);
  if (d == -1.0 && PyErr_Occurred())
    throw py::error_already_set();
  if constexpr (kCheck)
    ops::checkFits(Scalar(d), dtypeOf<T>(), op, false);
  return convertValue<T>(d);
}

struct Filler {
  const Shape &shape;
  const Tensor &out;
  const char *op;
  int64_t pos = 0;

  std::string where(size_t dim) const { return dim == 0 ? "" : fmt::format(" at dim {}", dim); }

  template <typename T> void fill(py::handle h, size_t dim) {
    Kind k = classify(h, op);
    if (k == Kind::Block)
      return copyBlock(blockTensor(h), dim);
    if (dim == shape.size()) {
      if (k == Kind::Sequence)
        raggedError(fmt::format("{}(): expected a number{} but got a sequence of length {} "
                                "(nested sequences must be rectangular)",
                                op, where(dim), py::len(h)));
      out.data<T>()[pos++] = numberValue<T>(h, op);
      return;
    }
    if (k != Kind::Sequence)
      raggedError(fmt::format("{}(): expected a sequence of length {}{} but got a {} (nested "
                              "sequences must be rectangular)",
                              op, shape[dim], where(dim), typeName(h)));
    py::sequence seq = py::reinterpret_borrow<py::sequence>(h);
    int64_t n = static_cast<int64_t>(py::len(seq));
    if (n != shape[dim])
      raggedError(fmt::format("{}(): expected sequence of length {}{} (got {})", op, shape[dim],
                              where(dim), n));
    for (py::handle item : seq)
      fill<T>(item, dim + 1);
  }

  void copyBlock(const Tensor &src, size_t dim) {
    Shape rest(shape.begin() + static_cast<std::ptrdiff_t>(dim), shape.end());
    if (src.sizes() != rest)
      raggedError(fmt::format("{}(): expected an element of shape {}{} but got one of shape {}", op,
                              shapeToString(rest), where(dim), src.shapeStr()));
    Tensor dst =
        Tensor::fromStorage(out.storage(), out.dtype(), rest, contiguousStrides(rest), pos);
    copyInto(dst, src);
    pos += numelOf(rest);
  }
};

} // namespace

Tensor tensorFromData(py::handle data, std::optional<DType> dtype, const char *op) {
  if (py::isinstance<Tensor>(data)) {
    const Tensor &src = data.cast<const Tensor &>();
    return src.to(dtype.value_or(src.dtype()), /*copy=*/true);
  }
  if (classify(data, op) == Kind::Block) {
    Tensor copy = blockTensor(data); // NumPy data: already a private copy
    return copy.to(dtype.value_or(copy.dtype()));
  }
  Shape shape = inferShape(data, op);
  if (!dtype) {
    std::optional<DType> inferred;
    inferDType(data, inferred, op);
    dtype = inferred.value_or(defaultFloatDType());
  }
  Tensor out = Tensor::empty(shape, *dtype);
  Filler filler{shape, out, op};
  dispatchAll(*dtype, [&]<typename T>() { filler.fill<T>(data, 0); });
  return out;
}

void bindTensorData(py::module_ &m) {
  m.def(
      "tensor",
      [](py::handle data, std::optional<DType> dtype, py::handle device, bool requiresGrad, bool) {
        std::optional<Device> target = targetDevice(device, "tensor");
        return finishFactory(placeOn(tensorFromData(data, dtype, "tensor"), target), requiresGrad,
                             "tensor");
      },
      py::arg("data"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false, py::arg("pin_memory") = false);
  m.def(
      "scalar_tensor",
      [](py::handle s, std::optional<DType> dtype, py::handle device, bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, "scalar_tensor");
        Tensor t =
            Tensor::scalarTensor(toScalar(s, "scalar_tensor"), dtype.value_or(defaultFloatDType()));
        return finishFactory(placeOn(t, target), requiresGrad, "scalar_tensor");
      },
      py::arg("s"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false);
  auto t = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  t.def(
      "new_tensor",
      [](const Tensor &self, py::handle data, std::optional<DType> dtype, py::handle device,
         bool requiresGrad) {
        std::optional<Device> target = targetDevice(device, "new_tensor");
        Tensor r = tensorFromData(data, dtype.value_or(self.dtype()), "new_tensor");
        return finishFactory(placeOn(r, target), requiresGrad, "new_tensor");
      },
      py::arg("data"), py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      py::arg("requires_grad") = false);
}

} // namespace kiln::frontend

#include "frontend/csrc/py_convert.h"

#include "runtime/error.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

std::string typeName(py::handle obj) { return py::str(py::type::of(obj).attr("__name__")); }

py::tuple tensorTuple(const std::vector<Tensor> &ts) { return py::tuple(py::cast(ts)); }

bool isNumber(py::handle obj) {
  return PyBool_Check(obj.ptr()) || PyLong_Check(obj.ptr()) || PyFloat_Check(obj.ptr());
}

Scalar toScalar(py::handle obj, const char *op) {
  PyObject *p = obj.ptr();
  if (PyBool_Check(p))
    return Scalar(p == Py_True);
  if (PyLong_Check(p)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(p, &overflow);
    KILN_CHECK(!overflow, "{}: Python int {} does not fit in int64", op, std::string(py::str(obj)));
    return Scalar(static_cast<int64_t>(v));
  }
  if (PyFloat_Check(p))
    return Scalar(PyFloat_AS_DOUBLE(p));
  // NumPy scalars and 0-d kiln tensors also act as numbers.
  if (py::isinstance<Tensor>(obj)) {
    return obj.cast<const Tensor &>().item();
  }
  if (PyIndex_Check(p))
    return Scalar(static_cast<int64_t>(PyNumber_AsSsize_t(p, nullptr)));
  if (PyNumber_Check(p) && PyObject_HasAttrString(p, "dtype")) {
    py::object f = py::reinterpret_steal<py::object>(PyNumber_Float(p));
    if (f)
      return Scalar(PyFloat_AS_DOUBLE(f.ptr()));
    PyErr_Clear();
  }
  fail(ErrorKind::Type, "{}: expected a number, got {}", op, typeName(obj));
}

Tensor toOperand(py::handle obj, const char *op) {
  if (py::isinstance<Tensor>(obj))
    return obj.cast<const Tensor &>();
  PyObject *p = obj.ptr();
  if (PyBool_Check(p) || PyLong_Check(p) || PyFloat_Check(p))
    return Tensor::wrapScalar(toScalar(obj, op));
  fail(ErrorKind::Type, "{}: unsupported operand of type '{}' (expected a kiln.Tensor or a number)",
       op, typeName(obj));
}

Shape toIntList(py::handle obj, const char *op) {
  Shape out;
  if (PyLong_Check(obj.ptr())) {
    out.push_back(obj.cast<int64_t>());
    return out;
  }
  if (py::isinstance<Tensor>(obj)) {
    // A tensor of sizes (torch accepts an int tensor): 0-d or 1-D integers only.
    const Tensor &t = obj.cast<const Tensor &>();
    KILN_CHECK_KIND(Type, !isFloating(t.dtype()) && t.dtype() != DType::Bool && t.dim() <= 1,
                    "{}: expected a sequence of ints, got a {} tensor of shape {}", op,
                    dtypeName(t.dtype()), t.shapeStr());
    Tensor flat = t.reshape({-1});
    for (int64_t i = 0; i < flat.numel(); ++i)
      out.push_back(flat.select(0, i).item().toInt());
    return out;
  }
  KILN_CHECK_KIND(Type, PySequence_Check(obj.ptr()), "{}: expected a sequence of ints, got {}", op,
                  typeName(obj));
  for (py::handle h : py::reinterpret_borrow<py::sequence>(obj)) {
    KILN_CHECK_KIND(
        Type, PyIndex_Check(h.ptr()) && !PyBool_Check(h.ptr()) ? true : PyLong_Check(h.ptr()),
        "{}: expected a sequence of ints, found an element of type {}", op, typeName(h));
    if (py::isinstance<Tensor>(h))
      out.push_back(h.cast<const Tensor &>().item().toInt());
    else if (Py_ssize_t v = PyNumber_AsSsize_t(h.ptr(), PyExc_OverflowError);
             v == -1 && PyErr_Occurred())
      throw py::error_already_set();
    else
      out.push_back(v);
  }
  return out;
}

Shape toShape(const py::args &args, const char *op) {
  if (args.size() == 1 && !PyLong_Check(args[0].ptr()))
    return toIntList(args[0], op);
  return toIntList(args, op);
}

std::optional<Shape> toDims(py::handle obj, const char *op) {
  if (obj.is_none())
    return std::nullopt;
  return toIntList(obj, op);
}

py::object wrap(Tensor t) { return py::cast(std::move(t)); }

py::object returnType(const char *name, Tensor values, Tensor indices) {
  // Looked up once and kept for the life of the process (never released at exit).
  static py::handle types =
      py::object(py::module_::import("kiln._ops_reduce").attr("return_types")).release();
  return types.attr(name)(std::move(values), std::move(indices));
}

void requireUntracked(const char *op, std::initializer_list<const Tensor *> ts) {
  KILN_CHECK_KIND(NotImplemented, !autograd::anyRequiresGrad(ts),
                  "{} on a tensor that requires grad (or with a value that does) is not "
                  "differentiable yet; build the result out of place (torch.where, index_put, "
                  "cat) or run it under kiln.no_grad()",
                  op);
}

} // namespace kiln::frontend

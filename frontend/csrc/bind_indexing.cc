// Tensor.__getitem__/__setitem__ and the indexing ops (runtime/ops/index.h).
//
// An index expression is applied in two stages, as in torch: basic items (ints, slices, None,
// Ellipsis) become one view of self, then any advanced items (integer/bool tensors, lists,
// Python bools) are applied together by ops::index / ops::indexPut_. So `x[0]` and `x[:, 1]` stay
// cheap views and only advanced indexing copies.
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/index.h"

#include <pybind11/stl.h>

#include <limits>

namespace kiln::frontend {

namespace {

py::class_<Tensor> tensorClass(py::module_ &m) {
  return py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
}

/// A kiln tensor from a list/tuple/ndarray through NumPy (kiln._C.from_numpy).
Tensor fromArrayLike(py::handle obj) {
  py::module_ np = py::module_::import("numpy");
  py::object arr = np.attr("asarray")(obj);
  if (arr.attr("size").cast<int64_t>() == 0 &&
      arr.attr("dtype").attr("kind").cast<std::string>() == "f")
    arr = arr.attr("astype")("int64"); // [] is float64 to NumPy but an empty index to torch
  arr = np.attr("ascontiguousarray")(arr);
  py::object fromNumpy = py::module_::import("kiln._C").attr("from_numpy");
  return fromNumpy(arr).cast<Tensor>();
}

/// An index given as a Python sequence: a flat list of ints (fast path) or anything NumPy reads.
Tensor sequenceToIndex(py::handle seq) {
  py::sequence s = py::reinterpret_borrow<py::sequence>(seq);
  const auto n = static_cast<int64_t>(s.size());
  bool allInts = true;
  for (py::handle h : s)
    allInts = allInts && PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr());
  if (!allInts)
    return fromArrayLike(seq);
  Tensor t = Tensor::empty({n}, DType::Int64);
  int64_t *p = t.data<int64_t>();
  int64_t i = 0;
  for (py::handle h : s)
    p[i++] = h.cast<int64_t>();
  return t;
}

/// torch's rule for x[[...]]: a short sequence holding slices, None, Ellipsis, tensors or other
/// sequences is a tuple of indices (legacy NumPy); otherwise it is one index array.
bool treatSequenceAsTuple(py::handle obj) {
  if (py::isinstance<py::tuple>(obj))
    return true;
  if (!PyList_Check(obj.ptr()))
    return false;
  py::list l = py::reinterpret_borrow<py::list>(obj);
  if (l.size() >= 32)
    return false;
  for (py::handle h : l) {
    if (py::isinstance<Tensor>(h) || PySlice_Check(h.ptr()) || h.is_none() ||
        h.ptr() == Py_Ellipsis || (PySequence_Check(h.ptr()) && !PyUnicode_Check(h.ptr())))
      return true;
  }
  return false;
}

/// The result of the basic-indexing stage.
struct Parsed {
  Tensor view;                  // self after ints, slices, None and Ellipsis: shares storage
  std::vector<Tensor> advanced; // per item of view's dims; undefined where a dim is taken whole
  bool hasAdvanced = false;
};

bool isIntegerLike(py::handle h) { return PyLong_Check(h.ptr()) && !PyBool_Check(h.ptr()); }

/// A Python int index; one that does not fit in int64 is out of bounds for any tensor.
int64_t indexInt(py::handle h) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow)
    fail(ErrorKind::Index, "index {} is out of bounds: it does not fit in int64",
         std::string(py::str(h)));
  return static_cast<int64_t>(v);
}

/// How many dims of self an item consumes (Ellipsis expands to the rest).
int64_t dimsConsumed(py::handle h) {
  if (h.is_none() || h.ptr() == Py_Ellipsis || PyBool_Check(h.ptr()))
    return 0;
  if (py::isinstance<Tensor>(h)) {
    const Tensor &t = h.cast<const Tensor &>();
    if (t.dtype() == DType::Bool || t.dtype() == DType::UInt8)
      return t.dim();
    return 1;
  }
  return 1;
}

class IndexParser {
public:
  explicit IndexParser(const Tensor &self) { p_.view = self; }

  Parsed run(py::handle index) {
    py::tuple items = treatSequenceAsTuple(index)
                          ? py::tuple(py::reinterpret_borrow<py::object>(index))
                          : py::make_tuple(index);
    int64_t specified = 0;
    for (py::handle h : items)
      specified += dimsConsumed(h);
    const int64_t selfDim = p_.view.dim();
    if (selfDim == 0 && specified > 0 && isIntegerLike(items[0]))
      selectInt(0); // raises torch's "invalid index of a 0-dim tensor" error
    KILN_CHECK_KIND(Index, specified <= selfDim,
                    "too many indices for tensor of dimension {} (got {} indexed dims)", selfDim,
                    specified);
    bool sawEllipsis = false;
    for (py::handle h : items) {
      if (h.ptr() == Py_Ellipsis) {
        KILN_CHECK_KIND(Index, !sawEllipsis, "an index can only have a single ellipsis ('...')");
        sawEllipsis = true;
        for (int64_t k = 0; k < selfDim - specified; ++k)
          keepDim();
        continue;
      }
      apply(h);
    }
    return std::move(p_);
  }

private:
  void keepDim() {
    p_.advanced.emplace_back();
    ++dim_;
    ++selfDim_;
  }

  void selectInt(int64_t i) {
    KILN_CHECK_KIND(Index, p_.view.dim() > 0,
                    "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                    "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number");
    const int64_t n = p_.view.size(dim_);
    // Checked here so that the error names the dim of self, not of the partial view.
    KILN_CHECK_KIND(Index, i >= -n && i < n,
                    "index {} is out of bounds for dimension {} with size {}", i, selfDim_, n);
    p_.view = autograd::select(p_.view, dim_, i);
    ++selfDim_;
  }

  void applySlice(py::handle h) {
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(h.ptr(), &start, &stop, &step) < 0)
      throw py::error_already_set();
    KILN_CHECK_KIND(Value, step > 0, "step must be greater than zero (got {})", step);
    std::optional<int64_t> s = start, e = stop;
    if (stop == PY_SSIZE_T_MAX)
      e.reset();
    p_.view = autograd::slice(p_.view, dim_, s, e, step);
    keepDim();
  }

  void addAdvanced(const Tensor &t) {
    p_.advanced.push_back(t);
    p_.hasAdvanced = true;
    bool mask = t.dtype() == DType::Bool || t.dtype() == DType::UInt8;
    // A mask stands for all the dims it covers and ops::index expands it; a 0-d mask covers none
    // (ops::index inserts its new dim).
    dim_ += mask ? t.dim() : 1;
    selfDim_ += mask ? t.dim() : 1;
  }

  void applyTensor(const Tensor &t) {
    if (t.dim() == 0 && isIntegral(t.dtype(), false) && t.dtype() != DType::UInt8) {
      selectInt(t.item().toInt()); // a 0-d integer tensor is an int: a view, as in torch
      return;
    }
    KILN_CHECK_KIND(Index, isIntegral(t.dtype(), true),
                    "tensors used as indices must be long, int, byte or bool tensors (got {})",
                    dtypeName(t.dtype()));
    addAdvanced(t);
  }

  void apply(py::handle h) {
    if (isIntegerLike(h)) {
      selectInt(indexInt(h));
    } else if (PySlice_Check(h.ptr())) {
      applySlice(h);
    } else if (h.is_none()) {
      p_.view = autograd::unsqueeze(p_.view, dim_);
      keepDim();
      --selfDim_; // a new dim, not one of self's
    } else if (py::isinstance<Tensor>(h)) {
      applyTensor(h.cast<const Tensor &>());
    } else if (PyBool_Check(h.ptr())) {
      applyTensor(Tensor::scalarTensor(Scalar(h.ptr() == Py_True), DType::Bool));
    } else if (PySequence_Check(h.ptr()) && !PyUnicode_Check(h.ptr())) {
      applyTensor(sequenceToIndex(h));
    } else if (PyIndex_Check(h.ptr()) && !PyFloat_Check(h.ptr())) {
      selectInt(PyNumber_AsSsize_t(h.ptr(), PyExc_IndexError)); // NumPy integers
    } else {
      fail(ErrorKind::Index,
           "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are "
           "valid indices (got {})",
           typeName(h));
    }
  }

  Parsed p_;
  int64_t dim_ = 0;     // the next dim of the view to index
  int64_t selfDim_ = 0; // the dim of self it came from (for error messages)
};

Tensor getItem(const Tensor &self, py::handle index) {
  if (isIntegerLike(index)) // x[i]: the hot path, straight to a view
    return self.dim() == 0 ? IndexParser(self).run(index).view
                           : autograd::select(self, 0, indexInt(index));
  Parsed p = IndexParser(self).run(index);
  if (!p.hasAdvanced)
    return p.view.isSameAs(self) ? autograd::view(self, self.sizes()) : p.view;
  return ops::index(p.view, p.advanced);
}

/// Drops the leading size-1 dims of a value, as torch does (x[0] = t[None] works): broadcasting
/// adds back whatever the target needs.
Tensor stripLeadingOnes(Tensor v) {
  while (v.dim() > 0 && v.size(0) == 1)
    v = autograd::select(v, 0, 0);
  return v;
}

/// x[mask] = scalar with a full-shape bool mask: a masked fill, no coordinates needed.
bool isFullMask(const Parsed &p) {
  if (p.advanced.size() != 1)
    return false;
  const Tensor &m = p.advanced[0];
  return m.dtype() == DType::Bool && m.sizes() == p.view.sizes();
}

/// The value of `x[index] = value` as a tensor of the target's dtype (a number is checked to fit).
Tensor assignedValue(const Tensor &target, py::handle value) {
  if (isNumber(value)) {
    Scalar s = toScalar(value, "__setitem__");
    // As torch: t[k] = -2.5 on uint8 is an overflow error, not a wrap (float16 takes inf).
    ops::checkFits(s, target.dtype(), "__setitem__", false);
    return Tensor::scalarTensor(s, target.dtype());
  }
  Tensor v;
  if (py::isinstance<Tensor>(value))
    v = value.cast<Tensor>();
  else if (PySequence_Check(value.ptr()) || py::hasattr(value, "__array__"))
    v = fromArrayLike(value);
  else
    fail(ErrorKind::Type, "__setitem__: can't assign a {} to a kiln.Tensor", typeName(value));
  return autograd::to(stripLeadingOnes(v), target.dtype());
}

/// The new value of the indexed part, out of place and differentiable.
Tensor assignedPart(const Parsed &p, const Tensor &v) {
  if (!p.hasAdvanced)
    return autograd::expand(v, p.view.sizes());
  if (v.dim() == 0 && isFullMask(p))
    return ops::maskedFill(p.view, p.advanced[0], v);
  return ops::indexPut(p.view, p.advanced, v);
}

void setItem(Tensor &self, py::handle index, py::handle value) {
  Parsed p = IndexParser(self).run(index);
  Tensor view = p.view;
  Tensor v = assignedValue(view, value);
  if (autograd::anyRequiresGrad({&self, &v})) {
    // Differentiable: the part's new value is computed out of place and written through the view,
    // which rewrites self's history (copy_slices.cc).
    Tensor part = assignedPart(p, v);
    if (view.isSameAs(self))
      autograd::applyInplace("x[index] = value", self, part);
    else
      autograd::writeThroughView("x[index] = value", self, view, part);
    return;
  }
  if (!p.hasAdvanced)
    view.copy_(v);
  else if (v.dim() == 0 && isFullMask(p))
    ops::maskedFill_(view, p.advanced[0], v);
  else
    ops::indexPut_(view, p.advanced, v);
}

} // namespace

void bindIndexing(py::module_ &m) {
  auto t = tensorClass(m);
  t.def("__getitem__", &getItem);
  t.def("__setitem__", &setItem);
  t.def("__contains__", [](const Tensor &self, py::handle elem) {
    KILN_CHECK(isNumber(elem) || py::isinstance<Tensor>(elem),
               "Tensor.__contains__ only supports Tensor or scalar, but you passed in a {}.",
               typeName(elem));
    return ops::contains(self, toOperand(elem, "__contains__"));
  });
}

} // namespace kiln::frontend

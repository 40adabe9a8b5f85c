#include "frontend/csrc/arg_parser.h"

#include "runtime/error.h"

#include <fmt/format.h>

#include <cstring>

namespace kiln::frontend {

using ir::SchemaArg;
using ir::SchemaType;

namespace {

PyTypeObject *cachedType(const char *name) {
  py::object t = py::module_::import("kiln._C").attr(name);
  return reinterpret_cast<PyTypeObject *>(t.release().ptr()); // lives as long as the module
}

PyTypeObject *tensorType() {
  static PyTypeObject *type = cachedType("Tensor");
  return type;
}

PyTypeObject *dtypeType() {
  static PyTypeObject *type = cachedType("dtype");
  return type;
}

bool isNumpyBool(PyObject *v) {
  const char *name = Py_TYPE(v)->tp_name;
  return std::strcmp(name, "numpy.bool_") == 0 || std::strcmp(name, "numpy.bool") == 0;
}

/// A Python or NumPy integer (kiln's dtypes and tensors define __index__ but are not ints).
bool isIntLike(PyObject *v) {
  return PyLong_Check(v) || (PyIndex_Check(v) && !isTensor(v) && !isDType(v));
}

bool isIntSequence(PyObject *v) {
  if (PyTuple_Check(v) || PyList_Check(v)) {
    Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
    PyObject **items = PySequence_Fast_ITEMS(v);
    for (Py_ssize_t i = 0; i < n; ++i)
      if (!PyIndex_Check(items[i]))
        return false;
    return true;
  }
  return isTensor(v); // a tensor of sizes, as torch accepts
}

bool fits(const SchemaArg &a, PyObject *v, bool numbersAsTensors) {
  if (v == Py_None) // torch also takes None for a list that defaults to empty (`roll`'s dims)
    return a.optional || a.type == SchemaType::Any || (a.defaultText && *a.defaultText == "[]");
  switch (a.type) {
  case SchemaType::Tensor:
    return isTensor(v) || (numbersAsTensors && isNumberLike(v));
  case SchemaType::TensorList:
    if (!PyTuple_Check(v) && !PyList_Check(v))
      return false;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(v); ++i)
      if (!isTensor(PySequence_Fast_ITEMS(v)[i]))
        return false;
    return true;
  case SchemaType::Scalar: // a tensor as a number: clamp's tensor bounds, a 0-d tensor
    return isNumberLike(v) || isTensor(v);
  case SchemaType::Int:
  case SchemaType::SymInt:
    return isIntLike(v) && !PyBool_Check(v);
  case SchemaType::IntList:
  case SchemaType::SymIntList:
    return (a.listSize > 0 && isIntLike(v) && !PyBool_Check(v)) || isIntSequence(v);
  case SchemaType::Float:
    return isNumberLike(v) && !PyBool_Check(v) && !isNumpyBool(v);
  case SchemaType::Bool:
    return PyBool_Check(v) || isNumpyBool(v);
  case SchemaType::Str:
    return PyUnicode_Check(v);
  case SchemaType::ScalarType:
    return isDType(v);
  case SchemaType::Any:
    return true;
  }
  return false;
}

std::string typeName(PyObject *v) {
  if (isTensor(v))
    return "Tensor";
  return Py_TYPE(v)->tp_name;
}

/// A schema default as a Python object (schemaValue), naming the argument when it is unreadable.
py::object defaultValue(const ir::OpSchema &schema, const SchemaArg &a) {
  try {
    return schemaValue(*a.defaultText);
  } catch (const std::invalid_argument &) {
    throw std::invalid_argument(
        fmt::format("op schema '{}': cannot read the default of '{}'", schema.text, a.name));
  }
}

/// The argument as torch prints it in an overload list: `Number alpha = 1`.
std::string printedArg(const SchemaArg &a) {
  std::string s = fmt::format("{} {}", ir::schemaTypeName(a.type), a.name);
  if (a.defaultText)
    s += fmt::format(" = {}", *a.defaultText == "[]" ? "()" : *a.defaultText);
  return s;
}

std::string printedSchema(const ir::OpSchema &schema) {
  std::string s = "(";
  bool star = false;
  for (size_t i = 0; i < schema.args.size(); ++i) {
    const SchemaArg &a = schema.args[i];
    if (i)
      s += ", ";
    if (a.kwOnly && !star) {
      s += "*, ";
      star = true;
    }
    s += printedArg(a);
  }
  return s + ")";
}

std::string_view keyword(PyObject *kwnames, Py_ssize_t i) {
  Py_ssize_t size = 0;
  const char *data = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(kwnames, i), &size);
  return {data, static_cast<size_t>(size)};
}

} // namespace

py::object schemaValue(std::string_view text) {
  std::string t(text);
  if (t == "None")
    return py::none();
  if (t == "True" || t == "False")
    return py::bool_(t == "True");
  if (t.size() >= 2 && (t.front() == '\'' || t.front() == '"') && t.back() == t.front())
    return py::str(t.substr(1, t.size() - 2));
  if (!t.empty() && t.front() == '[' && t.back() == ']') {
    py::list items;
    std::string_view body(t.data() + 1, t.size() - 2);
    while (!body.empty()) {
      size_t comma = body.find(',');
      items.append(schemaValue(body.substr(0, comma)));
      body = comma == std::string_view::npos ? std::string_view() : body.substr(comma + 1);
    }
    return std::move(items);
  }
  while (!t.empty() && t.front() == ' ')
    t.erase(0, 1);
  try {
    size_t used = 0;
    long long i = std::stoll(t, &used);
    if (used == t.size())
      return py::int_(i);
    double d = std::stod(t, &used);
    if (used == t.size())
      return py::float_(d);
  } catch (const std::exception &) {
  }
  throw std::invalid_argument(fmt::format("cannot read the schema value '{}'", text));
}

bool isTensor(PyObject *obj) { return PyObject_TypeCheck(obj, tensorType()); }

bool isDType(PyObject *obj) { return PyObject_TypeCheck(obj, dtypeType()); }

bool isNumberLike(PyObject *obj) {
  if (PyBool_Check(obj) || PyLong_Check(obj) || PyFloat_Check(obj))
    return true;
  // NumPy scalars (np.float32(2), np.int64(3)) act as Python numbers.
  return !isTensor(obj) && PyNumber_Check(obj) && !PySequence_Check(obj) &&
         PyObject_HasAttrString(obj, "dtype") && PyObject_HasAttrString(obj, "item");
}

SchemaBinding::SchemaBinding(ir::OpSchema s) : schema(std::move(s)) {
  KILN_CHECK(schema.args.size() <= static_cast<size_t>(kMaxSchemaArgs),
             "op schema '{}' has more than {} arguments", schema.text, kMaxSchemaArgs);
  int tensors = 0;
  for (const SchemaArg &a : schema.args) {
    defaults.push_back(a.defaultText ? defaultValue(schema, a) : py::object());
    tensors += a.type == SchemaType::Tensor;
  }
  numbersAsTensors = tensors >= 2;
  numPositional = schema.numPositional();
}

bool bindArgs(const SchemaBinding &binding, const char *name, PyObject *self, PyObject *const *args,
              Py_ssize_t nargs, PyObject *kwnames, BoundArgs &out, std::string *error,
              uint32_t numberArgs) {
  const ir::OpSchema &schema = binding.schema;
  out.opName_ = name;
  const int numArgs = static_cast<int>(schema.args.size());
  const int offset = self ? 1 : 0; // a method's receiver is argument 0, not counted in positions
  const int maxPositional = binding.numPositional - offset;
  // torch's varargs lists: `t.repeat(2, 3)`, `t.flip(0, 1)`, `broadcast_tensors(a, b)` when the
  // one positional argument the caller sees is an int or tensor list.
  if (maxPositional == 1 && nargs >= 1) {
    const SchemaArg &only = schema.args[offset];
    bool intList = only.type == SchemaType::IntList || only.type == SchemaType::SymIntList;
    bool tensorList = only.type == SchemaType::TensorList;
    if ((intList && (nargs > 1 || (isIntLike(args[0]) && !PyBool_Check(args[0])))) ||
        (tensorList && (nargs > 1 || isTensor(args[0])))) {
      py::tuple packed(nargs);
      for (Py_ssize_t i = 0; i < nargs; ++i)
        packed[i] = py::reinterpret_borrow<py::object>(args[i]);
      out.packed_ = std::move(packed);
      // The vectorcall layout: positional arguments, then the keyword values.
      std::vector<PyObject *> repacked{out.packed_.ptr()};
      for (Py_ssize_t k = 0; kwnames && k < PyTuple_GET_SIZE(kwnames); ++k)
        repacked.push_back(args[nargs + k]);
      return bindArgs(binding, name, self, repacked.data(), 1, kwnames, out, error, numberArgs);
    }
  }
  if (nargs > maxPositional) {
    if (error)
      *error =
          fmt::format("{}() takes {} positional argument{} but {} {} given", name, maxPositional,
                      maxPositional == 1 ? "" : "s", nargs, nargs == 1 ? "was" : "were");
    return false;
  }
  std::fill(out.values_, out.values_ + numArgs, nullptr);
  if (self)
    out.values_[0] = self;
  for (Py_ssize_t i = 0; i < nargs; ++i)
    out.values_[i + offset] = args[i];
  Py_ssize_t numKw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < numKw; ++k) {
    std::string_view kw = keyword(kwnames, k);
    int index = schema.find(kw);
    if (index < offset) {
      if (error)
        *error = index < 0 ? fmt::format("{}() got an unexpected keyword argument '{}'", name, kw)
                           : fmt::format("{}() got multiple values for argument '{}'", name, kw);
      return false;
    }
    if (out.values_[index]) {
      if (error)
        *error = fmt::format("{}() got multiple values for argument '{}'", name, kw);
      return false;
    }
    out.values_[index] = args[nargs + k];
  }
  std::string missing;
  int numMissing = 0;
  for (int i = 0; i < numArgs; ++i) {
    const SchemaArg &a = schema.args[i];
    PyObject *v = out.values_[i];
    if (!v) {
      if (binding.defaults[i]) {
        out.values_[i] = binding.defaults[i].ptr();
        continue;
      }
      missing += fmt::format("{}\"{}\"", numMissing++ ? ", " : "", a.name);
      continue;
    }
    if (i < offset || fits(a, v, binding.numbersAsTensors && (numberArgs >> i & 1)))
      continue;
    if ((a.type == SchemaType::IntList || a.type == SchemaType::SymIntList) &&
        (PyTuple_Check(v) || PyList_Check(v))) {
      for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(v); ++k)
        if (PyObject *item = PySequence_Fast_ITEMS(v)[k]; !PyIndex_Check(item)) {
          if (error)
            *error = fmt::format("{}(): argument '{}' failed to unpack the object at pos {} with "
                                 "error \"type must be tuple of ints,but got {}\"",
                                 name, a.name, k + 1, typeName(item));
          return false;
        }
    }
    bool positional = i - offset < nargs;
    if (error)
      *error = fmt::format("{}(): argument '{}'{} must be {}, not {}", name, a.name,
                           positional ? fmt::format(" (position {})", i - offset + 1) : "",
                           ir::schemaTypeName(a.type), typeName(v));
    return false;
  }
  if (numMissing) {
    if (error)
      *error = fmt::format("{}() missing {} required positional arguments: {}", name, numMissing,
                           missing);
    return false;
  }
  return true;
}

std::string overloadError(std::string_view name, const std::vector<const SchemaBinding *> &all,
                          PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames) {
  std::string got;
  auto add = [&](std::string item) { got += (got.empty() ? "" : ", ") + item; };
  if (self)
    add(typeName(self));
  for (Py_ssize_t i = 0; i < nargs; ++i)
    add(typeName(args[i]));
  for (Py_ssize_t k = 0; kwnames && k < PyTuple_GET_SIZE(kwnames); ++k)
    add(fmt::format("{}={}", keyword(kwnames, k), typeName(args[nargs + k])));
  std::string expected;
  for (const SchemaBinding *b : all)
    expected += fmt::format("\n * {}", printedSchema(b->schema));
  return fmt::format("{}() received an invalid combination of arguments - got ({}), but "
                     "expected one of:{}",
                     name, got, expected);
}

Tensor BoundArgs::tensor(int i) const {
  if (i == 0 && first_)
    return *first_;
  PyObject *v = values_[i];
  if (isTensor(v))
    return py::handle(v).cast<const Tensor &>();
  return Tensor::wrapScalar(toScalar(v, opName_));
}

std::optional<Tensor> BoundArgs::optTensor(int i) const {
  if (isNone(i))
    return std::nullopt;
  return tensor(i);
}

Scalar BoundArgs::scalar(int i) const { return toScalar(values_[i], opName_); }

std::optional<Scalar> BoundArgs::optScalar(int i) const {
  if (isNone(i))
    return std::nullopt;
  return scalar(i);
}

int64_t BoundArgs::toInt(int i) const {
  Py_ssize_t v = PyNumber_AsSsize_t(values_[i], PyExc_OverflowError);
  if (v == -1 && PyErr_Occurred())
    throw py::error_already_set();
  return v;
}

std::optional<int64_t> BoundArgs::optInt(int i) const {
  if (isNone(i))
    return std::nullopt;
  return toInt(i);
}

double BoundArgs::toDouble(int i) const {
  double v = PyFloat_AsDouble(values_[i]);
  if (v == -1.0 && PyErr_Occurred())
    throw py::error_already_set();
  return v;
}

std::optional<double> BoundArgs::optDouble(int i) const {
  if (isNone(i))
    return std::nullopt;
  return toDouble(i);
}

bool BoundArgs::toBool(int i) const { return PyObject_IsTrue(values_[i]) == 1; }

std::string BoundArgs::str(int i) const { return py::handle(values_[i]).cast<std::string>(); }

std::optional<std::string> BoundArgs::optStr(int i) const {
  if (isNone(i))
    return std::nullopt;
  return str(i);
}

std::optional<Shape> BoundArgs::optIntList(int i) const { return toDims(values_[i], opName_); }

Shape BoundArgs::intList(int i) const { return toIntList(values_[i], opName_); }

std::optional<DType> BoundArgs::optDType(int i) const {
  if (isNone(i))
    return std::nullopt;
  return py::handle(values_[i]).cast<DType>();
}

} // namespace kiln::frontend

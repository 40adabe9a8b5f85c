#pragma once
/// Binds a Python call's arguments to an op's torch schema (ir/op_schema.h), in torch's words
/// when they do not fit: `add(): argument 'other' (position 2) must be Tensor, not str`,
/// `sin() missing 1 required positional arguments: "input"`, an overload list when several
/// schemas share a name. The eager bindings generated from the op table (bind_op_table.cc) call
/// it on every call, so it works on borrowed vectorcall arguments and allocates nothing.

#include "frontend/csrc/py_convert.h"
#include "ir/op_schema.h"

#include <optional>
#include <string>

namespace kiln::frontend {

/// A schema with its defaults as Python objects (made once, when the op is bound).
struct SchemaBinding {
  explicit SchemaBinding(ir::OpSchema schema);

  ir::OpSchema schema;
  std::vector<py::object> defaults; ///< null handle for a required argument
  /// A number may stand for a Tensor argument when the op has two or more (torch's `add(x, 2)`).
  bool numbersAsTensors = false;
  int numPositional = 0; ///< schema.numPositional(), kept for every call
};

inline constexpr int kMaxSchemaArgs = 12;

/// One call's arguments, each the caller's object or the schema default (borrowed: valid for the
/// duration of the call). Accessors convert; the types were checked when binding.
class BoundArgs {
public:
  PyObject *get(int i) const { return values_[i]; }
  bool isNone(int i) const { return values_[i] == Py_None; }
  /// The argument as a Tensor (a number as a weak scalar); the first one may be overridden by an
  /// in-place call's operand.
  Tensor tensor(int i) const;
  std::optional<Tensor> optTensor(int i) const;
  Scalar scalar(int i) const;
  std::optional<Scalar> optScalar(int i) const;
  int64_t toInt(int i) const;
  std::optional<int64_t> optInt(int i) const;
  double toDouble(int i) const;
  std::optional<double> optDouble(int i) const;
  bool toBool(int i) const;
  std::string str(int i) const;
  std::optional<std::string> optStr(int i) const;
  std::optional<Shape> optIntList(int i) const;
  Shape intList(int i) const;
  std::optional<DType> optDType(int i) const;

  /// The operand an in-place call computes from, in place of argument 0.
  void overrideFirst(Tensor t) { first_ = std::move(t); }
  const char *opName() const { return opName_; }

private:
  friend bool bindArgs(const SchemaBinding &, const char *, PyObject *, PyObject *const *,
                       Py_ssize_t, PyObject *, BoundArgs &, std::string *, uint32_t);
  PyObject *values_[kMaxSchemaArgs] = {};
  std::optional<Tensor> first_;
  py::object packed_; ///< the varargs of an int list, packed into a tuple
  const char *opName_ = "";
};

/// Binds `self` (a method's receiver, or null) and the vectorcall arguments to the schema.
/// Returns false when they do not fit, with torch's message, naming the op as `name`, in `*error`
/// (when not null: an overload tried first needs none). `out` is never among the keywords here
/// (the caller takes it off first). `numberArgs` has bit i set when a number may stand for Tensor
/// argument i (as a weak scalar); by default, every Tensor argument of an op with two or more
/// (`add(x, 2)`).
bool bindArgs(const SchemaBinding &binding, const char *name, PyObject *self, PyObject *const *args,
              Py_ssize_t nargs, PyObject *kwnames, BoundArgs &out, std::string *error,
              uint32_t numberArgs = ~0u);

/// torch's message for a call that fits none of several overloads: `clamp() received an invalid
/// combination of arguments - got (Tensor, str), but expected one of: ...`.
std::string overloadError(std::string_view name, const std::vector<const SchemaBinding *> &all,
                          PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames);

/// A schema default or fixed attribute value as a Python object: None, True/False, numbers,
/// quoted strings, int lists. Throws std::invalid_argument for anything else.
py::object schemaValue(std::string_view text);

/// Whether `obj` is a kiln.Tensor (a cached type check).
bool isTensor(PyObject *obj);
/// Whether `obj` is a kiln.dtype.
bool isDType(PyObject *obj);
/// Whether `obj` is a Python number or a NumPy scalar.
bool isNumberLike(PyObject *obj);

} // namespace kiln::frontend

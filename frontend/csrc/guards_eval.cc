// Evaluating guard trees: accessors, leaf checks and symbol relations on borrowed PyObject*s,
// without pybind11 in the hot path. See [Note: guard trees] in guards.h.
#include "frontend/csrc/guards.h"
#include "frontend/csrc/tensor_object.h"
#include "runtime/tensor.h"

#include <cmath>

namespace kiln::frontend {

/// Per-evaluation state: the frame and the sizes bound to symbol slots so far. Lives on the
/// stack of one evaluation, so re-entrant evaluations of the same manager do not interfere.
struct GuardEval {
  PyObject *const *args;
  Py_ssize_t nargs;
  PyObject *func;
  int64_t *symValues;
  bool *symBound;
};

namespace {

/// Type identity and equality, element-wise for tuples. Floats compare by value with -0.0 and
/// 0.0 distinct and NaN equal to NaN: a constant that was baked into a graph must be the same.
/// Returns 1 (equal), 0, or -1 with an exception set.
int equalsExact(PyObject *a, PyObject *b) {
  if (Py_TYPE(a) != Py_TYPE(b))
    return 0;
  if (a == b)
    return 1;
  if (PyFloat_CheckExact(a)) {
    double x = PyFloat_AS_DOUBLE(a), y = PyFloat_AS_DOUBLE(b);
    if (std::isnan(x) || std::isnan(y))
      return std::isnan(x) && std::isnan(y);
    return x == y && std::signbit(x) == std::signbit(y);
  }
  if (PyBool_Check(a) || a == Py_None)
    return 0; // singletons: different objects are different values
  if (PyTuple_CheckExact(a)) {
    Py_ssize_t n = PyTuple_GET_SIZE(a);
    if (PyTuple_GET_SIZE(b) != n)
      return 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
      int eq = equalsExact(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i));
      if (eq != 1)
        return eq;
    }
    return 1;
  }
  return PyObject_RichCompareBool(a, b, Py_EQ);
}

/// len(obj) or -1 (no exception left) when it has none.
Py_ssize_t lengthOf(PyObject *obj) {
  if (PyTuple_CheckExact(obj))
    return PyTuple_GET_SIZE(obj);
  if (PyList_CheckExact(obj))
    return PyList_GET_SIZE(obj);
  if (PyDict_CheckExact(obj))
    return PyDict_GET_SIZE(obj);
  Py_ssize_t n = PyObject_Size(obj);
  if (n < 0)
    PyErr_Clear();
  return n;
}

bool dictKeysMatch(PyObject *obj, const std::vector<py::object> &keys) {
  if (!PyDict_Check(obj) || PyDict_GET_SIZE(obj) != static_cast<Py_ssize_t>(keys.size()))
    return false;
  Py_ssize_t pos = 0;
  PyObject *key = nullptr, *value = nullptr;
  for (const py::object &expected : keys) {
    if (!PyDict_Next(obj, &pos, &key, &value))
      return false;
    if (key == expected.ptr())
      continue;
    Py_INCREF(key); // a user __eq__ may mutate the dict
    int eq = PyObject_RichCompareBool(key, expected.ptr(), Py_EQ);
    Py_DECREF(key);
    if (eq != 1) {
      if (eq < 0)
        PyErr_Clear();
      return false;
    }
  }
  return true;
}

/// Whether sizes and strides (a tensor's in elements, an array's in bytes) are the expected
/// ones; kUnchecked entries match anything.
template <typename Sizes, typename Strides>
bool geometryMatches(const LeafCheck &c, const Sizes &sizes, const Strides &strides) {
  for (size_t d = 0; d < c.sizes.size(); ++d) {
    if (c.sizes[d] != LeafCheck::kUnchecked && c.sizes[d] != sizes[d])
      return false;
    if (c.strides[d] != LeafCheck::kUnchecked && c.strides[d] != strides[d])
      return false;
  }
  return true;
}

/// Size `d` (negative: from the end) of `rank` sizes, or nullopt when out of range.
template <typename Sizes>
std::optional<int64_t> sizeAt(const Sizes &sizes, int64_t rank, int64_t d) {
  d = d < 0 ? d + rank : d;
  if (d < 0 || d >= rank)
    return std::nullopt;
  return static_cast<int64_t>(sizes[d]);
}

bool tensorMatches(const LeafCheck &c, PyObject *obj) {
  const Tensor *t = asTensor(obj);
  if (t == nullptr || !t->defined())
    return false;
  const TensorImpl &impl = t->impl();
  if (impl.dtype != c.dtype || impl.sizes.size() != c.sizes.size() ||
      impl.requiresGrad != c.requiresGrad || tensorDeviceCode(t->device()) != c.n)
    return false;
  return geometryMatches(c, impl.sizes, impl.strides);
}

/// A strided buffer export of `obj` (a NumPy array), released when it goes out of scope.
struct BufferView {
  Py_buffer view{};
  bool ok = false;
  explicit BufferView(PyObject *obj) {
    ok = PyObject_CheckBuffer(obj) && PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) == 0;
    if (!ok)
      PyErr_Clear();
  }
  ~BufferView() {
    if (ok)
      PyBuffer_Release(&view);
  }
  BufferView(const BufferView &) = delete;
  BufferView &operator=(const BufferView &) = delete;
};

bool arrayMatches(const LeafCheck &c, PyObject *obj) {
  BufferView b(obj);
  if (!b.ok)
    return false;
  const Py_buffer &v = b.view;
  if (static_cast<size_t>(v.ndim) != c.sizes.size() || v.itemsize != c.n || v.format == nullptr ||
      c.format != v.format)
    return false;
  return geometryMatches(c, v.shape, v.strides);
}

/// Size `d` (negative: from the end) of a tensor or a buffer-exporting array.
std::optional<int64_t> sizeOf(PyObject *obj, int64_t d) {
  if (const Tensor *t = asTensor(obj); t != nullptr && t->defined())
    return sizeAt(t->sizes(), t->dim(), d);
  BufferView b(obj);
  return b.ok ? sizeAt(b.view.shape, b.view.ndim, d) : std::nullopt;
}

bool bindSize(const LeafCheck &c, PyObject *obj, GuardEval &eval) {
  std::optional<int64_t> size;
  if (c.n == LeafCheck::kBindValue) {
    if (!PyLong_CheckExact(obj))
      return false;
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow != 0 || (value == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return false;
    }
    size = value;
  } else {
    size = sizeOf(obj, c.n);
  }
  if (!size)
    return false;
  int64_t v = *size;
  if (eval.symBound[c.sym])
    return eval.symValues[c.sym] == v;
  eval.symBound[c.sym] = true;
  eval.symValues[c.sym] = v;
  return true;
}

bool leafPasses(const LeafCheck &c, PyObject *obj, GuardEval &eval) {
  switch (c.kind) {
  case LeafCheck::Kind::Type:
    return Py_TYPE(obj) == reinterpret_cast<PyTypeObject *>(c.object.ptr());
  case LeafCheck::Kind::Id:
    return obj == c.object.ptr();
  case LeafCheck::Kind::None:
    return obj == Py_None;
  case LeafCheck::Kind::NotNone:
    return obj != Py_None;
  case LeafCheck::Kind::Equals: {
    int eq = equalsExact(obj, c.object.ptr());
    if (eq < 0)
      PyErr_Clear();
    return eq == 1;
  }
  case LeafCheck::Kind::Compare: { // a number compared with a constant (`random() < 0.5`)
    int r = PyObject_RichCompareBool(obj, c.object.ptr(), static_cast<int>(c.n));
    if (r < 0)
      PyErr_Clear();
    return r >= 0 && (r == 1) == c.expected;
  }
  case LeafCheck::Kind::Len:
    return lengthOf(obj) == c.n;
  case LeafCheck::Kind::DictKeys:
    return dictKeysMatch(obj, c.keys);
  case LeafCheck::Kind::Tensor:
    return tensorMatches(c, obj);
  case LeafCheck::Kind::Array:
    return arrayMatches(c, obj);
  case LeafCheck::Kind::BindSize:
    return bindSize(c, obj, eval);
  }
  return false;
}

/// The builtins namespace of a function: func_builtins, else globals['__builtins__'] (a dict or a
/// module). Borrowed; null when there is none.
PyObject *builtinsOf(PyObject *func, PyObject *globals) {
  if (PyFunction_Check(func))
    return reinterpret_cast<PyFunctionObject *>(func)->func_builtins;
  PyObject *b = PyDict_GetItemString(globals, "__builtins__");
  if (b != nullptr && PyModule_Check(b))
    b = PyModule_GetDict(b);
  return b != nullptr && PyDict_Check(b) ? b : nullptr;
}

/// A new reference to func.__globals__[name] (falling back to the builtins), or null.
PyObject *getGlobal(PyObject *name, PyObject *func) {
  PyObject *globals = nullptr;
  py::object owned;
  if (PyFunction_Check(func)) {
    globals = PyFunction_GET_GLOBALS(func);
  } else {
    globals = PyObject_GetAttrString(func, "__globals__");
    if (globals == nullptr) {
      PyErr_Clear();
      return nullptr;
    }
    owned = py::reinterpret_steal<py::object>(globals);
    if (!PyDict_Check(globals))
      return nullptr;
  }
  PyObject *v = PyDict_GetItemWithError(globals, name);
  if (v == nullptr && !PyErr_Occurred()) {
    if (PyObject *builtins = builtinsOf(func, globals))
      v = PyDict_GetItemWithError(builtins, name);
  }
  if (v == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  Py_INCREF(v);
  return v;
}

/// A new reference to func.__closure__[i].cell_contents, or null (no closure, empty cell).
PyObject *getClosure(int64_t i, PyObject *func) {
  if (!PyFunction_Check(func))
    return nullptr;
  PyObject *closure = PyFunction_GET_CLOSURE(func);
  if (closure == nullptr || !PyTuple_Check(closure) || i >= PyTuple_GET_SIZE(closure))
    return nullptr;
  PyObject *cell = PyTuple_GET_ITEM(closure, i);
  PyObject *v = PyCell_Check(cell) ? PyCell_GET(cell) : nullptr;
  Py_XINCREF(v);
  return v;
}

/// A new reference to obj[key] (the Item accessor), or null with no exception left.
PyObject *getItem(const GuardNode &node, PyObject *obj) {
  PyObject *key = node.key();
  bool tuple = PyTuple_CheckExact(obj);
  if (node.index() != GuardNode::kNoIndex && (tuple || PyList_CheckExact(obj))) {
    Py_ssize_t n = tuple ? PyTuple_GET_SIZE(obj) : PyList_GET_SIZE(obj);
    int64_t i = node.index() < 0 ? node.index() + n : node.index();
    if (i < 0 || i >= n)
      return nullptr;
    PyObject *v = tuple ? PyTuple_GET_ITEM(obj, i) : PyList_GET_ITEM(obj, i);
    Py_INCREF(v);
    return v;
  }
  PyObject *v = nullptr;
  if (PyDict_Check(obj)) {
    v = PyDict_GetItemWithError(obj, key);
    Py_XINCREF(v);
  } else {
    v = PyObject_GetItem(obj, key);
  }
  if (v == nullptr)
    PyErr_Clear();
  return v;
}

/// A new reference to the value `node` reaches from `parent`, or null with no exception left.
PyObject *access(const GuardNode &node, PyObject *parent, const GuardEval &eval) {
  switch (node.access()) {
  case GuardNode::Access::Root:
    return nullptr;
  case GuardNode::Access::Arg:
    if (node.index() >= eval.nargs)
      return nullptr;
    Py_INCREF(eval.args[node.index()]);
    return eval.args[node.index()];
  case GuardNode::Access::Global:
    return getGlobal(node.key(), eval.func);
  case GuardNode::Access::Closure:
    return getClosure(node.index(), eval.func);
  case GuardNode::Access::Held:
    Py_INCREF(node.key());
    return node.key();
  case GuardNode::Access::Attr: {
    PyObject *v = PyObject_GetAttr(parent, node.key());
    if (v == nullptr)
      PyErr_Clear();
    return v;
  }
  case GuardNode::Access::Item:
    return getItem(node, parent);
  }
  return nullptr;
}

bool symPasses(const SymCheck &s, const GuardEval &eval) {
  if (!eval.symBound[s.a])
    return false;
  int64_t a = eval.symValues[s.a];
  switch (s.op) {
  case SymCheck::Op::Eq:
    return eval.symBound[s.b] && a == eval.symValues[s.b];
  case SymCheck::Op::EqConst:
    return a == s.b;
  case SymCheck::Op::GeConst:
    return a >= s.b;
  case SymCheck::Op::LeConst:
    return a <= s.b;
  case SymCheck::Op::NeConst:
    return a != s.b;
  }
  return false;
}

} // namespace

const std::string *GuardManager::evalNode(const GuardNode &node, PyObject *value,
                                          GuardEval &eval) const {
  for (const LeafCheck &c : node.checks())
    if (!leafPasses(c, value, eval))
      return &c.text;
  for (const auto &child : node.children()) {
    PyObject *v = access(*child, value, eval);
    if (v == nullptr)
      return &child->unreachableText();
    const std::string *failed = evalNode(*child, v, eval);
    Py_DECREF(v);
    if (failed != nullptr)
      return failed;
  }
  return nullptr;
}

const std::string *GuardManager::evalSyms(GuardEval &eval) const {
  for (const SymCheck &s : syms_)
    if (!symPasses(s, eval))
      return &s.text;
  for (const RelationCheck &r : relations_) {
    ir::SymbolValues values;
    for (const auto &[name, slot] : r.slots) {
      if (!eval.symBound[slot])
        return &r.text;
      values.emplace(name, eval.symValues[slot]);
    }
    try {
      if (!r.relation.evaluate(values))
        return &r.text;
    } catch (const std::exception &) { // a division by zero: the relation cannot hold
      return &r.text;
    }
  }
  return nullptr;
}

const std::string *GuardManager::evaluate(PyObject *const *args, Py_ssize_t nargs,
                                          PyObject *func) const {
  // Symbol slots live on this stack frame; few graphs have more than a handful of symbols.
  constexpr int64_t kInline = 16;
  int64_t inlineValues[kInline];
  bool inlineBound[kInline] = {};
  std::vector<int64_t> heapValues;
  std::unique_ptr<bool[]> heapBound;
  GuardEval eval{args, nargs, func, inlineValues, inlineBound};
  if (numSyms_ > kInline) {
    heapValues.resize(numSyms_);
    heapBound = std::make_unique<bool[]>(numSyms_); // value-initialized: false
    eval.symValues = heapValues.data();
    eval.symBound = heapBound.get();
  }

  struct Active {
    int &n;
    explicit Active(int &n) : n(n) { ++n; }
    ~Active() { --n; }
  } active(evaluating_);

  for (const FlagCheck &f : flags_) {
    PyObject *v = PyObject_GetAttr(f.object.ptr(), f.name.ptr());
    int eq = v == nullptr ? -1 : PyObject_RichCompareBool(v, f.expected.ptr(), Py_EQ);
    Py_XDECREF(v);
    if (eq != 1) {
      if (eq < 0)
        PyErr_Clear();
      return &f.text;
    }
  }
  if (const std::string *failed = evalNode(*root_, nullptr, eval))
    return failed;
  return evalSyms(eval);
}

bool GuardManager::check(PyObject *const *args, Py_ssize_t nargs, PyObject *func) const {
  return evaluate(args, nargs, func) == nullptr;
}

std::optional<std::string> GuardManager::firstFailure(PyObject *const *args, Py_ssize_t nargs,
                                                      PyObject *func) const {
  if (const std::string *failed = evaluate(args, nargs, func))
    return *failed;
  return std::nullopt;
}

} // namespace kiln::frontend

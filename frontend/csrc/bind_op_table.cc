// The eager bindings generated from the op table: every spelling of every KILN_SPELLING row of
// ir/ops.def whose eager kernel is in eager_kernels.cc becomes a Python callable, with no
// hand-written binding:
//   `name`           kiln._C.name (kiln.name), taking `out=` when the op is elementwise;
//   `name_`          kiln._C.name_, in place on its first argument;
//   `Tensor.name`    a method, its receiver the schema's first argument; `Tensor.name_` in place;
//   `Tensor.__op__`  an operator (NotImplemented for an operand that is neither a tensor nor a
//                    number); `__rop__` swaps the operands, `__iop__` is in place;
//   `F.name`         kiln._C._nn.name (kiln.nn.functional.name); an `inplace=True` argument
//                    makes the call in place;
//   `operator.*`, `builtins.*`  nothing to bind (Python calls the Tensor's operators).
// Arguments are bound to the row's schema by arg_parser.h, so a wrong call is refused in torch's
// words. Spellings shared by several rows (an overloaded name) try each schema in table order.
//
// Callables are CPython vectorcall functions: a module function is a builtin function whose
// `self` is a capsule holding its binding, a method is a method descriptor (so `t.add(u)` needs
// no bound-method object) whose C function is one of kMaxMethods trampolines, each knowing its
// binding by a template index.
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/eager_kernels.h"
#include "runtime/error.h"

#include <pybind11/detail/internals.h>

#include <algorithm>
#include <array>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace kiln::frontend {

namespace {

struct Overload {
  const SchemaBinding *binding;
  const EagerKernel *kernel;
  int inplaceArg; ///< the index of a `bool inplace` argument, or -1
  /// The Tensor arguments a number may stand for after no overload bound strictly: those where
  /// no other overload of the name takes a number (`max(x, 1.5)` is no maximum: max's dim is
  /// there; `where(c, x, 0.0)` is).
  uint32_t numberArgs = ~0u;
};

enum class Site { Module, Functional, Method };

struct OpBinding {
  std::string name; ///< as the user spells it (`add_`, `__radd__`, `relu`)
  Site site;
  std::vector<Overload> overloads;
  bool inplace = false;   ///< writes into argument 0 (`add_`, `__iadd__`)
  bool reflected = false; ///< `__radd__`: the receiver is the second operand
  bool dunder = false;
  bool acceptsOut = false;
  std::string doc;
  PyMethodDef def{};
};

/// Every binding and schema, alive for the life of the process: the callables point into them,
/// and they are never destroyed (their Python defaults would outlive the interpreter).
std::deque<OpBinding> &allBindings() {
  static auto *b = new std::deque<OpBinding>();
  return *b;
}

std::deque<SchemaBinding> &allSchemas() {
  static auto *s = new std::deque<SchemaBinding>();
  return *s;
}

/// Sets the Python error for the exception being handled, through pybind11's translators (kiln's
/// error kinds, pybind11's own exceptions), as a pybind11-bound function would.
void translateActiveException() {
  std::exception_ptr last = std::current_exception();
  for (auto &translate : py::detail::get_internals().registered_exception_translators) {
    try {
      translate(last);
      return;
    } catch (...) {
      last = std::current_exception();
    }
  }
  PyErr_SetString(PyExc_SystemError, "an exception escaped every exception translator");
}

PyObject *typeError(const std::string &message) {
  PyErr_SetString(PyExc_TypeError, message.c_str());
  return nullptr;
}

Tensor &tensorRef(PyObject *obj) { return py::handle(obj).cast<Tensor &>(); }

/// The keyword `out` taken off a call's keywords (into `rest`, which then holds the others).
PyObject *takeOut(PyObject *const *args, Py_ssize_t nargs, PyObject *&kwnames,
                  std::vector<PyObject *> &rest, py::object &restNames) {
  if (!kwnames)
    return nullptr;
  Py_ssize_t n = PyTuple_GET_SIZE(kwnames);
  Py_ssize_t at = -1;
  for (Py_ssize_t k = 0; k < n; ++k)
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k), "out") == 0)
      at = k;
  if (at < 0)
    return nullptr;
  PyObject *out = args[nargs + at];
  rest.assign(args, args + nargs);
  py::tuple names(n - 1);
  for (Py_ssize_t k = 0, j = 0; k < n; ++k) {
    if (k == at)
      continue;
    rest.push_back(args[nargs + k]);
    names[j++] = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(kwnames, k));
  }
  restNames = std::move(names);
  kwnames = n > 1 ? restNames.ptr() : nullptr;
  return out;
}

/// Computes the op on `target`'s value and writes the result into it (torch's in-place rules).
PyObject *runInplace(const OpBinding &b, const Overload &o, BoundArgs &bound, PyObject *target) {
  if (!isTensor(target))
    return typeError(fmt::format("{}(): argument '{}' (position 1) must be Tensor, not {}", b.name,
                                 o.binding->schema.args[0].name, Py_TYPE(target)->tp_name));
  Tensor &self = tensorRef(target);
  // The other tensor operands, for the autograd check of what the op saves (at most three).
  std::array<Tensor, 3> others;
  int numOthers = 0;
  const auto &args = o.binding->schema.args;
  for (size_t i = 1; i < args.size() && numOthers < 3; ++i)
    if (args[i].type == ir::SchemaType::Tensor && !bound.isNone(static_cast<int>(i)))
      others[numOthers++] = bound.tensor(static_cast<int>(i));
  const Tensor *o0 = numOthers > 0 ? &others[0] : &self;
  const Tensor *o1 = numOthers > 1 ? &others[1] : &self;
  const Tensor *o2 = numOthers > 2 ? &others[2] : &self;
  if (o.kernel->inplace && !autograd::anyRequiresGrad({&self, o0, o1, o2})) {
    o.kernel->inplace(self, bound);
    return Py_NewRef(target);
  }
  bound.overrideFirst(autograd::inplaceOperand(self, {o0, o1, o2}));
  Tensor result = o.kernel->fn(bound);
  autograd::applyInplace(b.name.c_str(), self, result);
  return Py_NewRef(target);
}

PyObject *callOp(const OpBinding &b, PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames) {
  try {
    PyObject *swapped[2];
    if (b.dunder && nargs == 1) {
      if (kwnames || (!isTensor(args[0]) && !isNumberLike(args[0])))
        return Py_NewRef(Py_NotImplemented);
      if (b.reflected) { // other OP self: bind (other, self) as a function call
        swapped[0] = args[0];
        swapped[1] = self;
        self = nullptr;
        args = swapped;
        nargs = 2;
      }
    }
    std::vector<PyObject *> rest;
    py::object restNames;
    PyObject *out = b.acceptsOut ? takeOut(args, nargs, kwnames, rest, restNames) : nullptr;
    if (out)
      args = rest.data();
    BoundArgs bound;
    std::string error;
    const Overload *chosen = nullptr;
    // An overloaded name binds strictly first (no number for a Tensor argument), then not.
    const bool overloaded = b.overloads.size() > 1;
    for (int pass = overloaded ? 0 : 1; pass < 2 && !chosen; ++pass)
      for (const Overload &o : b.overloads) {
        // The message of a single overload's refusal; an overload list says the rest.
        std::string *sink = pass == 1 && !overloaded ? &error : nullptr;
        if (bindArgs(*o.binding, b.name.c_str(), self, args, nargs, kwnames, bound, sink,
                     pass == 0 ? 0u : o.numberArgs)) {
          chosen = &o;
          break;
        }
      }
    if (!chosen) {
      // An operator Python may still try reflected (torch: `x @ 2` is "unsupported operand").
      if (b.dunder)
        return Py_NewRef(Py_NotImplemented);
      if (b.overloads.size() == 1)
        return typeError(error);
      std::vector<const SchemaBinding *> all;
      for (const Overload &o : b.overloads)
        all.push_back(o.binding);
      return typeError(overloadError(b.name, all, self, args, nargs, kwnames));
    }
    bool inplace = b.inplace || (chosen->inplaceArg >= 0 && bound.toBool(chosen->inplaceArg));
    if (inplace) {
      if (out)
        return typeError(fmt::format("{}(): an in-place op takes no out= argument", b.name));
      return runInplace(b, *chosen, bound, bound.get(0));
    }
    if (chosen->kernel->object) {
      if (out)
        return typeError(fmt::format("{}(): this form takes no out= argument", b.name));
      return chosen->kernel->object(bound).release().ptr();
    }
    Tensor result = chosen->kernel->fn(bound);
    if (out && out != Py_None) {
      if (!isTensor(out))
        return typeError(fmt::format("{}(): argument 'out' must be Tensor, not {}", b.name,
                                     Py_TYPE(out)->tp_name));
      ops::writeOut(b.name.c_str(), tensorRef(out), result);
      return Py_NewRef(out);
    }
    return wrap(std::move(result)).release().ptr();
  } catch (...) {
    translateActiveException();
    return nullptr;
  }
}

PyObject *callFunction(PyObject *capsule, PyObject *const *args, Py_ssize_t nargs,
                       PyObject *kwnames) {
  auto *b = static_cast<const OpBinding *>(PyCapsule_GetPointer(capsule, nullptr));
  return callOp(*b, nullptr, args, nargs, kwnames);
}

using FastMethod = PyObject *(*)(PyObject *, PyObject *const *, Py_ssize_t, PyObject *);

constexpr size_t kMaxMethods = 512;
std::array<const OpBinding *, kMaxMethods> gMethods{};

template <size_t I>
PyObject *callMethod(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  return callOp(*gMethods[I], self, args, nargs, kwnames);
}

template <size_t... I>
constexpr std::array<FastMethod, sizeof...(I)> methodTrampolines(std::index_sequence<I...>) {
  return {&callMethod<I>...};
}
constexpr auto kTrampolines = methodTrampolines(std::make_index_sequence<kMaxMethods>{});

/// A Python default for a text signature, or empty when it has no simple literal form.
std::string pythonDefault(const std::string &text) {
  if (text == "[]" || text.front() == '[')
    return {};
  return text;
}

/// `name(input, other, *, alpha=1)\n--\n\n<schema>`: the signature inspect.signature reads.
std::string docOf(const OpBinding &b) {
  const ir::OpSchema &schema = b.overloads.front().binding->schema;
  std::string doc;
  for (const Overload &o : b.overloads)
    doc += (doc.empty() ? "" : "\n") + o.binding->schema.text;
  if (b.overloads.size() > 1 || b.dunder)
    return doc;
  std::string sig = b.name + "(";
  bool star = false, first = true;
  for (size_t i = 0; i < schema.args.size(); ++i) {
    const ir::SchemaArg &a = schema.args[i];
    std::string item = (b.site == Site::Method && i == 0) ? "$self" : a.name;
    if (a.defaultText) {
      std::string d = pythonDefault(*a.defaultText);
      if (d.empty())
        return doc;
      item += "=" + d;
    }
    if (a.kwOnly && !star) {
      sig += first ? "*" : ", *";
      star = true;
      first = false;
    }
    sig += (first ? "" : ", ") + item;
    first = false;
  }
  if (b.acceptsOut)
    sig += star ? ", out=None" : ", *, out=None";
  return sig + ")\n--\n\n" + doc;
}

struct Target {
  Site site;
  std::string name;
};

/// Where a spelling is bound, or nullopt for `operator.*` / `builtins.*`.
std::optional<Target> targetOf(std::string_view spelling) {
  size_t dot = spelling.find('.');
  if (dot == std::string_view::npos)
    return Target{Site::Module, std::string(spelling)};
  std::string_view head = spelling.substr(0, dot), name = spelling.substr(dot + 1);
  if (head == "Tensor")
    return Target{Site::Method, std::string(name)};
  if (head == "F")
    return Target{Site::Functional, std::string(name)};
  return std::nullopt;
}

bool isDunder(std::string_view n) {
  return n.size() > 4 && n.substr(0, 2) == "__" && n.substr(n.size() - 2) == "__";
}

/// Sets each overload's numberArgs: a Tensor argument takes a number unless another overload
/// has a numeric argument (int, float, bool, Scalar, int list) at its position.
void reserveNumberPositions(OpBinding &b) {
  auto numeric = [](ir::SchemaType t) {
    using T = ir::SchemaType;
    return t == T::Int || t == T::SymInt || t == T::Float || t == T::Bool || t == T::Scalar ||
           t == T::IntList || t == T::SymIntList;
  };
  for (Overload &o : b.overloads) {
    const auto &args = o.binding->schema.args;
    for (size_t i = 0; i < args.size() && i < 32; ++i)
      for (const Overload &other : b.overloads) {
        const auto &theirs = other.binding->schema.args;
        if (&other != &o && i < theirs.size() && !theirs[i].kwOnly && !args[i].kwOnly &&
            numeric(theirs[i].type))
          o.numberArgs &= ~(1u << i);
      }
  }
}

void install(OpBinding &b, py::module_ &module, py::module_ &functional, PyObject *tensorType) {
  b.doc = docOf(b);
  b.def.ml_name = b.name.c_str();
  b.def.ml_flags = METH_FASTCALL | METH_KEYWORDS;
  b.def.ml_doc = b.doc.c_str();
  if (b.site == Site::Method) {
    PyObject *dict = reinterpret_cast<PyTypeObject *>(tensorType)->tp_dict;
    KILN_CHECK(!PyDict_GetItemString(dict, b.name.c_str()),
               "Tensor.{} is bound both by hand and from the op table", b.name);
    static size_t next = 0;
    KILN_CHECK(next < kMaxMethods, "more than {} Tensor methods from the op table", kMaxMethods);
    gMethods[next] = &b;
    b.def.ml_meth =
        reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(kTrampolines[next++]));
    py::object descr = py::reinterpret_steal<py::object>(
        PyDescr_NewMethod(reinterpret_cast<PyTypeObject *>(tensorType), &b.def));
    if (!descr || PyObject_SetAttrString(tensorType, b.name.c_str(), descr.ptr()) < 0)
      throw py::error_already_set();
    return;
  }
  py::module_ &m = b.site == Site::Module ? module : functional;
  KILN_CHECK(!py::hasattr(m, b.name.c_str()), "{}.{} is bound both by hand and from the op table",
             std::string(py::str(m.attr("__name__"))), b.name);
  b.def.ml_meth = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&callFunction));
  py::capsule self(static_cast<const void *>(&b));
  py::object fn = py::reinterpret_steal<py::object>(
      PyCFunction_NewEx(&b.def, self.ptr(), m.attr("__name__").ptr()));
  if (!fn)
    throw py::error_already_set();
  m.attr(b.name.c_str()) = fn;
}

} // namespace

namespace {

/// The argument error of calling an op of torch schema `schema` with `args` and `kwargs`, in
/// torch's words, or None when they fit it. For ops written in Python (kiln.nn.functional's
/// batch_norm, embedding, ...), which ask only once their own code has failed on the arguments
/// (kiln/_schema.py), so a call that fits pays nothing. A number never stands for a Tensor here.
py::object callError(const std::string &schema, py::tuple args, py::dict kwargs) {
  static std::mutex mutex;
  static auto *bindings = new std::map<std::string, SchemaBinding>();
  const SchemaBinding *binding;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = bindings->find(schema);
    if (it == bindings->end()) {
      it = bindings->emplace(schema, SchemaBinding(ir::parseOpSchema(schema))).first;
      it->second.numbersAsTensors = false;
    }
    binding = &it->second;
  }
  std::vector<PyObject *> flat;
  for (py::handle a : args)
    flat.push_back(a.ptr());
  py::tuple names(kwargs.size());
  size_t k = 0;
  for (auto [key, value] : kwargs) {
    names[k++] = py::reinterpret_borrow<py::object>(key);
    flat.push_back(value.ptr());
  }
  BoundArgs bound;
  std::string error;
  if (bindArgs(*binding, binding->schema.name.c_str(), nullptr, flat.data(),
               static_cast<Py_ssize_t>(args.size()), kwargs.size() ? names.ptr() : nullptr, bound,
               &error))
    return py::none();
  return py::str(error);
}

} // namespace

void bindOpTable(py::module_ &m) {
  m.def("_call_error", &callError, py::arg("schema"), py::arg("args"), py::arg("kwargs"),
        "torch's argument error for calling an op of this schema so, or None when the call fits");
  py::module_ functional =
      m.def_submodule("_nn", "kiln.nn.functional's ops generated from the op table");
  // Every (site, name) spelled by a row with a kernel, with its overloads in table order.
  std::map<std::pair<Site, std::string>, OpBinding *> byTarget;
  std::vector<std::pair<Site, std::string>> unbound; // spelled by a row without a kernel
  struct Row {
    std::optional<ir::OpKind> op;
    std::string_view schema, spellings;
  };
  std::vector<Row> rows;
  for (const ir::OpSpelling &row : ir::opSpellings())
    rows.push_back({row.op, row.schema, row.spellings});
  for (const ir::EagerSpelling &row : ir::eagerSpellings())
    rows.push_back({std::nullopt, row.schema, row.spellings});
  for (const Row &row : rows) {
    ir::OpSchema schema = ir::parseOpSchema(row.schema);
    const EagerKernel *kernel = findEagerKernel(row.op, schema);
    KILN_CHECK(kernel || row.op, "the op-table row '{}' has no eager kernel", row.schema);
    SchemaBinding *binding = nullptr;
    if (kernel) {
      binding = &allSchemas().emplace_back(std::move(schema));
      binding->numbersAsTensors = binding->numbersAsTensors && !kernel->tensorsOnly;
    }
    std::string_view rest = row.spellings;
    while (!rest.empty()) {
      size_t space = rest.find(' ');
      std::string_view spelling = rest.substr(0, space);
      rest = space == std::string_view::npos ? std::string_view() : rest.substr(space + 1);
      if (spelling.empty())
        continue;
      std::optional<Target> target = targetOf(spelling);
      if (!target)
        continue;
      auto key = std::make_pair(target->site, target->name);
      if (!kernel) {
        unbound.push_back(key);
        continue;
      }
      OpBinding *&b = byTarget[key];
      if (!b) {
        b = &allBindings().emplace_back();
        b->name = target->name;
        b->site = target->site;
        b->dunder = isDunder(b->name);
        ir::SpellingForm form = ir::spellingForm(spelling);
        b->reflected = form.reflected;
        b->inplace = form.inplace;
        // out= on the module functions of elementwise rows and of eager rows of one tensor.
        b->acceptsOut =
            b->site == Site::Module && !b->inplace &&
            (row.op ? ir::hasTrait(*row.op, ir::trait::Elementwise) : kernel->fn != nullptr);
      }
      KILN_CHECK(!(b->inplace && kernel->object), "'{}' is spelled in place but returns no tensor",
                 b->name);
      int inplaceArg = binding->schema.find("inplace");
      b->overloads.push_back(Overload{binding, kernel, inplaceArg});
    }
  }
  for (const auto &key : unbound)
    KILN_CHECK(!byTarget.count(key),
               "'{}' is spelled by op-table rows with and without an eager kernel", key.second);
  for (auto &[key, b] : byTarget)
    reserveNumberPositions(*b);
  PyObject *tensorType = m.attr("Tensor").ptr();
  for (auto &[key, b] : byTarget)
    install(*b, m, functional, tensorType);
}

} // namespace kiln::frontend

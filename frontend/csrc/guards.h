#pragma once
/// Guard trees: what a compiled frame assumed about its inputs, checked in C++ before each call.
///
/// [Note: guard trees]
/// A GuardManager is a tree of accessor nodes rooted at the frame state (the arguments tuple and
/// the function). Each node reaches one value from its parent (an argument, a global, a closure
/// cell, an attribute, an item) and holds leaf checks on that value. The same accessor asked
/// twice returns the same child, so checks on one value share the lookup.
///
/// Evaluation order (also the order of describe()):
///  1. global flags of the manager (e.g. the thread's grad mode),
///  2. the nodes depth first; within a node the cheapest checks first (type, identity, None;
///     then equality with constants; then lengths, dict keys and tuple constants; then tensors
///     and size bindings), each kind in the order added, then the children in the order added,
///  3. the symbolic-size relations of the manager, over the sizes bound in step 2.
/// A value that cannot be reached (missing global, attribute error, short tuple) fails the guard;
/// exceptions raised inside checks (a user __eq__) fail the check and are cleared: check() never
/// raises. Building (adding nodes or checks) while the same manager is being evaluated (a check
/// that re-enters Python) is refused, so the tree never changes under an evaluation.

#include "ir/sym_int.h"
#include "runtime/device.h"
#include "runtime/dtype.h"

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::frontend {

namespace py = pybind11;

class GuardManager;
struct GuardEval;

/// One leaf check on a node's value. `tier` orders the checks of a node by cost.
/// A tensor's device as one number (0: the CPU, 1 + index: a CUDA device), what a tensor check
/// compares in LeafCheck::n.
inline int64_t tensorDeviceCode(const Device &d) {
  return d.type == DeviceType::CPU ? 0 : 1 + d.index;
}

struct LeafCheck {
  enum class Kind : uint8_t {
    Type,
    Id,
    None,
    NotNone,
    Equals,
    Len,
    DictKeys,
    Tensor,
    Array,
    BindSize,
    Compare
  };
  Kind kind;
  int tier = 0;
  /// The type (Type), the object (Id), the value (Equals).
  py::object object;
  /// DictKeys: the expected keys in order.
  std::vector<py::object> keys;
  /// Len: the length; BindSize: the dim; Compare: the Py_LT..Py_GE operator.
  int64_t n = 0;
  /// Compare: the comparison's result that the capture assumed.
  bool expected = false;
  /// BindSize: the symbol slot.
  int64_t sym = 0;
  /// Array (a NumPy array, read through the buffer protocol): its format and itemsize (`n`).
  std::string format;
  /// Tensor, Array: expected geometry (Array: strides in bytes); kUnchecked entries are not
  /// compared.
  DType dtype = DType::Float32;
  bool requiresGrad = false;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  std::string text;

  static constexpr int64_t kUnchecked = INT64_MIN;
  /// BindSize's `n` that binds the value itself (a Python int argument), not a size of it.
  static constexpr int64_t kBindValue = INT64_MIN;
};

/// A node of the guard tree: how its value is reached from the parent, its checks, its children.
class GuardNode {
public:
  enum class Access : uint8_t { Root, Arg, Global, Closure, Held, Attr, Item };
  /// index() of an Item node whose key is not an int that fits in int64 (no tuple/list fast path).
  static constexpr int64_t kNoIndex = INT64_MIN;

  GuardNode(GuardManager &owner, const GuardNode *parent, Access access, int64_t index,
            py::object key, std::string source);
  GuardNode(const GuardNode &) = delete;
  GuardNode &operator=(const GuardNode &) = delete;

  /// Children (the root only has arg/global/closure/held children; other nodes attr/item children).
  GuardNode &arg(int64_t i);
  GuardNode &global(const std::string &name);
  GuardNode &closure(int64_t i);
  /// An object the compiled entry holds (a baked parameter whose `.grad` is read per call).
  GuardNode &held(py::object obj, const std::string &label);
  GuardNode &attr(const std::string &name);
  GuardNode &item(py::object key);

  void addCheck(LeafCheck check);

  Access access() const { return access_; }
  /// Arg/Closure: the position; Item: the int key (or kNoIndex).
  int64_t index() const { return index_; }
  PyObject *key() const { return key_.ptr(); }
  /// Where the value comes from, e.g. "args[0].weight" (used in messages).
  const std::string &source() const { return source_; }
  const std::vector<LeafCheck> &checks() const { return checks_; }
  const std::vector<std::unique_ptr<GuardNode>> &children() const { return children_; }
  /// The text reported when this node's value cannot be reached: the first check below it, or
  /// "<source> is missing" when nothing below it checks anything.
  const std::string &unreachableText() const;
  size_t numChecks() const;

private:
  GuardNode &child(Access access, int64_t index, py::object key, std::string source);
  void requireRoot(bool root, const char *what) const;

  GuardManager &owner_;
  const GuardNode *parent_;
  Access access_;
  int64_t index_;
  /// The name (Global, Attr, as a str) or key (Item).
  py::object key_;
  std::string source_;
  std::string missingText_;
  std::vector<LeafCheck> checks_;
  std::vector<std::unique_ptr<GuardNode>> children_;
};

/// A relation between symbol slots bound by BindSize checks.
struct SymCheck {
  enum class Op : uint8_t { Eq, EqConst, GeConst, LeConst, NeConst };
  Op op;
  int64_t a;
  /// The other slot (Eq) or the constant.
  int64_t b;
  std::string text;
};

/// A relation a shape rule assumed (`s0 >= 100`, `s1 + 8 <= s0`), over symbols bound by
/// BindSize checks: each named symbol's slot.
struct RelationCheck {
  ir::SymRelation relation;
  std::vector<std::pair<std::string, int64_t>> slots;
  std::string text;
};

/// getattr(object, name) == expected, checked before the nodes.
struct FlagCheck {
  py::object object;
  py::object name;
  py::object expected;
  std::string text;
};

/// The guard set of one compiled entry. See [Note: guard trees].
class GuardManager {
public:
  GuardManager();
  GuardManager(const GuardManager &) = delete;
  GuardManager &operator=(const GuardManager &) = delete;

  GuardNode &root() { return *root_; }

  void addSymCheck(SymCheck::Op op, int64_t a, int64_t b, std::string text);
  /// `relation` (SymRelation text) over the symbols named in `slots`, which must all be bound.
  void addRelationCheck(const std::string &relation,
                        std::vector<std::pair<std::string, int64_t>> slots, std::string text);
  void addFlagCheck(py::object object, py::object name, py::object expected, std::string text);

  /// True when every check passes on the frame state. Never raises, never leaves an exception.
  bool check(PyObject *const *args, Py_ssize_t nargs, PyObject *func) const;
  /// The text of the first failing check, or nullopt when all pass.
  std::optional<std::string> firstFailure(PyObject *const *args, Py_ssize_t nargs,
                                          PyObject *func) const;
  /// Every check's text in evaluation order.
  std::vector<std::string> describe() const;
  size_t numChecks() const;

  /// Throws RuntimeError while an evaluation of this manager is running (re-entrant build).
  void requireNotEvaluating() const;
  /// Makes symbol slot `sym` valid (slots are dense from 0).
  void useSymbol(int64_t sym);

private:
  const std::string *evaluate(PyObject *const *args, Py_ssize_t nargs, PyObject *func) const;
  const std::string *evalNode(const GuardNode &node, PyObject *value, GuardEval &eval) const;
  const std::string *evalSyms(GuardEval &eval) const;

  std::unique_ptr<GuardNode> root_;
  std::vector<FlagCheck> flags_;
  std::vector<SymCheck> syms_;
  std::vector<RelationCheck> relations_;
  int64_t numSyms_ = 0;
  /// The number of evaluations of this manager in progress (re-entrancy through Python).
  mutable int evaluating_ = 0;
};

/// Binds GuardManager and GuardNode onto `m` (kiln._C._capture).
void bindGuards(py::module_ &m);

} // namespace kiln::frontend

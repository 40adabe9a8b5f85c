// Building guard trees and listing their checks (evaluation is in guards_eval.cc).
#include "frontend/csrc/guards.h"

#include <algorithm>

namespace kiln::frontend {

namespace {

/// Symbol slots are small dense indices chosen by the symbolic evaluator.
constexpr int64_t kMaxSymbols = 1 << 16;

bool sameKey(PyObject *a, PyObject *b) {
  if (a == b)
    return true;
  if (Py_TYPE(a) != Py_TYPE(b))
    return false;
  int eq = PyObject_RichCompareBool(a, b, Py_EQ);
  if (eq < 0)
    PyErr_Clear();
  return eq == 1;
}

} // namespace

GuardNode::GuardNode(GuardManager &owner, const GuardNode *parent, Access access, int64_t index,
                     py::object key, std::string source)
    : owner_(owner), parent_(parent), access_(access), index_(index), key_(std::move(key)),
      source_(std::move(source)), missingText_(source_ + " is missing") {}

void GuardNode::requireRoot(bool root, const char *what) const {
  if ((access_ == Access::Root) != root)
    throw py::type_error(
        std::string(what) +
        (root ? " is an accessor of the guard root (the frame state)"
              : " is not available on the guard root (use arg/global_/closure/held)"));
}

GuardNode &GuardNode::child(Access access, int64_t index, py::object key, std::string source) {
  owner_.requireNotEvaluating();
  for (auto &c : children_)
    if (c->access_ == access && c->index_ == index &&
        (!key || access == Access::Held || (c->key_ && sameKey(c->key_.ptr(), key.ptr()))))
      return *c;
  children_.push_back(
      std::make_unique<GuardNode>(owner_, this, access, index, std::move(key), std::move(source)));
  return *children_.back();
}

GuardNode &GuardNode::arg(int64_t i) {
  requireRoot(true, "arg()");
  if (i < 0)
    throw py::value_error("arg(): the index must be >= 0, got " + std::to_string(i));
  return child(Access::Arg, i, py::object(), "args[" + std::to_string(i) + "]");
}

GuardNode &GuardNode::global(const std::string &name) {
  requireRoot(true, "global_()");
  return child(Access::Global, 0, py::str(name), "G['" + name + "']");
}

GuardNode &GuardNode::closure(int64_t i) {
  requireRoot(true, "closure()");
  if (i < 0)
    throw py::value_error("closure(): the index must be >= 0, got " + std::to_string(i));
  return child(Access::Closure, i, py::object(), "closure[" + std::to_string(i) + "]");
}

GuardNode &GuardNode::held(py::object obj, const std::string &label) {
  requireRoot(true, "held()");
  // Identity, not equality, tells held objects apart (tensors compare elementwise).
  auto identity = static_cast<int64_t>(reinterpret_cast<intptr_t>(obj.ptr()));
  return child(Access::Held, identity, std::move(obj), label);
}

GuardNode &GuardNode::attr(const std::string &name) {
  requireRoot(false, "attr()");
  py::str interned(name);
  PyObject *p = interned.release().ptr();
  PyUnicode_InternInPlace(&p);
  return child(Access::Attr, 0, py::reinterpret_steal<py::object>(p), source_ + "." + name);
}

GuardNode &GuardNode::item(py::object key) {
  requireRoot(false, "item()");
  if (PyObject_Hash(key.ptr()) == -1)
    throw py::error_already_set();
  std::string repr = py::repr(key);
  // An exact int key is also kept as a C integer for the tuple/list fast path.
  int64_t index = kNoIndex;
  if (PyLong_CheckExact(key.ptr())) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(key.ptr(), &overflow);
    if (!overflow)
      index = v;
  }
  return child(Access::Item, index, std::move(key), source_ + "[" + repr + "]");
}

void GuardNode::addCheck(LeafCheck check) {
  requireRoot(false, "a leaf check");
  owner_.requireNotEvaluating();
  if (check.kind == LeafCheck::Kind::BindSize)
    owner_.useSymbol(check.sym);
  // Stable by tier: after every check of the same or a cheaper tier.
  auto at = std::find_if(checks_.begin(), checks_.end(),
                         [&](const LeafCheck &c) { return c.tier > check.tier; });
  checks_.insert(at, std::move(check));
}

const std::string &GuardNode::unreachableText() const {
  if (!checks_.empty())
    return checks_.front().text;
  for (auto &c : children_)
    if (c->numChecks() > 0)
      return c->unreachableText();
  return missingText_;
}

size_t GuardNode::numChecks() const {
  size_t n = checks_.size();
  for (auto &c : children_)
    n += c->numChecks();
  return n;
}

GuardManager::GuardManager()
    : root_(std::make_unique<GuardNode>(*this, nullptr, GuardNode::Access::Root, 0, py::object(),
                                        "frame")) {}

void GuardManager::requireNotEvaluating() const {
  if (evaluating_ > 0)
    throw std::runtime_error("GuardManager: cannot add guards while the same manager is being "
                             "evaluated (a check re-entered Python)");
}

void GuardManager::useSymbol(int64_t sym) {
  if (sym < 0 || sym >= kMaxSymbols)
    throw py::value_error("symbol slot out of range [0, 65536): " + std::to_string(sym));
  numSyms_ = std::max(numSyms_, sym + 1);
}

void GuardManager::addSymCheck(SymCheck::Op op, int64_t a, int64_t b, std::string text) {
  requireNotEvaluating();
  useSymbol(a);
  if (op == SymCheck::Op::Eq)
    useSymbol(b);
  syms_.push_back(SymCheck{op, a, b, std::move(text)});
}

void GuardManager::addRelationCheck(const std::string &relation,
                                    std::vector<std::pair<std::string, int64_t>> slots,
                                    std::string text) {
  requireNotEvaluating();
  ir::SymRelation parsed = ir::SymRelation::parse(relation);
  for (const auto &[name, slot] : slots)
    useSymbol(slot);
  relations_.push_back(RelationCheck{std::move(parsed), std::move(slots), std::move(text)});
}

void GuardManager::addFlagCheck(py::object object, py::object name, py::object expected,
                                std::string text) {
  requireNotEvaluating();
  if (!PyUnicode_Check(name.ptr()))
    throw py::type_error("check_global_flag(): the attribute name must be a str");
  flags_.push_back(
      FlagCheck{std::move(object), std::move(name), std::move(expected), std::move(text)});
}

namespace {

void describeNode(const GuardNode &node, std::vector<std::string> &out) {
  for (auto &c : node.checks())
    out.push_back(c.text);
  for (auto &c : node.children())
    describeNode(*c, out);
}

} // namespace

std::vector<std::string> GuardManager::describe() const {
  std::vector<std::string> out;
  for (auto &f : flags_)
    out.push_back(f.text);
  describeNode(*root_, out);
  for (auto &s : syms_)
    out.push_back(s.text);
  for (auto &r : relations_)
    out.push_back(r.text);
  return out;
}

size_t GuardManager::numChecks() const {
  return flags_.size() + root_->numChecks() + syms_.size() + relations_.size();
}

} // namespace kiln::frontend

#include "passes/functionalize.h"

#include "ir/diagnostic.h"
#include "ir/printer.h"
#include "ir/shape_rules.h"

#include <algorithm>
#include <fmt/format.h>
#include <unordered_map>

namespace kiln::passes {

namespace {

using ir::Node;
using ir::OpKind;
using ir::Value;

/// Whether `node` is an in-place `call`: its target's last name ends in one `_`.
bool isInPlaceCall(const Node &node) {
  if (node.op() != OpKind::Call)
    return false;
  const std::string &target = node.attr("target")->toString();
  std::string_view name = std::string_view(target).substr(target.rfind('.') + 1);
  return name.size() > 1 && name.ends_with('_') && !name.ends_with("__");
}

/// A `call` of item assignment (`x[i] = v` in the frontend): a mutation through an index.
bool isSetItem(const Node &node) {
  return node.op() == OpKind::Call && node.attr("target")->toString().ends_with("setitem");
}

/// The trailing `copy_(input, value)` nodes just before `return` (one per input, results
/// unused): the write-backs of a functional graph.
std::vector<Node *> trailingWriteBacks(const ir::Graph &graph) {
  std::vector<Node *> nodes = graph.nodes(), out;
  for (size_t i = nodes.size() - 1; i-- > 0;) {
    Node *n = nodes[i];
    if (n->op() != OpKind::Copy || n->operand(0)->definingNode()->op() != OpKind::Input ||
        n->result()->hasUses())
      break;
    for (Node *other : out)
      if (other->operand(0) == n->operand(0))
        return {};
    out.push_back(n);
  }
  return out;
}

[[noreturn]] void reject(const Node &node, const std::string &why) {
  ir::ValueNumbering names(*node.graph());
  std::string self;
  for (int i = 0; i < node.numResults(); ++i)
    self += (i ? ", " : "") + names.name(node.result(i));
  std::string prefix = self.empty() ? fmt::format("'{}'", node.keyword())
                                    : fmt::format("{} = {}", self, node.keyword());
  throw ir::DiagnosticError(
      ir::Diagnostic{prefix + ": cannot functionalize: " + why, "", {}, &node});
}

/// Rewrites one graph; see functionalize.h.
class Functionalizer {
public:
  explicit Functionalizer(ir::Graph &graph) : graph_(graph) {}

  bool run() {
    if (writtenBackInputs(graph_))
      return false;
    nodes_ = graph_.nodes();
    for (size_t i = 0; i < nodes_.size(); ++i)
      visit(i);
    for (auto it = erase_.rbegin(); it != erase_.rend(); ++it) // users of a copy_ result first
      graph_.erase(*it);
    writeBack();
    return true;
  }

private:
  /// How a tensor value reaches its base: the view nodes applied to it, and the base's version
  /// (number of mutations) the value reflects.
  struct Alias {
    Value *base;
    std::vector<const Node *> chain;
    int version;
  };
  struct BaseState {
    Value *current;
    int version = 0;
  };

  void visit(size_t index) {
    Node &n = *nodes_[index];
    next_ = index + 1 < nodes_.size() ? nodes_[index + 1] : nullptr;
    if (isSetItem(n))
      reject(n, "item assignment (operator.setitem) is not supported");
    bool mutation = isMutation(n);
    for (int i = n.op() == OpKind::Copy ? 1 : 0; i < n.numOperands(); ++i)
      if (Value *v = current(n.operand(i), n); v != n.operand(i))
        n.setOperand(i, v);
    if (n.op() == OpKind::Copy)
      return mutateByCopy(n);
    if (mutation)
      return mutateByCall(n);
    if (n.hasTrait(ir::trait::View) && n.operand(0)->isTensor()) {
      Alias a = alias_.at(n.operand(0));
      a.chain.push_back(&n);
      alias_[n.result()] = std::move(a);
      return;
    }
    for (Value *r : n.results())
      if (r->isTensor())
        newBase(r);
  }

  void newBase(Value *v) {
    alias_[v] = Alias{v, {}, 0};
    bases_[v] = BaseState{v};
  }

  /// The value `v` stands for just before `user`: itself unless its base changed since.
  Value *current(Value *v, Node &user) {
    auto it = alias_.find(v);
    if (it == alias_.end())
      return v;
    Alias a = it->second; // a copy: alias_ grows below
    const BaseState &base = bases_.at(a.base);
    if (a.version == base.version)
      return v;
    auto cached = regenerated_.find(v);
    if (cached != regenerated_.end() && cached->second.first == base.version)
      return cached->second.second;
    Value *out = applyViews(base.current, a.chain, a.chain.size(), user);
    alias_[out] = Alias{a.base, a.chain, base.version};
    regenerated_[v] = {base.version, out};
    return out;
  }

  /// The first `count` views of `chain` re-applied to `value`, inserted before `user`.
  Value *applyViews(Value *value, const std::vector<const Node *> &chain, size_t count,
                    Node &user) {
    for (size_t i = 0; i < count; ++i)
      value = create(user, chain[i]->op(), {value}, chain[i]->attrs(), chain[i]->loc());
    return value;
  }

  /// A new node before `user` typed by its shape rule.
  Value *create(Node &user, OpKind op, std::vector<Value *> operands, ir::Attributes attrs,
                ir::SourceLoc loc) {
    return ir::createTypedBefore(graph_, &user, op, std::move(operands), std::move(attrs),
                                 std::move(loc));
  }

  /// `copy_(dst, src)`: the base of dst gets src written through dst's views.
  void mutateByCopy(Node &n) {
    Value *dst = n.operand(0), *src = n.operand(1);
    const ir::TensorMeta &want = dst->meta();
    if (src->meta().dtype != want.dtype)
      src = create(n, OpKind::Cast, {src}, {{"dtype", want.dtype}}, n.loc());
    if (src->meta().sizes != want.sizes)
      src = create(n, OpKind::Expand, {src}, {{"size", want.sizes}}, n.loc());
    Alias a = alias_.at(dst);
    writeThrough(n, a, src);
    alias_[n.result()] = Alias{a.base, a.chain, -1}; // uses re-read dst's views
    erase_.push_back(&n);
  }

  /// An in-place call: its out-of-place variant computes the new value of operand 0.
  void mutateByCall(Node &n) {
    if (n.numOperands() == 0 || !n.operand(0)->isTensor() || n.numResults() == 0 ||
        !n.result(0)->isTensor() || n.result(0)->meta().sizes != n.operand(0)->meta().sizes)
      reject(n, "an in-place call must take a tensor operand 0 and return it");
    std::string target = n.attr("target")->toString();
    n.setAttr("target", target.substr(0, target.size() - 1));
    for (int i = 1; i < n.numResults(); ++i)
      if (n.result(i)->isTensor())
        newBase(n.result(i));
    const Alias a = alias_.at(n.operand(0));
    writeThrough(n, a, n.result(0));
    alias_[n.result(0)] = Alias{a.base, a.chain, bases_.at(a.base).version};
  }

  /// Makes `value` the new content of the view `a` of its base: the base's new value is built
  /// back out through the views with scatters, inserted after `at` (before its next node).
  void writeThrough(Node &at, const Alias &a, Value *value) {
    BaseState &base = bases_.at(a.base);
    Node *next = next_; // a mutation is never the last node: `return` is
    for (size_t k = a.chain.size(); k-- > 0;) {
      const Node &view = *a.chain[k];
      if (view.op() == OpKind::Detach)
        continue; // the same elements: the new value passes through
      if (view.op() != OpKind::Slice && view.op() != OpKind::Select)
        reject(at, fmt::format("it writes through a '{}' view (only slice and select views "
                               "become scatters)",
                               view.keyword()));
      Value *outer = applyViews(base.current, a.chain, k, *next);
      OpKind scatter = view.op() == OpKind::Slice ? OpKind::SliceScatter : OpKind::SelectScatter;
      value = create(*next, scatter, {outer, value}, view.attrs(), at.loc());
    }
    base.current = value;
    ++base.version;
  }

  /// One `copy_(input, newValue)` per mutated input, before `return`.
  void writeBack() {
    Node *ret = graph_.returnNode();
    std::vector<Value *> written;
    for (Value *in : graph_.inputs())
      if (bases_.count(in) && bases_.at(in).version > 0)
        written.push_back(in);
    std::unordered_map<Value *, Value *> copies;
    auto copy = [&](Value *v) {
      Value *&c = copies[v];
      return c = c ? c : create(*ret, OpKind::Cast, {v}, {{"dtype", v->meta().dtype}}, {});
    };
    for (int i = 0; i < ret->numOperands(); ++i)
      if (ret->operand(i)->isTensor() && sharesStorage(ret->operand(i), written))
        ret->setOperand(i, copy(ret->operand(i)));
    for (Value *in : written) {
      Value *value = bases_.at(in).current;
      if (sharesStorage(value, written))
        value = copy(value);
      graph_.createBefore(ret, OpKind::Copy, {in, value}, {}, {in->type()}, ret->loc());
    }
  }

  ir::Graph &graph_;
  std::vector<Node *> nodes_; ///< the original nodes, in order
  Node *next_ = nullptr;      ///< the original node after the one being visited
  std::unordered_map<Value *, Alias> alias_;
  std::unordered_map<Value *, BaseState> bases_;
  std::unordered_map<Value *, std::pair<int, Value *>> regenerated_;
  std::vector<Node *> erase_;
};

class FunctionalizePass final : public Pass {
public:
  std::string_view name() const override { return "functionalize"; }
  bool run(ir::Graph &graph) override { return functionalize(graph); }
};

} // namespace

bool isMutation(const ir::Node &node) {
  return node.op() == OpKind::Copy || isInPlaceCall(node) || isSetItem(node);
}

std::optional<std::vector<Value *>> writtenBackInputs(const ir::Graph &graph) {
  std::vector<Node *> writeBacks = trailingWriteBacks(graph);
  for (Node *n : graph.nodes())
    if (isMutation(*n) && std::find(writeBacks.begin(), writeBacks.end(), n) == writeBacks.end())
      return std::nullopt;
  std::vector<Value *> inputs;
  for (Node *n : writeBacks)
    inputs.push_back(n->operand(0));
  return inputs;
}

std::vector<std::pair<Value *, Value *>> takeWriteBacks(ir::Graph &graph) {
  std::optional<std::vector<Value *>> inputs = writtenBackInputs(graph);
  KILN_CHECK(inputs, "takeWriteBacks: the graph {} is not functional", graph.name());
  std::vector<std::pair<Value *, Value *>> out;
  for (Node *n : trailingWriteBacks(graph)) {
    out.emplace_back(n->operand(0), n->operand(1));
    graph.erase(n);
  }
  std::reverse(out.begin(), out.end()); // trailingWriteBacks walks from the end
  return out;
}

bool sharesStorage(const Value *v, std::span<Value *const> inputs) {
  while (v->definingNode()->hasTrait(ir::trait::View))
    v = v->definingNode()->operand(0);
  return std::find(inputs.begin(), inputs.end(), v) != inputs.end();
}

bool functionalize(ir::Graph &graph) { return Functionalizer(graph).run(); }

std::unique_ptr<Pass> createFunctionalizePass() { return std::make_unique<FunctionalizePass>(); }

} // namespace kiln::passes

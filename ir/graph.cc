#include "ir/graph.h"

#include "runtime/error.h"

#include <algorithm>

namespace kiln::ir {

void Value::replaceAllUsesWith(Value *other) {
  KILN_CHECK(other != nullptr, "replaceAllUsesWith: the replacement value is null");
  if (other == this)
    return;
  KILN_CHECK(other->node_->graph() == node_->graph(),
             "replaceAllUsesWith: the replacement belongs to another graph");
  for (const Use &u : uses_) {
    u.user->operands_[u.operandIndex] = other;
    other->uses_.push_back(u);
  }
  uses_.clear();
}

Node::Node(Graph *graph, OpKind op, Attributes attrs, SourceLoc loc)
    : graph_(graph), op_(op), attrs_(std::move(attrs)), loc_(std::move(loc)) {}

// Values of other nodes may already be gone when a graph is destroyed: touch nothing.
Node::~Node() = default;

Value *Node::operand(int i) const {
  KILN_CHECK_KIND(Index, i >= 0 && i < numOperands(), "'{}' has {} operands; no operand {}",
                  keyword(), numOperands(), i);
  return operands_[i];
}

Value *Node::result(int i) const {
  KILN_CHECK_KIND(Index, i >= 0 && i < numResults(), "'{}' has {} results; no result {}", keyword(),
                  numResults(), i);
  return results_[i].get();
}

std::vector<Value *> Node::results() const {
  std::vector<Value *> out;
  for (const auto &r : results_)
    out.push_back(r.get());
  return out;
}

const Attribute *Node::attr(std::string_view name) const {
  auto it = attrs_.find(name);
  return it == attrs_.end() ? nullptr : &it->second;
}

void Node::addUse(int i) { operands_[i]->uses_.push_back(Use{this, i}); }

void Node::dropUse(int i) {
  std::vector<Use> &uses = operands_[i]->uses_;
  // Search from the back: passes tend to erase recent users first.
  auto it = std::find(uses.rbegin(), uses.rend(), Use{this, i});
  if (it != uses.rend()) {
    *it = uses.back();
    uses.pop_back();
  }
}

void Node::setOperand(int i, Value *v) {
  KILN_CHECK_KIND(Index, i >= 0 && i < numOperands(), "'{}' has {} operands; no operand {}",
                  keyword(), numOperands(), i);
  KILN_CHECK(v != nullptr, "'{}': operand {} set to null", keyword(), i);
  KILN_CHECK(v->definingNode()->graph() == graph_, "'{}': operand {} belongs to another graph",
             keyword(), i);
  dropUse(i);
  operands_[i] = v;
  addUse(i);
}

void Node::setOperands(std::vector<Value *> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    KILN_CHECK(values[i] != nullptr, "'{}': operand {} is null", keyword(), i);
    KILN_CHECK(values[i]->definingNode()->graph() == graph_,
               "'{}': operand {} belongs to another graph", keyword(), i);
  }
  for (int i = 0; i < numOperands(); ++i)
    dropUse(i);
  operands_ = std::move(values);
  for (int i = 0; i < numOperands(); ++i)
    addUse(i);
}

Graph::~Graph() = default;

void Graph::checkOwned(const Node *node, std::string_view what) const {
  KILN_CHECK(node != nullptr && node->graph_ == this, "{}: the node does not belong to graph @{}",
             what, name_);
}

Node *Graph::insert(std::list<std::unique_ptr<Node>>::iterator pos, OpKind op,
                    std::vector<Value *> operands, Attributes attrs,
                    std::vector<ValueType> resultTypes, SourceLoc loc) {
  for (size_t i = 0; i < operands.size(); ++i) {
    KILN_CHECK(operands[i] != nullptr, "creating '{}': operand {} is null", opKeyword(op), i);
    KILN_CHECK(operands[i]->definingNode()->graph() == this,
               "creating '{}': operand {} belongs to another graph", opKeyword(op), i);
  }
  auto node = std::unique_ptr<Node>(new Node(this, op, std::move(attrs), std::move(loc)));
  Node *raw = node.get();
  for (size_t i = 0; i < resultTypes.size(); ++i)
    raw->results_.push_back(
        std::unique_ptr<Value>(new Value(raw, static_cast<int>(i), std::move(resultTypes[i]))));
  raw->operands_ = std::move(operands);
  for (int i = 0; i < raw->numOperands(); ++i)
    raw->addUse(i);
  raw->self_ = nodes_.insert(pos, std::move(node));
  if (op == OpKind::Output && !return_)
    return_ = raw;
  return raw;
}

Value *Graph::addInput(ValueType type, std::string name, SourceLoc loc) {
  auto pos = std::find_if(nodes_.begin(), nodes_.end(),
                          [](const auto &n) { return n->op() != OpKind::Input; });
  Node *node = insert(pos, OpKind::Input, {}, {}, {std::move(type)}, std::move(loc));
  node->result()->setName(std::move(name));
  return node->result();
}

Node *Graph::create(OpKind op, std::vector<Value *> operands, Attributes attrs,
                    std::vector<ValueType> resultTypes, SourceLoc loc) {
  auto pos = nodes_.end();
  if (Node *ret = returnNode(); ret && op != OpKind::Output)
    pos = ret->self_;
  return insert(pos, op, std::move(operands), std::move(attrs), std::move(resultTypes),
                std::move(loc));
}

Node *Graph::createBefore(Node *anchor, OpKind op, std::vector<Value *> operands, Attributes attrs,
                          std::vector<ValueType> resultTypes, SourceLoc loc) {
  checkOwned(anchor, "createBefore");
  return insert(anchor->self_, op, std::move(operands), std::move(attrs), std::move(resultTypes),
                std::move(loc));
}

Node *Graph::setOutputs(std::vector<Value *> values, SourceLoc loc) {
  if (Node *ret = returnNode()) {
    ret->setOperands(std::move(values));
    if (loc.known())
      ret->setLoc(std::move(loc));
    return ret;
  }
  return insert(nodes_.end(), OpKind::Output, std::move(values), {}, {}, std::move(loc));
}

std::vector<Value *> Graph::inputs() const {
  std::vector<Value *> out;
  for (const auto &n : nodes_)
    if (n->op() == OpKind::Input && n->numResults() == 1)
      out.push_back(n->result());
  return out;
}

std::vector<Value *> Graph::outputs() const {
  Node *ret = returnNode();
  if (!ret)
    return {};
  return std::vector<Value *>(ret->operands().begin(), ret->operands().end());
}

Node *Graph::returnNode() const { return return_; }

std::vector<Node *> Graph::nodes() const {
  std::vector<Node *> out;
  out.reserve(nodes_.size());
  for (const auto &n : nodes_)
    out.push_back(n.get());
  return out;
}

void Graph::moveBefore(Node *node, Node *anchor) {
  checkOwned(node, "moveBefore");
  checkOwned(anchor, "moveBefore");
  if (node != anchor)
    nodes_.splice(anchor->self_, nodes_, node->self_);
}

void Graph::erase(Node *node) {
  checkOwned(node, "erase");
  for (const auto &r : node->results_)
    KILN_CHECK(!r->hasUses(), "cannot erase '{}': its result {} still has {} use(s)",
               node->keyword(), r->resultIndex(), r->uses().size());
  for (int i = 0; i < node->numOperands(); ++i)
    node->dropUse(i);
  bool wasReturn = node == return_;
  nodes_.erase(node->self_);
  if (wasReturn) {
    auto it = std::find_if(nodes_.begin(), nodes_.end(),
                           [](const auto &n) { return n->op() == OpKind::Output; });
    return_ = it == nodes_.end() ? nullptr : it->get();
  }
}

} // namespace kiln::ir

#include "ir/graph_builder.h"

#include "ir/shape_rules.h"
#include "ir/verifier.h"
#include "ir/verifier_impl.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::ir {

GraphBuilder::GraphBuilder(std::string name) : graph_(std::make_unique<Graph>(std::move(name))) {}

Value *GraphBuilder::input(ValueType type, std::string name, SourceLoc loc) {
  KILN_CHECK_KIND(Value, order_.size() == graph_->inputs().size(),
                  "graph @{}: input %{} after other nodes", graph_->name(), name);
  Value *v = graph_->addInput(std::move(type), std::move(name), std::move(loc));
  number_[v->definingNode()] = static_cast<int>(order_.size());
  order_.push_back(v->definingNode());
  return v;
}

std::vector<Value *> GraphBuilder::add(OpKind op, std::vector<Value *> operands, Attributes attrs,
                                       SourceLoc loc, std::optional<std::vector<ValueType>> given) {
  const OpInfo &info = opInfo(op);
  KILN_CHECK_KIND(Value, op != OpKind::Input && op != OpKind::Output,
                  "{}: added through input() and finish()", info.keyword);
  for (Value *v : operands)
    KILN_CHECK_KIND(Value, v && v->definingNode()->graph() == graph_.get(),
                    "{}: an operand that is not a value of graph @{}", info.keyword,
                    graph_->name());
  bool typedByRule = !given;
  KILN_CHECK_KIND(Value, !typedByRule || info.numResults != kVariadic, "{}: give the result types",
                  info.keyword);
  // Rule-typed results start as placeholders, retyped below.
  std::vector<ValueType> types =
      typedByRule ? std::vector<ValueType>(info.numResults, ScalarType::Int) : std::move(*given);
  try { // the verifier's own signature checks
    detail::checkArity(op, static_cast<int>(operands.size()), static_cast<int>(types.size()));
    detail::checkAttributes(op, attrs);
  } catch (const Error &e) {
    throw Error(ErrorKind::Value, fmt::format("{}: {}", info.keyword, e.what()));
  }
  Node *node =
      graph_->create(op, std::move(operands), std::move(attrs), std::move(types), std::move(loc));
  try {
    if (node->numResults() == 1) {
      SymAssumptions assumed;
      std::optional<ValueType> type = inferResultType(*node, &assumed);
      for (const SymRelation &r : assumed.relations())
        assumed_.emplace_back(order_.size(), r);
      KILN_CHECK_KIND(Value, type || !typedByRule, "{}: give the result type (it has no rule)",
                      info.keyword);
      if (type)
        node->result()->setType(std::move(*type));
    }
    detail::checkOpRules(*node);
  } catch (const Error &e) {
    graph_->erase(node);
    std::string what = e.what();
    if (what.rfind(std::string(info.keyword) + ":", 0) == 0)
      throw;
    throw Error(ErrorKind::Value, fmt::format("{}: {}", info.keyword, what));
  }
  number_[node] = static_cast<int>(order_.size());
  order_.push_back(node);
  return node->results();
}

std::vector<SymRelation> GraphBuilder::assumptions() const {
  std::vector<SymRelation> out;
  for (const auto &[number, r] : assumed_)
    if (std::find(out.begin(), out.end(), r) == out.end())
      out.push_back(r);
  return out;
}

void GraphBuilder::rollback(size_t mark) {
  KILN_CHECK(mark <= order_.size(), "rollback to {} of {} nodes", mark, order_.size());
  std::erase_if(assumed_, [&](const auto &a) { return a.first >= mark; });
  while (order_.size() > mark) {
    number_.erase(order_.back());
    graph_->erase(order_.back());
    order_.pop_back();
  }
}

NodePositions GraphBuilder::positions() const {
  NodePositions out;
  for (const auto &[node, k] : number_)
    out[node] = TextPos{k + 1, 1};
  return out;
}

int GraphBuilder::numberOf(const Node *node) const {
  auto it = number_.find(node);
  return it == number_.end() ? -1 : it->second;
}

std::unique_ptr<Graph> GraphBuilder::finish(std::vector<Value *> outputs, Attributes returnAttrs) {
  KILN_CHECK(graph_, "GraphBuilder::finish called twice");
  Node *ret = graph_->setOutputs(std::move(outputs));
  for (auto &[name, value] : returnAttrs)
    ret->setAttr(name, std::move(value));
  verifyOrThrow(*graph_);
  order_.clear();
  number_.clear();
  return std::move(graph_);
}

std::unique_ptr<Graph> cloneGraph(const Graph &graph,
                                  std::unordered_map<const Node *, Node *> *map) {
  auto out = std::make_unique<Graph>(graph.name());
  std::unordered_map<const Value *, Value *> values;
  auto copyNames = [&](const Node *from, Node *to) {
    for (int i = 0; i < from->numResults(); ++i) {
      to->result(i)->setName(from->result(i)->name());
      values[from->result(i)] = to->result(i);
    }
    if (map)
      (*map)[from] = to;
  };
  for (const Node *n : graph.nodes()) {
    std::vector<Value *> operands;
    for (const Value *v : n->operands())
      operands.push_back(values.at(v));
    Node *copy = nullptr;
    if (n->op() == OpKind::Input) {
      copy = out->addInput(n->result()->type(), n->result()->name(), n->loc())->definingNode();
    } else if (n->op() == OpKind::Output) {
      copy = out->setOutputs(std::move(operands), n->loc());
      copy->attrs() = n->attrs();
    } else {
      std::vector<ValueType> types;
      for (const Value *v : n->results())
        types.push_back(v->type());
      copy = out->create(n->op(), std::move(operands), n->attrs(), std::move(types), n->loc());
    }
    copyNames(n, copy);
  }
  return out;
}

} // namespace kiln::ir

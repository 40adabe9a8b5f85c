#include "passes/cse.h"

#include <algorithm>
#include <unordered_set>

namespace kiln::passes {

namespace {

// Operands in the order equality is judged in: sorted for commutative ops.
std::vector<ir::Value *> canonicalOperands(const ir::Node *n) {
  std::vector<ir::Value *> ops(n->operands().begin(), n->operands().end());
  if (n->hasTrait(ir::trait::Commutative))
    std::sort(ops.begin(), ops.end());
  return ops;
}

struct NodeHash {
  size_t operator()(const ir::Node *n) const {
    size_t h = static_cast<size_t>(n->op());
    for (const ir::Value *v : canonicalOperands(n))
      h = ir::detail::hashCombine(h, std::hash<const ir::Value *>()(v));
    h = ir::detail::hashCombine(h, ir::hashAttributes(n->attrs()));
    for (int i = 0; i < n->numResults(); ++i)
      h = ir::detail::hashCombine(h, n->result(i)->type().hash());
    return h;
  }
};

struct NodeEqual {
  bool operator()(const ir::Node *a, const ir::Node *b) const {
    if (a->op() != b->op() || a->numResults() != b->numResults() || a->attrs() != b->attrs() ||
        canonicalOperands(a) != canonicalOperands(b))
      return false;
    for (int i = 0; i < a->numResults(); ++i)
      if (a->result(i)->type() != b->result(i)->type())
        return false;
    return true;
  }
};

} // namespace

bool eliminateCommonSubexpressions(ir::Graph &graph) {
  bool changed = false;
  std::unordered_set<ir::Node *, NodeHash, NodeEqual> available;
  for (ir::Node *node : graph.nodes()) {
    if (node->hasTrait(ir::trait::InPlace)) {
      available.clear();
      continue;
    }
    if (!node->hasTrait(ir::trait::Pure))
      continue;
    auto [it, inserted] = available.insert(node);
    if (inserted)
      continue;
    for (int i = 0; i < node->numResults(); ++i)
      node->result(i)->replaceAllUsesWith((*it)->result(i));
    graph.erase(node);
    changed = true;
  }
  return changed;
}

namespace {
class CsePass final : public Pass {
public:
  std::string_view name() const override { return "cse"; }
  bool run(ir::Graph &graph) override { return eliminateCommonSubexpressions(graph); }
};
} // namespace

std::unique_ptr<Pass> createCsePass() { return std::make_unique<CsePass>(); }

} // namespace kiln::passes

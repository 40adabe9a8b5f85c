#include "passes/dce.h"

namespace kiln::passes {

bool eliminateDeadCode(ir::Graph &graph) {
  bool changed = false;
  std::vector<ir::Node *> nodes = graph.nodes();
  // Backwards: deleting a user first makes its operands' producers dead in the same sweep.
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    ir::Node *node = *it;
    if (!node->hasTrait(ir::trait::Pure))
      continue;
    bool used = false;
    for (int i = 0; i < node->numResults() && !used; ++i)
      used = node->result(i)->hasUses();
    if (!used) {
      graph.erase(node);
      changed = true;
    }
  }
  return changed;
}

namespace {
class DcePass final : public Pass {
public:
  std::string_view name() const override { return "dce"; }
  bool run(ir::Graph &graph) override { return eliminateDeadCode(graph); }
};
} // namespace

std::unique_ptr<Pass> createDcePass() { return std::make_unique<DcePass>(); }

} // namespace kiln::passes

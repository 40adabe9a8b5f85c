#include "passes/shape_infer.h"

#include "ir/diagnostic.h"
#include "ir/printer.h"

namespace kiln::passes {

namespace {

/// `%2 = add`: the node as the verifier names it in messages.
std::string describe(const ir::Node &node) {
  ir::ValueNumbering names(*node.graph());
  std::string out;
  for (int i = 0; i < node.numResults(); ++i)
    out += (i ? ", " : "") + names.name(node.result(i));
  return out + (out.empty() ? "" : " = ") + std::string(node.keyword());
}

class ShapeInferPass final : public Pass {
public:
  std::string_view name() const override { return "shape-infer"; }
  bool run(ir::Graph &graph) override { return inferShapes(graph).changed; }
};

} // namespace

ShapeInference inferShapes(ir::Graph &graph) {
  ShapeInference out;
  for (ir::Node *node : graph.nodes()) {
    if (node->numResults() != 1)
      continue; // input/return/call: typed as given (every op with a rule has one result)
    std::optional<ir::ValueType> type;
    try {
      type = ir::inferResultType(*node, &out.assumed);
    } catch (const ir::DiagnosticError &) {
      throw;
    } catch (const Error &e) {
      throw ir::DiagnosticError(ir::Diagnostic{describe(*node) + ": " + e.what(), "", {}, node});
    }
    if (type && *type != node->result()->type()) {
      node->result()->setType(std::move(*type));
      out.changed = true;
    }
  }
  return out;
}

std::unique_ptr<Pass> createShapeInferPass() { return std::make_unique<ShapeInferPass>(); }

} // namespace kiln::passes

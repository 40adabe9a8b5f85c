#pragma once
/// GraphBuilder: builds a Graph in memory, node by node, each node checked and typed as it is
/// added. The capture frontend builds every graph it hands the compiler through it (bound as
/// `kiln._C._ir.GraphBuilder`), so no graph goes through .kir text on its way to the compiler.
///
/// Semantics:
/// - `add(op, operands, attrs)` checks the node against the op table (operand count, result
///   count, attribute names, kinds and required attributes), types its result by the op's shape
///   rule (ir/shape_rules.h: torch's dtype promotion, symbolic sizes, view strides) and checks
///   the op's own rules, the ones the verifier runs. A node that breaks any of them is not added:
///   kiln::Error (Value) is thrown with `keyword: the broken rule`, and the graph is unchanged.
/// - Ops without a shape rule (`call`, `constant`, `weight`) are typed as the caller says.
/// - `mark()`/`rollback(mark)` erase what was added since the mark (a lowering that gives up
///   halfway through a composite).
/// - Nodes are numbered in the order they were added (inputs included); `positions()` gives
///   each node its number + 1 as a line, so diagnostics of later passes (which carry a line)
///   name the node in the builder's numbering, as they name a line of parsed text.
/// - `finish(outputs)` adds the `return` node, verifies the whole graph and hands it over.

#include "ir/graph.h"
#include "ir/parser.h"

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::ir {

class GraphBuilder {
public:
  /// An empty graph named `name` (an identifier).
  explicit GraphBuilder(std::string name);

  /// A graph input of `type`, printed as `%name` (inputs must come before other nodes).
  Value *input(ValueType type, std::string name, SourceLoc loc = {});
  /// Adds one node (see the file comment); `types` only for ops typed as given (a `call`
  /// without results gives an empty list).
  std::vector<Value *> add(OpKind op, std::vector<Value *> operands, Attributes attrs,
                           SourceLoc loc = {},
                           std::optional<std::vector<ValueType>> types = std::nullopt);
  /// The number of nodes added so far.
  size_t mark() const { return order_.size(); }
  /// Erases every node added after `mark` (latest first).
  void rollback(size_t mark);

  /// What the shape rules assumed about the symbols while typing the nodes still in the graph
  /// (`end <= size` of a slice, `s0 == s1` of a broadcast), each once, in order: a caller that
  /// relies on the types must guard them.
  std::vector<SymRelation> assumptions() const;

  /// The graph being built (to read types; add nodes through the builder).
  const Graph &graph() const { return *graph_; }
  /// Node → its number + 1 as a line (see the file comment).
  NodePositions positions() const;
  /// The number of `node` (its index in the order of add/input calls), or -1.
  int numberOf(const Node *node) const;

  /// Sets the outputs (and the return's attributes), verifies, and hands the graph over; the
  /// builder is empty afterwards.
  std::unique_ptr<Graph> finish(std::vector<Value *> outputs, Attributes returnAttrs = {});

private:
  std::unique_ptr<Graph> graph_;
  std::vector<Node *> order_;
  std::unordered_map<const Node *, int> number_;
  /// (the number of the node whose rule assumed it, the relation)
  std::vector<std::pair<size_t, SymRelation>> assumed_;
};

/// A copy of `graph` (same nodes, attributes, types, names and locations); `map` receives each
/// original node's copy.
std::unique_ptr<Graph> cloneGraph(const Graph &graph,
                                  std::unordered_map<const Node *, Node *> *map = nullptr);

} // namespace kiln::ir

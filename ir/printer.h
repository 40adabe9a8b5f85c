#pragma once
/// The .kir printer: the deterministic text form of a Graph (grammar in ir/README.md).
///
/// Semantics: graph inputs print under their names (`%x`) when those are identifiers that are
/// unique among the inputs, else as `%arg<i>`; every other value is numbered `%0`, `%1`, ... in
/// node order. Attributes print sorted by name, types in full, source locations as
/// `loc("file":line)`. Nothing depends on pointers or hashing, so the same graph always prints the
/// same text, and parsing that text and printing it again reproduces it exactly.

#include "ir/graph.h"

#include <string>
#include <unordered_map>

namespace kiln::ir {

/// The names the printer gives a graph's values.
class ValueNumbering {
public:
  explicit ValueNumbering(const Graph &graph);
  /// `%x` or `%3`; `%<unknown>` for a value outside the graph.
  std::string name(const Value *v) const;

private:
  std::unordered_map<const Value *, std::string> names_;
};

/// The whole graph: `graph @name(...) { ... }` followed by a newline.
std::string printGraph(const Graph &graph);
/// One node as it appears in the graph body (without indentation or newline), for diagnostics.
std::string printNode(const Node &node, const ValueNumbering &names);
/// ` loc("file":line)` for a known location, empty otherwise.
std::string printLoc(const SourceLoc &loc);

} // namespace kiln::ir

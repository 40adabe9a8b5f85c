#pragma once
/// A graph the capture frontend built in memory (`kiln._C._ir.Graph`), as the compiler bindings
/// take it: the graph and each node's number in the builder (what a decline reports).

#include "ir/graph.h"
#include "ir/parser.h"

#include <memory>
#include <utility>

namespace kiln::frontend {

struct BuiltGraph {
  std::unique_ptr<ir::Graph> graph;
  ir::NodePositions positions;

  /// A copy for a pipeline that consumes its graph (passes rewrite it), with the positions of
  /// the copy's nodes; the built graph stays as it is, to be compiled or printed again.
  std::pair<std::unique_ptr<ir::Graph>, ir::NodePositions> copy() const;
};

} // namespace kiln::frontend

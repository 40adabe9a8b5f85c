#pragma once
/// Pass: the interface every graph pass implements (after XLA's HloPassInterface).
///
/// A pass has a kebab-case name (its pipeline name, its file name and its lit test's name) and a
/// run() that transforms a graph in place and says whether it changed anything. Passes do not
/// verify, print or log: the PassManager does that around them, so each pass stays small.

#include "ir/graph.h"

#include <memory>
#include <string_view>

namespace kiln::passes {

class Pass {
public:
  virtual ~Pass() = default;
  /// The pipeline name, e.g. `dce`.
  virtual std::string_view name() const = 0;
  /// Transforms `graph`; returns true when it changed.
  virtual bool run(ir::Graph &graph) = 0;
};

} // namespace kiln::passes

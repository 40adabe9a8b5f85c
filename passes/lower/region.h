#pragma once
/// Regions of a tensor that a view reads or a scatter writes, and nested scatters composed into
/// one write: what lowerScatter tests per point, and what the driver turns into region writes
/// of a program's mutated inputs (driver/prepared_graph.cc takeWriteBacks).

#include "ir/graph.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln::passes::lower {

/// Where a select_scatter / slice_scatter writes into its base, or where a select / slice view
/// reads from its operand: along `dim`, `len` positions from `start` by `step` (a select: one
/// position, and the dim is dropped).
struct Region {
  int64_t dim = 0;
  bool select = false;
  ir::SymInt start = 0, len = 1;
  int64_t step = 1;

  bool operator==(const Region &o) const {
    return dim == o.dim && select == o.select && start == o.start && len == o.len && step == o.step;
  }
};

/// `region` as the views that reach it: `.select(0, t).slice(0, 1, 9, 2)` (slice: start, end,
/// step); "" for the whole tensor.
std::string regionText(const std::vector<Region> &region);

/// A constant start/index made non-negative the way torch does (negative counts from the end);
/// `clamp` clamps a slice's start into [0, size].
ir::SymInt normalizeIndex(const ir::SymInt &index, const ir::SymInt &size, bool clamp);

bool isScatter(const ir::Node &n);

/// The region of a scatter or of a select / slice view; none for other nodes.
std::optional<Region> regionOf(const ir::Node &n);

/// A scatter and the scatters nested in its source through views of its base
/// (`scatter(B, scatter(select(B, i), v, j), i)`, what `B[i, j] = v` functionalizes to),
/// composed: `levels` from the outermost, `source` the value written there.
struct ComposedScatter {
  std::vector<Region> levels;
  std::vector<DType> levelTypes; ///< the result dtype of each inner scatter (casts on the way)
  const ir::Value *source = nullptr;
  /// The view of the outer scatter's base that the first inner write goes through, or null.
  const ir::Node *firstView = nullptr;
};

/// `n`, a scatter whose region is not empty, composed with the scatters nested in it.
ComposedScatter composeScatter(const ir::Node &n);

} // namespace kiln::passes::lower

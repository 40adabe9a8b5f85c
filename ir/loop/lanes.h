#pragma once
/// How a loop body's index expressions move along one loop variable: what decides which loop a
/// node vectorizes (passes/schedule) and how each load is emitted along it (codegen).

#include "ir/sym_int.h"

#include <optional>
#include <string>

namespace kiln::ir::loop {

/// `c` with `e == e[var := 0] + c * var`, or nullopt when e is not affine in `var` (c may
/// mention other variables and size symbols).
std::optional<SymInt> laneCoefficient(const SymInt &e, const std::string &var);

/// A load position `min(max(inner, lo), hi) + rest` whose `inner` has coefficient 1 along the
/// lane variable and whose lo, hi, rest do not mention it: how slice_scatter and pad read their
/// source (clamped, so both sides of their `where` stay in bounds). Where a vector's positions
/// all lie in [lo, hi] the load is contiguous.
struct ClampedIndex {
  SymInt inner, lo, hi, rest;
};
std::optional<ClampedIndex> clampedAlong(const SymInt &e, const std::string &var);

} // namespace kiln::ir::loop

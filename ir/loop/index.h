#pragma once
/// Index expressions of the loop IR: SymInts over loop variables and size symbols.
///
/// Semantics:
/// - An IndexExpr is an ir::SymInt: int64, kept in canonical sum-of-products form, floordiv and
///   mod rounding like Python. There is no second symbolic-integer type.
/// - Loop variables are symbols named by position: `i0, i1, ...` for a node's ranges and
///   `r0, r1, ...` for its reduction ranges; `i<k>` runs over [0, ranges[k]). Every other symbol
///   is a size symbol (`s0`, ...), bound when the program runs. Buffer sizes, strides and node
///   ranges mention size symbols only, so names of the form `i<k>`/`r<k>` are reserved.
/// - A load's index is a flat element offset into its buffer: the per-dimension index dotted
///   with the buffer's strides (a stride of 0 broadcasts).
/// - SymInt simplifies what holds for every integer value. VarRanges adds what holds because
///   loop variables stay in range: `(i0*128 + i1) floordiv 128` is `i0` and
///   `(i0*128 + i1) mod 128` is `i1` when i1 < 128 (floorDivInRange, modInRange).

#include "ir/sym_int.h"

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ir::loop {

using IndexExpr = SymInt;

/// `i<k>`, the variable of range k.
std::string loopVarName(size_t k);
/// `r<k>`, the variable of reduction range k.
std::string reductionVarName(size_t k);
/// Whether `name` has the form of a loop variable (`i` or `r` and decimal digits).
bool isLoopVarName(std::string_view name);
/// Whether `e` mentions a loop variable (without one it names the same value at every point of
/// its node: `83`, or `s1*101` for a run-time element).
bool mentionsLoopVars(const SymInt &e);
/// Throws kiln::Error when `e` mentions a loop-variable name; `what` names e in the message.
void checkNoLoopVars(const SymInt &e, std::string_view what);

/// The extents of the loop variables of one node: `i0 -> s0`, `r0 -> 128`.
class VarRanges {
public:
  VarRanges() = default;
  /// `i<k> -> ranges[k]` and `r<k> -> reductionRanges[k]`.
  explicit VarRanges(std::span<const SymInt> ranges, std::span<const SymInt> reductionRanges = {});

  /// The extent of variable `name`, or nullptr when it is not a variable here.
  const SymInt *extent(std::string_view name) const;
  /// The variables as index expressions, `i0, i1, ..., r0, ...` (what a body receives).
  const std::vector<IndexExpr> &vars() const { return vars_; }
  /// `i0, i1, r0` (for messages).
  std::string names() const;

private:
  std::map<std::string, SymInt, std::less<>> extents_;
  std::vector<IndexExpr> vars_;
};

/// `sum(index[k] * strides[k])`; throws kiln::Error when the lengths differ.
IndexExpr flatIndex(std::span<const IndexExpr> index, std::span<const SymInt> strides);

/// `e == base + sum(coeff * var)` with base and coefficients free of loop variables.
struct AffineForm {
  SymInt base;
  std::map<std::string, SymInt, std::less<>> coeffs; ///< by variable name, nonzero only
};
/// The affine form of `e` in the variables of `ranges`; nullopt when e is not affine in them (a
/// variable inside floordiv/mod/max/min, a product of two variables, or a loop-variable name
/// that `ranges` does not know).
std::optional<AffineForm> affineForm(const IndexExpr &e, const VarRanges &ranges);

/// Inclusive bounds of an index expression over its loop ranges.
struct IndexBounds {
  SymInt lo, hi;
};
/// Bounds of affine `e` whose variable coefficients are constants (the extents may be symbolic;
/// every loop is assumed non-empty), or of a constant combination of atoms that are bounded
/// (floordiv and mod of such expressions by positive constants, max, min); nullopt otherwise.
std::optional<IndexBounds> indexBounds(const IndexExpr &e, const VarRanges &ranges);

/// `a floordiv c` using the loop ranges: the terms of `a` that are multiples of c move out of
/// the division, and the division of the rest vanishes when its bounds prove it constant.
/// Falls back to SymInt's floorDiv when nothing can be proven.
IndexExpr floorDivInRange(const IndexExpr &a, const SymInt &c, const VarRanges &ranges);
/// `a mod c`, simplified the same way.
IndexExpr modInRange(const IndexExpr &a, const SymInt &c, const VarRanges &ranges);
/// `e` with each pair `(k*u)*(x floordiv k) + u*(x mod k)` replaced by `u*x` (a position
/// decoded by a reshape and flattened again).
IndexExpr recombineDivMod(const IndexExpr &e);

} // namespace kiln::ir::loop

#pragma once
/// A structural walk of a SymInt for code generators: the canonical sum-of-products form turned
/// into a sequence of binary integer operations, bottom-up, without going through its text.
///
/// A generator implements SymIntVisitor, whose calls receive already-emitted operands (SSA names,
/// C expressions, ...) and return the emitted result; walkSymInt drives it. Every call's operands
/// were returned by earlier calls of the same walk, so a generator that emits straight-line code
/// (one SSA op per call) can use every operand where it emits the result.
///
/// Evaluation order, for `c0 + c1*m1 + c2*m2 + ...` with terms in canonical order:
/// - A monomial multiplies its atoms left to right in canonical order, a power `a^p` as `p - 1`
///   multiplications of a by itself; the coefficient's magnitude multiplies last and is omitted
///   when it is 1.
/// - The sum starts from the first term with a positive coefficient; when there is none, from the
///   constant c0 (as one literal, any sign) when it is nonzero, else from the constant 0. The other
///   terms follow in canonical order, each added, or subtracted when its coefficient is negative
///   (with its magnitude); c0, unless it started the sum, comes last as `+ c0` or `- |c0|`.
///   A coefficient or constant of INT64_MIN, whose magnitude is no int64, is added as itself.
/// - A constant SymInt is one `constant` call; a single symbol one `symbol` call.
/// - An atom (a symbol, or floordiv/mod/max/min over SymInt operands, which are walked
///   recursively, left operand first) is emitted once per walk: a repeat reuses its result.
///
/// Semantics every visitor must implement on int64 (the semantics of SymInt::evaluate):
/// `floorDiv` rounds the quotient toward negative infinity for any operand signs (Python `//`),
/// `mod` is `a - floorDiv(a, b) * b` (the result takes the divisor's sign, Python `%`), `max` and
/// `min` are signed. Negative literals reach `constant` only as a constant SymInt, the constant a
/// sum starts with, an atom's operand (`max(s0, -1)`) or INT64_MIN; the sum itself subtracts
/// magnitudes instead.

#include "ir/sym_int.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::ir {

/// Emits the operations of a SymInt's evaluation; see walkSymInt for the order of the calls.
class SymIntVisitor {
public:
  virtual ~SymIntVisitor() = default;

  /// An integer literal (negative only where the file comment says).
  virtual std::string constant(int64_t value) = 0;
  /// The value of symbol `name` (a loop variable or a size, for the generators).
  virtual std::string symbol(std::string_view name) = 0;
  virtual std::string add(const std::string &a, const std::string &b) = 0;
  virtual std::string sub(const std::string &a, const std::string &b) = 0;
  virtual std::string mul(const std::string &a, const std::string &b) = 0;
  /// Rounds toward negative infinity.
  virtual std::string floorDiv(const std::string &a, const std::string &b) = 0;
  /// Takes the sign of the divisor: `a - floorDiv(a, b) * b`.
  virtual std::string mod(const std::string &a, const std::string &b) = 0;
  virtual std::string max(const std::string &a, const std::string &b) = 0;
  virtual std::string min(const std::string &a, const std::string &b) = 0;
};

/// Emits `e` through `visitor` in the order the file comment documents and returns the operand
/// holding its value.
std::string walkSymInt(const SymInt &e, SymIntVisitor &visitor);

} // namespace kiln::ir

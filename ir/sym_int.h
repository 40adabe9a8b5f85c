#pragma once
/// SymInt: a symbolic integer, either a constant or an immutable expression over named symbols.
///
/// Semantics:
/// - Values are int64. A symbol (`s0`, `s1`, ...) stands for an unknown integer, typically a
///   tensor size the compiled code receives at run time.
/// - Operations: `+`, `-`, `*`, floorDiv (rounds toward negative infinity, like Python `//`),
///   mod (result has the sign of the divisor, like Python `%`), max, min. Constant arithmetic that
///   overflows int64 and division by a constant zero throw kiln::Error; nothing wraps.
/// - Canonical form: every SymInt is kept as a sum of products, `c0 + c1*m1 + c2*m2 + ...`, where
///   each monomial `m` is a sorted product of atoms and an atom is a symbol or an opaque
///   floordiv/mod/max/min of canonical operands. Like terms are collected, so `s0*2 + s0` and
///   `s0*3` are the same value. Equality, ordering, hashing and printing work on this form:
///   equal canonical forms print identically and parse back to the same SymInt.
/// - Simplification holds for every integer value of the symbols, except that `x floordiv x`,
///   `x mod x` and division by a monomial that divides every term assume the divisor is nonzero
///   (evaluating a division by zero is an error anyway).
/// - Text: `s0*2 + 1`, `s0*s1 - 4`, `(s0 + 1) floordiv 2`, `s1 mod 8`, `max(s0, 4)`. floordiv and
///   mod bind like `*`; SymInt::parse reads back anything str() prints.
///
/// SymRelation (`s0 >= 2`, `s1 mod 8 == 0`) is the form guards record: what compiled code
/// assumed about the symbols.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ir {

namespace detail {
struct SymPoly;
inline size_t hashCombine(size_t seed, size_t v) {
  return seed ^ (v + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}
} // namespace detail

/// Values of symbols, for SymInt::evaluate.
using SymbolValues = std::map<std::string, int64_t, std::less<>>;

/// A symbolic int64: a constant, or an immutable canonical expression (cheap to copy: the
/// expression is shared).
class SymInt {
public:
  SymInt() = default;
  SymInt(int64_t value) : constant_(value) {} // NOLINT: constants convert implicitly
  SymInt(int value) : constant_(value) {}     // NOLINT

  /// The symbol `name`; throws kiln::Error unless `name` is an identifier that is not a reserved
  /// word of the .kir text (see isValidSymbolName).
  static SymInt symbol(std::string_view name);
  /// Parses the text str() prints; throws DiagnosticError (with the column) on malformed text.
  static SymInt parse(std::string_view text);
  /// Whether `name` can name a symbol: an identifier that the .kir grammar does not reserve.
  static bool isValidSymbolName(std::string_view name);

  bool isConstant() const { return poly_ == nullptr; }
  /// The value when constant, nullopt otherwise.
  std::optional<int64_t> constant() const;
  /// The symbol's name when this is exactly one symbol, empty otherwise.
  std::string_view symbolName() const;

  friend SymInt operator+(const SymInt &a, const SymInt &b);
  friend SymInt operator-(const SymInt &a, const SymInt &b);
  friend SymInt operator*(const SymInt &a, const SymInt &b);
  friend SymInt operator-(const SymInt &a);
  friend SymInt floorDiv(const SymInt &a, const SymInt &b);
  friend SymInt mod(const SymInt &a, const SymInt &b);
  friend SymInt max(const SymInt &a, const SymInt &b);
  friend SymInt min(const SymInt &a, const SymInt &b);
  SymInt &operator+=(const SymInt &b) { return *this = *this + b; }
  SymInt &operator*=(const SymInt &b) { return *this = *this * b; }

  /// Structural equality of canonical forms.
  bool operator==(const SymInt &other) const { return compare(*this, other) == 0; }
  /// A total order on canonical forms (constants first, by value); used to sort terms.
  static int compare(const SymInt &a, const SymInt &b);
  size_t hash() const;

  /// The canonical text, e.g. `s0*2 + 1`.
  std::string str() const;
  /// The value for the given symbol values; throws kiln::Error for a missing symbol, a division
  /// by zero or an overflow.
  int64_t evaluate(const SymbolValues &values) const;
  /// Replaces symbols by expressions and re-canonicalizes.
  SymInt substitute(const std::map<std::string, SymInt, std::less<>> &replacements) const;
  /// Adds the names of the symbols this expression mentions to `out`.
  void collectSymbols(std::set<std::string, std::less<>> &out) const;
  /// Whether a floordiv or mod appears anywhere in it (an index that costs a division).
  bool hasDivision() const;

private:
  friend struct detail::SymPoly;
  explicit SymInt(std::shared_ptr<const detail::SymPoly> poly) : poly_(std::move(poly)) {}
  int64_t constant_ = 0;
  std::shared_ptr<const detail::SymPoly> poly_; ///< null for constants
};

/// One term `coeff * atom` of a SymLinearForm.
struct SymLinearTerm {
  int64_t coeff;
  SymInt atom;
};

/// `constant + sum(coeff * atom)`: what index simplifiers bound and split term by term.
struct SymLinearForm {
  int64_t constant = 0;
  std::vector<SymLinearTerm> terms;
};

/// `e` as a SymLinearForm when each of its terms is one atom (a symbol, or one floordiv, mod, max
/// or min) to the first power times a constant; nullopt for products of atoms and powers.
std::optional<SymLinearForm> linearInAtoms(const SymInt &e);

enum class SymAtomKind : uint8_t { Symbol, FloorDiv, Mod, Max, Min };

/// The kind and operands (none for a symbol) of an atom.
struct SymAtomParts {
  SymAtomKind kind;
  SymInt lhs, rhs;
};

/// `e`'s kind and operands when it is exactly one atom; nullopt otherwise.
std::optional<SymAtomParts> atomParts(const SymInt &e);

/// Python `//`: rounds toward negative infinity.
SymInt floorDiv(const SymInt &a, const SymInt &b);
/// Python `%`: the result has the sign of the divisor.
SymInt mod(const SymInt &a, const SymInt &b);
SymInt max(const SymInt &a, const SymInt &b);
SymInt min(const SymInt &a, const SymInt &b);

/// The comparison of a guard relation.
enum class RelOp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
std::string_view relOpSpelling(RelOp op);

/// A guard-style fact about symbols: `lhs op rhs`.
struct SymRelation {
  SymInt lhs;
  RelOp op = RelOp::Eq;
  SymInt rhs;

  /// `s0 >= 2`, `s1 mod 8 == 0`.
  std::string str() const;
  bool evaluate(const SymbolValues &values) const;
  /// True or false when the relation holds or fails for every symbol value (lhs - rhs is a
  /// constant); nullopt when it depends on the symbols.
  std::optional<bool> staticValue() const;
  /// Parses what str() prints; throws DiagnosticError on malformed text.
  static SymRelation parse(std::string_view text);
  bool operator==(const SymRelation &) const = default;
};

} // namespace kiln::ir

template <> struct std::hash<kiln::ir::SymInt> {
  size_t operator()(const kiln::ir::SymInt &s) const { return s.hash(); }
};

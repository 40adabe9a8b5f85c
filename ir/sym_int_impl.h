#pragma once
// Private to sym_int*.cc and the .kir parser: the canonical sum-of-products form behind SymInt.

#include "ir/sym_int.h"

#include <vector>

namespace kiln::ir {
class Lexer;
}

namespace kiln::ir::detail {

enum class AtomKind : uint8_t { Symbol, FloorDiv, Mod, Max, Min };

/// A factor that is not a polynomial: a symbol, or an operation the polynomial form cannot
/// absorb, over canonical operands (Max/Min operands are sorted since both commute).
struct SymAtom {
  AtomKind kind;
  std::string name; ///< Symbol only
  SymInt lhs, rhs;  ///< the others
  size_t hash;
};
using AtomPtr = std::shared_ptr<const SymAtom>;

struct Factor {
  AtomPtr atom;
  int64_t power;
};
/// A product of atoms sorted by compareAtoms, each atom once with its power.
using Monomial = std::vector<Factor>;

struct Term {
  Monomial mono;
  int64_t coeff; ///< never 0
};

/// `constant + sum(terms)`, terms sorted by monomial and never empty (else it is a constant).
struct SymPoly {
  std::vector<Term> terms;
  int64_t constant = 0;
  size_t hash = 0;

  static const SymPoly *of(const SymInt &s) { return s.poly_.get(); }
  static int64_t constantOf(const SymInt &s) { return s.constant_; }
  /// Builds the canonical SymInt; `terms` must be sorted with nonzero coefficients.
  static SymInt make(std::vector<Term> terms, int64_t constant);
};

int compareAtoms(const SymAtom &a, const SymAtom &b);
int compareMonomials(const Monomial &a, const Monomial &b);
SymInt fromAtom(AtomKind kind, std::string name, SymInt lhs, SymInt rhs);

int64_t checkedAdd(int64_t a, int64_t b);
int64_t checkedMul(int64_t a, int64_t b);
int64_t floorDivConst(int64_t a, int64_t b);
int64_t modConst(int64_t a, int64_t b);

/// Parses a SymInt expression at the lexer's position (used inside .kir types and attributes).
SymInt parseSymIntExpr(Lexer &lex);
/// Parses `expr relop expr` at the lexer's position.
SymRelation parseSymRelation(Lexer &lex);

} // namespace kiln::ir::detail

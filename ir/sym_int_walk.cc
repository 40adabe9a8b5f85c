// The structural walk of a SymInt's canonical form (see sym_int_walk.h for the order it emits).

#include "ir/sym_int_walk.h"

#include "ir/sym_int_impl.h"

#include <limits>
#include <map>

namespace kiln::ir {

using namespace detail;

namespace {

struct AtomLess {
  bool operator()(const SymAtom *a, const SymAtom *b) const { return compareAtoms(*a, *b) < 0; }
};

/// Whether a coefficient or constant is emitted as a subtraction of its magnitude; INT64_MIN has
/// no int64 magnitude, so it is added as itself.
bool subtracted(int64_t c) { return c < 0 && c != std::numeric_limits<int64_t>::min(); }

class Walker {
public:
  explicit Walker(SymIntVisitor &visitor) : v_(visitor) {}

  std::string walk(const SymInt &e) {
    const SymPoly *poly = SymPoly::of(e);
    if (!poly)
      return v_.constant(SymPoly::constantOf(e));
    const std::vector<Term> &terms = poly->terms;
    int64_t c0 = poly->constant;
    size_t first = 0;
    while (first < terms.size() && subtracted(terms[first].coeff))
      ++first;
    // Starting from a positive term (or the constant) avoids the `0 - t` a leading negative
    // term would otherwise cost.
    bool startsWithConstant = first == terms.size();
    std::string sum = startsWithConstant ? v_.constant(c0) : term(terms[first], terms[first].coeff);
    for (size_t i = 0; i < terms.size(); ++i) {
      if (i == first)
        continue;
      int64_t c = terms[i].coeff;
      sum = subtracted(c) ? v_.sub(sum, term(terms[i], -c)) : v_.add(sum, term(terms[i], c));
    }
    if (!startsWithConstant && c0 != 0)
      sum = subtracted(c0) ? v_.sub(sum, v_.constant(-c0)) : v_.add(sum, v_.constant(c0));
    return sum;
  }

private:
  /// `scale * monomial`, the atoms first and the scale last (omitted when 1).
  std::string term(const Term &t, int64_t scale) {
    std::string product;
    for (const Factor &f : t.mono) {
      std::string a = atom(*f.atom);
      for (int64_t p = 0; p < f.power; ++p)
        product = product.empty() ? a : v_.mul(product, a);
    }
    return scale == 1 ? product : v_.mul(product, v_.constant(scale));
  }

  std::string atom(const SymAtom &a) {
    auto it = atoms_.find(&a);
    if (it != atoms_.end())
      return it->second;
    std::string r;
    if (a.kind == AtomKind::Symbol) {
      r = v_.symbol(a.name);
    } else {
      std::string l = walk(a.lhs);
      std::string rhs = walk(a.rhs);
      switch (a.kind) {
      case AtomKind::FloorDiv:
        r = v_.floorDiv(l, rhs);
        break;
      case AtomKind::Mod:
        r = v_.mod(l, rhs);
        break;
      case AtomKind::Max:
        r = v_.max(l, rhs);
        break;
      default:
        r = v_.min(l, rhs);
        break;
      }
    }
    atoms_.emplace(&a, r);
    return r;
  }

  SymIntVisitor &v_;
  /// Atoms already emitted in this walk (equal atoms need not share their storage).
  std::map<const SymAtom *, std::string, AtomLess> atoms_;
};

} // namespace

std::string walkSymInt(const SymInt &e, SymIntVisitor &visitor) { return Walker(visitor).walk(e); }

} // namespace kiln::ir

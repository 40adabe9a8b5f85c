// SymInt algebra: building and combining canonical sum-of-products forms.

#include "ir/lexer.h"
#include "ir/sym_int_impl.h"
#include "runtime/error.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <span>

namespace kiln::ir {

using namespace detail;

namespace detail {

int64_t checkedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    fail(ErrorKind::Value, "symbolic int arithmetic overflows int64: {} + {}", a, b);
  return r;
}

int64_t checkedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    fail(ErrorKind::Value, "symbolic int arithmetic overflows int64: {} * {}", a, b);
  return r;
}

int64_t floorDivConst(int64_t a, int64_t b) {
  KILN_CHECK_KIND(Value, b != 0, "symbolic int floordiv: division by zero ({} floordiv 0)", a);
  KILN_CHECK_KIND(Value, !(a == std::numeric_limits<int64_t>::min() && b == -1),
                  "symbolic int arithmetic overflows int64: {} floordiv -1", a);
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t modConst(int64_t a, int64_t b) {
  KILN_CHECK_KIND(Value, b != 0, "symbolic int mod: division by zero ({} mod 0)", a);
  if (b == -1)
    return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

namespace {
// Natural order for names: s2 before s10.
int compareNames(std::string_view a, std::string_view b) {
  if (a.size() != b.size())
    return a.size() < b.size() ? -1 : 1;
  return a.compare(b) < 0 ? -1 : a == b ? 0 : 1;
}
} // namespace

int compareAtoms(const SymAtom &a, const SymAtom &b) {
  if (&a == &b)
    return 0;
  if (a.kind != b.kind)
    return a.kind < b.kind ? -1 : 1;
  if (a.kind == AtomKind::Symbol)
    return compareNames(a.name, b.name);
  if (int c = SymInt::compare(a.lhs, b.lhs))
    return c;
  return SymInt::compare(a.rhs, b.rhs);
}

int compareMonomials(const Monomial &a, const Monomial &b) {
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (int c = compareAtoms(*a[i].atom, *b[i].atom))
      return c;
    if (a[i].power != b[i].power)
      return a[i].power < b[i].power ? -1 : 1;
  }
  return a.size() == b.size() ? 0 : a.size() < b.size() ? -1 : 1;
}

SymInt SymPoly::make(std::vector<Term> terms, int64_t constant) {
  if (terms.empty())
    return SymInt(constant);
  auto poly = std::make_shared<SymPoly>();
  size_t h = std::hash<int64_t>()(constant);
  for (const Term &t : terms) {
    for (const Factor &f : t.mono)
      h = hashCombine(hashCombine(h, f.atom->hash), static_cast<size_t>(f.power));
    h = hashCombine(h, static_cast<size_t>(t.coeff));
  }
  poly->terms = std::move(terms);
  poly->constant = constant;
  poly->hash = h;
  return SymInt(std::shared_ptr<const SymPoly>(std::move(poly)));
}

SymInt fromAtom(AtomKind kind, std::string name, SymInt lhs, SymInt rhs) {
  size_t h = hashCombine(static_cast<size_t>(kind) + 1, std::hash<std::string>()(name));
  h = hashCombine(hashCombine(h, lhs.hash()), rhs.hash());
  auto atom = std::make_shared<const SymAtom>(
      SymAtom{kind, std::move(name), std::move(lhs), std::move(rhs), h});
  return SymPoly::make({Term{{Factor{atom, 1}}, 1}}, 0);
}

} // namespace detail

namespace {

constexpr size_t kMaxProductTerms = 4096;

struct MonomialLess {
  bool operator()(const Monomial &a, const Monomial &b) const { return compareMonomials(a, b) < 0; }
};

/// Collects like terms while an expression is built.
class PolyBuilder {
public:
  void addConstant(int64_t c) { constant_ = checkedAdd(constant_, c); }
  void addTerm(const Monomial &mono, int64_t coeff) {
    if (mono.empty()) // an exact quotient's `s0*8 / s0*2` leaves a constant
      return addConstant(coeff);
    int64_t &slot = terms_[mono];
    slot = checkedAdd(slot, coeff);
  }
  /// Adds `scale * s`.
  void add(const SymInt &s, int64_t scale) {
    if (const SymPoly *p = SymPoly::of(s)) {
      for (const Term &t : p->terms)
        addTerm(t.mono, checkedMul(t.coeff, scale));
      addConstant(checkedMul(p->constant, scale));
    } else {
      addConstant(checkedMul(SymPoly::constantOf(s), scale));
    }
  }
  SymInt build() const {
    std::vector<Term> terms;
    for (const auto &[mono, coeff] : terms_)
      if (coeff != 0)
        terms.push_back(Term{mono, coeff});
    return SymPoly::make(std::move(terms), constant_);
  }

private:
  std::map<Monomial, int64_t, MonomialLess> terms_;
  int64_t constant_ = 0;
};

Monomial multiplyMonomials(const Monomial &a, const Monomial &b) {
  Monomial out;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    int c = i == a.size() ? 1 : j == b.size() ? -1 : compareAtoms(*a[i].atom, *b[j].atom);
    if (c < 0)
      out.push_back(a[i++]);
    else if (c > 0)
      out.push_back(b[j++]);
    else
      out.push_back(Factor{a[i].atom, checkedAdd(a[i++].power, b[j++].power)});
  }
  return out;
}

/// The terms and constant of `s`, constants having no terms.
std::pair<std::span<const Term>, int64_t> parts(const SymInt &s) {
  if (const SymPoly *p = SymPoly::of(s))
    return {p->terms, p->constant};
  return {{}, SymPoly::constantOf(s)};
}

/// `mono / divisor` when every factor of divisor appears in mono with at least its power.
std::optional<Monomial> divideMonomial(const Monomial &mono, const Monomial &divisor) {
  Monomial out;
  size_t j = 0;
  for (const Factor &f : mono) {
    if (j < divisor.size() && compareAtoms(*f.atom, *divisor[j].atom) == 0) {
      if (f.power < divisor[j].power)
        return std::nullopt;
      if (f.power > divisor[j].power)
        out.push_back(Factor{f.atom, f.power - divisor[j].power});
      ++j;
    } else {
      out.push_back(f);
    }
  }
  if (j != divisor.size())
    return std::nullopt;
  return out;
}

/// `a / b` when b is a single term `k*m` that divides every term of a exactly (a has no constant).
std::optional<SymInt> exactQuotient(const SymInt &a, const SymInt &b) {
  auto [bTerms, bConst] = parts(b);
  auto [aTerms, aConst] = parts(a);
  if (bTerms.size() != 1 || bConst != 0 || aConst != 0 || aTerms.empty())
    return std::nullopt;
  const Term &d = bTerms[0];
  PolyBuilder q;
  for (const Term &t : aTerms) {
    std::optional<Monomial> m = divideMonomial(t.mono, d.mono);
    if (!m || t.coeff % d.coeff != 0)
      return std::nullopt;
    q.addTerm(*m, t.coeff / d.coeff);
  }
  return q.build();
}

/// k when a == k * b for an integer k (b not constant): `(s0*64 + 64) floordiv (s0*8 + 8)` is 8,
/// the -1 of a view that splits a symbolic dim's elements evenly.
std::optional<int64_t> integerMultiple(const SymInt &a, const SymInt &b) {
  auto [aTerms, aConst] = parts(a);
  auto [bTerms, bConst] = parts(b);
  if (aTerms.empty() || bTerms.empty() || aTerms[0].coeff % bTerms[0].coeff != 0)
    return std::nullopt;
  const int64_t k = aTerms[0].coeff / bTerms[0].coeff;
  if (a != b * SymInt(k))
    return std::nullopt;
  return k;
}

/// gcd of `c` and the coefficients and constant of `s`.
int64_t contentGcd(const SymInt &s, int64_t c) {
  auto [terms, constant] = parts(s);
  int64_t g = std::gcd(c, constant);
  for (const Term &t : terms)
    g = std::gcd(g, t.coeff);
  return g;
}

/// Splits a = c*quotient + rest with every coefficient of rest in [0, c), c > 0.
std::pair<SymInt, SymInt> splitByPositive(const SymInt &a, int64_t c) {
  PolyBuilder q, rest;
  auto [terms, constant] = parts(a);
  for (const Term &t : terms) {
    q.addTerm(t.mono, floorDivConst(t.coeff, c));
    rest.addTerm(t.mono, modConst(t.coeff, c));
  }
  q.addConstant(floorDivConst(constant, c));
  rest.addConstant(modConst(constant, c));
  return {q.build(), rest.build()};
}

SymInt divideContent(const SymInt &s, int64_t g) {
  PolyBuilder b;
  auto [terms, constant] = parts(s);
  for (const Term &t : terms)
    b.addTerm(t.mono, t.coeff / g);
  b.addConstant(constant / g);
  return b.build();
}

SymInt floorDivByPositive(const SymInt &a, int64_t c) {
  auto [quotient, rest] = splitByPositive(a, c);
  if (rest.isConstant()) // rest in [0, c): contributes nothing
    return quotient;
  int64_t g = contentGcd(rest, c);
  return quotient + fromAtom(AtomKind::FloorDiv, "", divideContent(rest, g), c / g);
}

SymInt modByPositive(const SymInt &a, int64_t c) {
  SymInt rest = splitByPositive(a, c).second;
  if (rest.isConstant())
    return rest;
  int64_t g = contentGcd(rest, c);
  return SymInt(g) * fromAtom(AtomKind::Mod, "", divideContent(rest, g), c / g);
}

SymInt minMax(AtomKind kind, const SymInt &a, const SymInt &b) {
  bool isMax = kind == AtomKind::Max;
  if (a.isConstant() && b.isConstant())
    return isMax ? std::max(*a.constant(), *b.constant()) : std::min(*a.constant(), *b.constant());
  if (a == b)
    return a;
  if (std::optional<int64_t> d = (a - b).constant())
    return (*d >= 0) == isMax ? a : b;
  // Sorted, with a constant last: `max(s0, 4)` reads better than `max(4, s0)`.
  bool ordered = b.isConstant() || (!a.isConstant() && SymInt::compare(a, b) < 0);
  return fromAtom(kind, "", ordered ? a : b, ordered ? b : a);
}

} // namespace

SymInt SymInt::symbol(std::string_view name) {
  KILN_CHECK_KIND(Value, isValidSymbolName(name),
                  "invalid symbol name '{}': symbols are identifiers that are not .kir keywords",
                  name);
  return fromAtom(AtomKind::Symbol, std::string(name), 0, 0);
}

bool SymInt::isValidSymbolName(std::string_view name) {
  return isIdentifier(name) && !isReservedWord(name);
}

std::optional<int64_t> SymInt::constant() const {
  if (poly_)
    return std::nullopt;
  return constant_;
}

std::string_view SymInt::symbolName() const {
  if (!poly_ || poly_->constant != 0 || poly_->terms.size() != 1)
    return {};
  const Term &t = poly_->terms[0];
  if (t.coeff != 1 || t.mono.size() != 1 || t.mono[0].power != 1 ||
      t.mono[0].atom->kind != AtomKind::Symbol)
    return {};
  return t.mono[0].atom->name;
}

SymInt operator+(const SymInt &a, const SymInt &b) {
  if (a.isConstant() && b.isConstant())
    return checkedAdd(*a.constant(), *b.constant());
  PolyBuilder builder;
  builder.add(a, 1);
  builder.add(b, 1);
  return builder.build();
}

SymInt operator-(const SymInt &a) {
  PolyBuilder builder;
  builder.add(a, -1);
  return builder.build();
}

SymInt operator-(const SymInt &a, const SymInt &b) {
  if (a.isConstant() && b.isConstant())
    return checkedAdd(*a.constant(), checkedMul(*b.constant(), -1));
  PolyBuilder builder;
  builder.add(a, 1);
  builder.add(b, -1);
  return builder.build();
}

SymInt operator*(const SymInt &a, const SymInt &b) {
  if (b.isConstant() || a.isConstant()) {
    const SymInt &scaled = b.isConstant() ? a : b;
    int64_t factor = b.isConstant() ? *b.constant() : *a.constant();
    PolyBuilder builder;
    builder.add(scaled, factor);
    return builder.build();
  }
  PolyBuilder builder;
  auto [aTerms, aConst] = parts(a);
  auto [bTerms, bConst] = parts(b);
  // Expanding products of sums grows fast; refuse what no real shape needs (and hostile text).
  KILN_CHECK_KIND(Value, aTerms.size() * bTerms.size() <= kMaxProductTerms,
                  "symbolic int product too large: ({}) * ({})", a.str(), b.str());
  for (const Term &s : aTerms)
    for (const Term &t : bTerms)
      builder.addTerm(multiplyMonomials(s.mono, t.mono), checkedMul(s.coeff, t.coeff));
  for (const Term &s : aTerms)
    builder.addTerm(s.mono, checkedMul(s.coeff, bConst));
  for (const Term &t : bTerms)
    builder.addTerm(t.mono, checkedMul(t.coeff, aConst));
  builder.addConstant(checkedMul(aConst, bConst));
  return builder.build();
}

SymInt floorDiv(const SymInt &a, const SymInt &b) {
  if (std::optional<int64_t> c = b.constant()) {
    if (a.isConstant())
      return floorDivConst(*a.constant(), *c);
    KILN_CHECK_KIND(Value, *c != 0, "symbolic int floordiv: division by zero ({} floordiv 0)",
                    a.str());
    if (*c < 0) // floor(a / c) == floor(-a / -c)
      return floorDiv(-a, -b);
    return *c == 1 ? a : floorDivByPositive(a, *c);
  }
  if (a == SymInt(0))
    return 0;
  if (a == b)
    return 1;
  if (std::optional<SymInt> q = exactQuotient(a, b))
    return *q;
  if (std::optional<int64_t> k = integerMultiple(a, b))
    return *k;
  return fromAtom(AtomKind::FloorDiv, "", a, b);
}

SymInt mod(const SymInt &a, const SymInt &b) {
  if (std::optional<int64_t> c = b.constant()) {
    if (a.isConstant())
      return modConst(*a.constant(), *c);
    KILN_CHECK_KIND(Value, *c != 0, "symbolic int mod: division by zero ({} mod 0)", a.str());
    if (*c < 0) // Python: a mod c == -((-a) mod -c)
      return -mod(-a, -b);
    return modByPositive(a, *c);
  }
  if (a == SymInt(0) || a == b || exactQuotient(a, b) || integerMultiple(a, b))
    return 0;
  return fromAtom(AtomKind::Mod, "", a, b);
}

SymInt max(const SymInt &a, const SymInt &b) { return minMax(AtomKind::Max, a, b); }
SymInt min(const SymInt &a, const SymInt &b) { return minMax(AtomKind::Min, a, b); }

int SymInt::compare(const SymInt &a, const SymInt &b) {
  if (a.isConstant() || b.isConstant()) {
    if (a.isConstant() != b.isConstant())
      return a.isConstant() ? -1 : 1;
    return a.constant_ < b.constant_ ? -1 : a.constant_ == b.constant_ ? 0 : 1;
  }
  if (a.poly_ == b.poly_)
    return 0;
  const auto &at = a.poly_->terms, &bt = b.poly_->terms;
  for (size_t i = 0; i < at.size() && i < bt.size(); ++i) {
    if (int c = compareMonomials(at[i].mono, bt[i].mono))
      return c;
    if (at[i].coeff != bt[i].coeff)
      return at[i].coeff < bt[i].coeff ? -1 : 1;
  }
  if (at.size() != bt.size())
    return at.size() < bt.size() ? -1 : 1;
  int64_t ac = a.poly_->constant, bc = b.poly_->constant;
  return ac < bc ? -1 : ac == bc ? 0 : 1;
}

size_t SymInt::hash() const { return poly_ ? poly_->hash : std::hash<int64_t>()(constant_); }

namespace {
int64_t evaluateAtom(const SymAtom &atom, const SymbolValues &values) {
  if (atom.kind == AtomKind::Symbol) {
    auto it = values.find(atom.name);
    KILN_CHECK_KIND(Value, it != values.end(), "symbol '{}' has no value", atom.name);
    return it->second;
  }
  int64_t l = atom.lhs.evaluate(values), r = atom.rhs.evaluate(values);
  switch (atom.kind) {
  case AtomKind::FloorDiv:
    return floorDivConst(l, r);
  case AtomKind::Mod:
    return modConst(l, r);
  case AtomKind::Max:
    return std::max(l, r);
  default:
    return std::min(l, r);
  }
}

SymInt substituteAtom(const SymAtom &atom,
                      const std::map<std::string, SymInt, std::less<>> &replacements) {
  if (atom.kind == AtomKind::Symbol) {
    auto it = replacements.find(atom.name);
    return it != replacements.end() ? it->second : SymInt::symbol(atom.name);
  }
  SymInt l = atom.lhs.substitute(replacements), r = atom.rhs.substitute(replacements);
  switch (atom.kind) {
  case AtomKind::FloorDiv:
    return floorDiv(l, r);
  case AtomKind::Mod:
    return mod(l, r);
  case AtomKind::Max:
    return max(l, r);
  default:
    return min(l, r);
  }
}
} // namespace

int64_t SymInt::evaluate(const SymbolValues &values) const {
  if (!poly_)
    return constant_;
  int64_t sum = poly_->constant;
  for (const Term &t : poly_->terms) {
    int64_t product = t.coeff;
    for (const Factor &f : t.mono) {
      int64_t v = evaluateAtom(*f.atom, values);
      for (int64_t p = 0; p < f.power; ++p)
        product = checkedMul(product, v);
    }
    sum = checkedAdd(sum, product);
  }
  return sum;
}

SymInt SymInt::substitute(const std::map<std::string, SymInt, std::less<>> &replacements) const {
  if (!poly_)
    return *this;
  SymInt sum = poly_->constant;
  for (const Term &t : poly_->terms) {
    SymInt product = t.coeff;
    for (const Factor &f : t.mono) {
      SymInt v = substituteAtom(*f.atom, replacements);
      for (int64_t p = 0; p < f.power; ++p)
        product = product * v;
    }
    sum = sum + product;
  }
  return sum;
}

void SymInt::collectSymbols(std::set<std::string, std::less<>> &out) const {
  if (!poly_)
    return;
  for (const Term &t : poly_->terms) {
    for (const Factor &f : t.mono) {
      if (f.atom->kind == AtomKind::Symbol) {
        out.insert(f.atom->name);
      } else {
        f.atom->lhs.collectSymbols(out);
        f.atom->rhs.collectSymbols(out);
      }
    }
  }
}

std::optional<SymLinearForm> linearInAtoms(const SymInt &e) {
  const SymPoly *poly = SymPoly::of(e);
  if (!poly)
    return SymLinearForm{*e.constant(), {}};
  SymLinearForm form{poly->constant, {}};
  for (const Term &t : poly->terms) {
    if (t.mono.size() != 1 || t.mono[0].power != 1)
      return std::nullopt;
    form.terms.push_back({t.coeff, SymPoly::make({Term{t.mono, 1}}, 0)});
  }
  return form;
}

std::optional<SymAtomParts> atomParts(const SymInt &e) {
  const SymPoly *poly = SymPoly::of(e);
  if (!poly || poly->constant != 0 || poly->terms.size() != 1 || poly->terms[0].coeff != 1 ||
      poly->terms[0].mono.size() != 1 || poly->terms[0].mono[0].power != 1)
    return std::nullopt;
  const SymAtom &a = *poly->terms[0].mono[0].atom;
  static_assert(static_cast<int>(SymAtomKind::Min) == static_cast<int>(AtomKind::Min));
  return SymAtomParts{static_cast<SymAtomKind>(a.kind), a.lhs, a.rhs};
}

bool SymInt::hasDivision() const {
  if (!poly_)
    return false;
  for (const Term &t : poly_->terms)
    for (const Factor &f : t.mono)
      if (f.atom->kind == AtomKind::FloorDiv || f.atom->kind == AtomKind::Mod ||
          (f.atom->kind != AtomKind::Symbol &&
           (f.atom->lhs.hasDivision() || f.atom->rhs.hasDivision())))
        return true;
  return false;
}

} // namespace kiln::ir

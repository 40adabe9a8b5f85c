// Index expressions: loop-variable naming, flattening, affine forms and range-aware floordiv/mod.

#include "ir/loop/index.h"

#include "runtime/error.h"

#include <algorithm>
#include <set>

namespace kiln::ir::loop {

std::string loopVarName(size_t k) { return "i" + std::to_string(k); }
std::string reductionVarName(size_t k) { return "r" + std::to_string(k); }

bool isLoopVarName(std::string_view name) {
  if (name.size() < 2 || (name[0] != 'i' && name[0] != 'r'))
    return false;
  for (char c : name.substr(1))
    if (c < '0' || c > '9')
      return false;
  return true;
}

bool mentionsLoopVars(const SymInt &e) {
  if (e.isConstant())
    return false;
  std::set<std::string, std::less<>> symbols;
  e.collectSymbols(symbols);
  return std::any_of(symbols.begin(), symbols.end(),
                     [](const std::string &s) { return isLoopVarName(s); });
}

void checkNoLoopVars(const SymInt &e, std::string_view what) {
  std::set<std::string, std::less<>> symbols;
  e.collectSymbols(symbols);
  for (const std::string &s : symbols)
    KILN_CHECK_KIND(Value, !isLoopVarName(s),
                    "{} ({}) mentions '{}', a loop-variable name: sizes, strides and ranges may "
                    "use size symbols only",
                    what, e.str(), s);
}

VarRanges::VarRanges(std::span<const SymInt> ranges, std::span<const SymInt> reductionRanges) {
  for (size_t k = 0; k < ranges.size(); ++k) {
    extents_.emplace(loopVarName(k), ranges[k]);
    vars_.push_back(SymInt::symbol(loopVarName(k)));
  }
  for (size_t k = 0; k < reductionRanges.size(); ++k) {
    extents_.emplace(reductionVarName(k), reductionRanges[k]);
    vars_.push_back(SymInt::symbol(reductionVarName(k)));
  }
}

const SymInt *VarRanges::extent(std::string_view name) const {
  auto it = extents_.find(name);
  return it == extents_.end() ? nullptr : &it->second;
}

std::string VarRanges::names() const {
  std::string out;
  for (const IndexExpr &v : vars_)
    out += (out.empty() ? "" : ", ") + v.str();
  return out.empty() ? "none" : out;
}

IndexExpr flatIndex(std::span<const IndexExpr> index, std::span<const SymInt> strides) {
  KILN_CHECK_KIND(Index, index.size() == strides.size(),
                  "flat index: {} index expressions for {} strides", index.size(), strides.size());
  IndexExpr flat = 0;
  for (size_t k = 0; k < index.size(); ++k)
    flat += index[k] * strides[k];
  return flat;
}

std::optional<AffineForm> affineForm(const IndexExpr &e, const VarRanges &ranges) {
  std::set<std::string, std::less<>> symbols;
  e.collectSymbols(symbols);
  std::map<std::string, SymInt, std::less<>> zero;
  for (const std::string &s : symbols) {
    if (!isLoopVarName(s))
      continue;
    if (ranges.extent(s) == nullptr)
      return std::nullopt;
    zero.emplace(s, 0);
  }
  AffineForm form{e.substitute(zero), {}};
  SymInt rebuilt = form.base;
  for (const auto &[name, unused] : zero) {
    auto unit = zero;
    unit[name] = 1;
    SymInt coeff = e.substitute(unit) - form.base;
    if (coeff == SymInt(0))
      continue;
    rebuilt += coeff * SymInt::symbol(name);
    form.coeffs.emplace(name, coeff);
  }
  if (!(rebuilt == e))
    return std::nullopt;
  return form;
}

namespace {

/// Bounds of one atom: a loop variable over its range; floordiv, mod, max and min of bounded
/// operands by those bounds (a positive constant divisor); anything without loop variables as
/// itself.
std::optional<IndexBounds> atomBounds(const SymInt &atom, const VarRanges &ranges) {
  if (!mentionsLoopVars(atom))
    return IndexBounds{atom, atom};
  std::optional<SymAtomParts> parts = atomParts(atom);
  if (!parts)
    return std::nullopt;
  if (parts->kind == SymAtomKind::Symbol) {
    const SymInt *extent = ranges.extent(atom.symbolName());
    if (!extent)
      return std::nullopt;
    return IndexBounds{0, *extent - 1};
  }
  std::optional<IndexBounds> l = indexBounds(parts->lhs, ranges);
  if (!l)
    return std::nullopt;
  std::optional<int64_t> c = parts->rhs.constant();
  switch (parts->kind) {
  case SymAtomKind::FloorDiv:
    if (!c || *c <= 0)
      return std::nullopt;
    return IndexBounds{floorDiv(l->lo, *c), floorDiv(l->hi, *c)};
  case SymAtomKind::Mod:
    if (!c || *c <= 0)
      return std::nullopt;
    return IndexBounds{0, *c - 1};
  default: {
    std::optional<IndexBounds> r = indexBounds(parts->rhs, ranges);
    if (!r)
      return std::nullopt;
    if (parts->kind == SymAtomKind::Max)
      return IndexBounds{max(l->lo, r->lo), max(l->hi, r->hi)};
    return IndexBounds{min(l->lo, r->lo), min(l->hi, r->hi)};
  }
  }
}

/// Bounds of `e` term by term over its atoms (floordiv and mod of loop variables included),
/// where the affine form in the loop variables alone does not exist.
std::optional<IndexBounds> linearBounds(const IndexExpr &e, const VarRanges &ranges) {
  std::optional<SymLinearForm> form = linearInAtoms(e);
  if (!form)
    return std::nullopt;
  IndexBounds b{form->constant, form->constant};
  for (const SymLinearTerm &t : form->terms) {
    std::optional<IndexBounds> a = atomBounds(t.atom, ranges);
    if (!a)
      return std::nullopt;
    b.lo += t.coeff > 0 ? a->lo * t.coeff : a->hi * t.coeff;
    b.hi += t.coeff > 0 ? a->hi * t.coeff : a->lo * t.coeff;
  }
  return b;
}

} // namespace

std::optional<IndexBounds> indexBounds(const IndexExpr &e, const VarRanges &ranges) {
  std::optional<AffineForm> form = affineForm(e, ranges);
  if (!form)
    return linearBounds(e, ranges);
  IndexBounds b{form->base, form->base};
  for (const auto &[name, coeff] : form->coeffs) {
    std::optional<int64_t> k = coeff.constant();
    if (!k)
      return std::nullopt;
    SymInt span = coeff * (*ranges.extent(name) - 1);
    if (*k > 0)
      b.hi += span;
    else
      b.lo += span;
  }
  return b;
}

namespace {

/// `a == c*quotient + rest`, where quotient collects the affine terms of a that are exact
/// multiples of c. nullopt when a is not affine in the loop variables.
struct DivSplit {
  SymInt quotient, rest;
};
std::optional<DivSplit> splitMultiples(const IndexExpr &a, const SymInt &c,
                                       const VarRanges &ranges) {
  DivSplit s{0, 0};
  auto take = [&](const SymInt &coeff, const SymInt &var) {
    SymInt q = floorDiv(coeff, c);
    if (q * c == coeff)
      s.quotient += q * var;
    else
      s.rest += coeff * var;
  };
  if (std::optional<AffineForm> form = affineForm(a, ranges)) {
    take(form->base, 1);
    for (const auto &[name, coeff] : form->coeffs)
      take(coeff, SymInt::symbol(name));
    return s;
  }
  // Terms over floordiv/mod atoms (`(i1 floordiv 2)*2048`, a head index repeated by an expand)
  // split the same way: each atom is an integer.
  std::optional<SymLinearForm> form = linearInAtoms(a);
  if (!form)
    return std::nullopt;
  take(form->constant, 1);
  for (const SymLinearTerm &t : form->terms)
    take(t.coeff, t.atom);
  return s;
}

bool provablyNonNegative(const SymInt &e) {
  std::optional<int64_t> v = e.constant();
  return v && *v >= 0;
}

/// The constant m with `rest floordiv c == m` for every value of the loop variables.
std::optional<SymInt> constantQuotient(const SymInt &rest, const SymInt &c,
                                       const VarRanges &ranges) {
  std::optional<IndexBounds> b = indexBounds(rest, ranges);
  if (!b)
    return std::nullopt;
  if (provablyNonNegative(b->lo) && provablyNonNegative(c - 1 - b->hi))
    return SymInt(0);
  if (c.constant() && *c.constant() > 0 && b->lo.constant() && b->hi.constant()) {
    SymInt m = floorDiv(b->lo, c);
    if (floorDiv(b->hi, c) == m)
      return m;
  }
  return std::nullopt;
}

bool isZero(const SymInt &c) { return c.constant() && *c.constant() == 0; }

/// `rest` as `g*x + r` where g divides c, x is one loop variable or atom, and 0 <= r < g for
/// every value of the loop variables: then `rest floordiv c` is `x floordiv (c/g)` and
/// `rest mod c` is `g*(x mod (c/g)) + r` (`(i0*128 + i1) floordiv 8192` with i1 < 128 is
/// `i0 floordiv 64`, the row of a [8, 64, 128] tensor read as [512, 128]).
struct ScaledTerm {
  SymInt x, r;
  int64_t g, k;
};
std::optional<ScaledTerm> scaledTerm(const SymInt &rest, const SymInt &c, const VarRanges &ranges) {
  std::optional<int64_t> cc = c.constant();
  std::optional<SymLinearForm> form = linearInAtoms(rest);
  if (!cc || *cc <= 0 || !form)
    return std::nullopt;
  for (const SymLinearTerm &t : form->terms) {
    if (t.coeff <= 1 || *cc % t.coeff != 0)
      continue;
    SymInt r = rest - t.atom * t.coeff;
    std::optional<IndexBounds> b = indexBounds(r, ranges);
    if (b && provablyNonNegative(b->lo) && provablyNonNegative(SymInt(t.coeff) - 1 - b->hi))
      return ScaledTerm{t.atom, r, t.coeff, *cc / t.coeff};
  }
  return std::nullopt;
}

} // namespace

IndexExpr floorDivInRange(const IndexExpr &a, const SymInt &c, const VarRanges &ranges) {
  if (isZero(c))
    return floorDiv(a, c); // throws the division-by-zero error
  std::optional<DivSplit> s = splitMultiples(a, c, ranges);
  if (!s)
    return floorDiv(a, c);
  if (std::optional<SymInt> m = constantQuotient(s->rest, c, ranges))
    return s->quotient + *m;
  if (std::optional<ScaledTerm> t = scaledTerm(s->rest, c, ranges))
    return s->quotient + floorDivInRange(t->x, t->k, ranges);
  return s->quotient + floorDiv(s->rest, c);
}

IndexExpr modInRange(const IndexExpr &a, const SymInt &c, const VarRanges &ranges) {
  if (isZero(c))
    return mod(a, c);
  std::optional<DivSplit> s = splitMultiples(a, c, ranges);
  if (!s)
    return mod(a, c);
  if (std::optional<SymInt> m = constantQuotient(s->rest, c, ranges))
    return s->rest - *m * c;
  if (std::optional<ScaledTerm> t = scaledTerm(s->rest, c, ranges))
    return modInRange(t->x, t->k, ranges) * t->g + t->r;
  return mod(s->rest, c);
}

IndexExpr recombineDivMod(const IndexExpr &e) {
  std::optional<SymLinearForm> form = linearInAtoms(e);
  if (!form || form->terms.size() < 2)
    return e;
  std::vector<bool> used(form->terms.size(), false);
  SymInt out = form->constant;
  for (size_t a = 0; a < form->terms.size(); ++a) {
    std::optional<SymAtomParts> div = atomParts(form->terms[a].atom);
    std::optional<int64_t> k = div ? div->rhs.constant() : std::nullopt;
    if (used[a] || !div || div->kind != SymAtomKind::FloorDiv || !k || *k <= 0 ||
        form->terms[a].coeff % *k != 0)
      continue;
    const int64_t unit = form->terms[a].coeff / *k;
    for (size_t b = 0; b < form->terms.size(); ++b) {
      std::optional<SymAtomParts> rem = atomParts(form->terms[b].atom);
      if (used[b] || b == a || !rem || rem->kind != SymAtomKind::Mod ||
          form->terms[b].coeff != unit || !(rem->lhs == div->lhs) || !(rem->rhs == div->rhs))
        continue;
      used[a] = used[b] = true; // k*(x floordiv k) + x mod k == x
      out += div->lhs * unit;
      break;
    }
  }
  for (size_t t = 0; t < form->terms.size(); ++t)
    if (!used[t])
      out += form->terms[t].atom * form->terms[t].coeff;
  return out;
}

} // namespace kiln::ir::loop

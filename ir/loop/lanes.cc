// How an index expression moves along one loop variable: its coefficient, or a clamp around a
// unit-stride position (see lanes.h).

#include "ir/loop/lanes.h"

#include "ir/sym_int_walk.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace kiln::ir::loop {

namespace {

/// Rebuilds a SymInt bottom-up through walkSymInt, remembering each max/min atom's operands.
class StructureVisitor final : public SymIntVisitor {
public:
  struct Atom {
    bool isMax;
    SymInt value, a, b;
  };
  std::vector<SymInt> values;
  std::vector<Atom> atoms;

  const SymInt &at(const std::string &id) const { return values.at(std::stoul(id)); }
  std::string constant(int64_t v) override { return push(SymInt(v)); }
  std::string symbol(std::string_view name) override { return push(SymInt::symbol(name)); }
  std::string add(const std::string &a, const std::string &b) override {
    return push(at(a) + at(b));
  }
  std::string sub(const std::string &a, const std::string &b) override {
    return push(at(a) - at(b));
  }
  std::string mul(const std::string &a, const std::string &b) override {
    return push(at(a) * at(b));
  }
  std::string floorDiv(const std::string &a, const std::string &b) override {
    return push(ir::floorDiv(at(a), at(b)));
  }
  std::string mod(const std::string &a, const std::string &b) override {
    return push(ir::mod(at(a), at(b)));
  }
  std::string max(const std::string &a, const std::string &b) override {
    atoms.push_back({true, ir::max(at(a), at(b)), at(a), at(b)});
    return push(atoms.back().value);
  }
  std::string min(const std::string &a, const std::string &b) override {
    atoms.push_back({false, ir::min(at(a), at(b)), at(a), at(b)});
    return push(atoms.back().value);
  }

private:
  std::string push(SymInt v) {
    values.push_back(std::move(v));
    return std::to_string(values.size() - 1);
  }
};

bool mentions(const SymInt &e, const std::string &var) {
  std::set<std::string, std::less<>> symbols;
  e.collectSymbols(symbols);
  return symbols.count(var) > 0;
}

} // namespace

std::optional<ClampedIndex> clampedAlong(const SymInt &e, const std::string &var) {
  StructureVisitor v;
  walkSymInt(e, v);
  // The outer atom of the clamp: max(min(inner, hi), lo) or min(max(inner, lo), hi), in either
  // operand order.
  for (const StructureVisitor::Atom &outer : v.atoms) {
    for (int side = 0; side < 2; ++side) {
      const SymInt &nested = side ? outer.b : outer.a, &bound = side ? outer.a : outer.b;
      if (mentions(bound, var))
        continue;
      auto inner = std::find_if(v.atoms.begin(), v.atoms.end(), [&](const auto &a) {
        return a.value == nested && a.isMax != outer.isMax;
      });
      if (inner == v.atoms.end())
        continue;
      for (int k = 0; k < 2; ++k) {
        const SymInt &x = k ? inner->b : inner->a, &innerBound = k ? inner->a : inner->b;
        std::optional<SymInt> c = laneCoefficient(x, var);
        if (mentions(innerBound, var) || !c || c->constant() != 1)
          continue;
        SymInt rest = e - outer.value;
        if (mentions(rest, var))
          continue;
        ClampedIndex out{x, outer.isMax ? bound : innerBound, outer.isMax ? innerBound : bound,
                         rest};
        // min(max(x, lo), hi) and max(min(x, hi), lo) agree where lo <= hi, which holds for
        // the source ranges the lowerings clamp to.
        return out;
      }
    }
  }
  return std::nullopt;
}

std::optional<SymInt> laneCoefficient(const SymInt &e, const std::string &var) {
  SymInt base = e.substitute({{var, SymInt(0)}});
  SymInt coeff = e.substitute({{var, SymInt(1)}}) - base;
  if (!(base + coeff * SymInt::symbol(var) == e))
    return std::nullopt;
  return coeff;
}

} // namespace kiln::ir::loop

// Index expressions as arith ops on `index`, and the coefficient of a lane variable.
//
// The SymInt's structural walk (ir/sym_int_walk.h) drives one op per operation. Repeated
// subexpressions across index expressions are left to MLIR's CSE and LLVM's loop passes
// (strength reduction, invariant hoisting).

#include "codegen/cpu/emit_impl.h"

#include "ir/sym_int_walk.h"
#include "runtime/error.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

namespace kiln::codegen::cpu::detail {
namespace {

/// Emits each operation of the walk as one arith op on `index` values.
class IndexEmitter final : public ir::SymIntVisitor {
public:
  IndexEmitter(Builder &b, const SymInt &e, const Names &names) : b_(b), e_(e), names_(names) {}

  std::string constant(int64_t value) override { return b_.indexConst(value); }
  std::string symbol(std::string_view name) override {
    auto it = names_.find(name);
    KILN_CHECK(it != names_.end(),
               "cpu emitter: index expression {} uses '{}', which no loop or size argument "
               "defines",
               e_.str(), name);
    return it->second;
  }
  std::string add(const std::string &a, const std::string &b) override {
    return b_.indexOp("arith.addi", a, b);
  }
  std::string sub(const std::string &a, const std::string &b) override {
    return b_.indexOp("arith.subi", a, b);
  }
  std::string mul(const std::string &a, const std::string &b) override {
    return b_.indexOp("arith.muli", a, b);
  }
  std::string floorDiv(const std::string &a, const std::string &b) override {
    return b_.indexOp("arith.floordivsi", a, b);
  }
  /// Python mod from the floor quotient: `a - (a floordiv b) * b`.
  std::string mod(const std::string &a, const std::string &b) override {
    return sub(a, mul(floorDiv(a, b), b));
  }
  std::string max(const std::string &a, const std::string &b) override {
    return b_.indexOp("arith.maxsi", a, b);
  }
  std::string min(const std::string &a, const std::string &b) override {
    return b_.indexOp("arith.minsi", a, b);
  }

private:
  Builder &b_;
  const SymInt &e_;
  const Names &names_;
};

} // namespace

std::string emitIndex(Builder &b, const SymInt &e, const Names &names) {
  IndexEmitter emitter(b, e, names);
  return ir::walkSymInt(e, emitter);
}

namespace {

/// Rebuilds a SymInt bottom-up through walkSymInt, remembering each max/min atom's operands.
class StructureVisitor final : public ir::SymIntVisitor {
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
  ir::walkSymInt(e, v);
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

} // namespace kiln::codegen::cpu::detail

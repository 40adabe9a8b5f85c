// Index expressions as arith ops on `index`.
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

} // namespace kiln::codegen::cpu::detail

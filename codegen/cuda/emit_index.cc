// Index expressions as C expressions on long long, and the alignment terms of a vector access.
//
// The SymInt's structural walk (ir/sym_int_walk.h) drives the text: floordiv/mod become
// kiln::idiv/kiln::imod (Python rounding), max/min kiln::imax/kiln::imin. Parentheses are written
// only where C's precedence needs them.

#include "codegen/cuda/emit_impl.h"

#include "ir/loop/index.h"
#include "ir/sym_int_walk.h"
#include "runtime/error.h"

#include <limits>
#include <unordered_map>

namespace kiln::codegen::cuda::detail {
namespace {

/// Writes each operation of the walk as C text. The walk hands back only strings, so the
/// loosest operator at the top level of each text it returned is remembered here, to
/// parenthesize an operand only when the operator around it binds tighter.
class IndexWriter final : public ir::SymIntVisitor {
public:
  IndexWriter(const SymInt &e, const Names &names) : e_(e), names_(names) {}

  std::string constant(int64_t value) override {
    if (value == std::numeric_limits<int64_t>::min()) // its magnitude is no long long literal
      return "(-9223372036854775807LL - 1)";
    return made(std::to_string(value), value < 0 ? Product : Atom);
  }
  std::string symbol(std::string_view name) override {
    auto it = names_.find(name);
    KILN_CHECK(it != names_.end(),
               "cuda emitter: index expression {} uses '{}', which no loop or size argument "
               "defines",
               e_.str(), name);
    return it->second;
  }
  // `a - (b + c)` keeps its parentheses; `a + b * c` needs none.
  std::string add(const std::string &a, const std::string &b) override {
    return made(as(a, Sum) + " + " + as(b, Sum), Sum);
  }
  std::string sub(const std::string &a, const std::string &b) override {
    return made(as(a, Sum) + " - " + as(b, Product), Sum);
  }
  std::string mul(const std::string &a, const std::string &b) override {
    return made(as(a, Product) + " * " + as(b, Atom), Product);
  }
  std::string floorDiv(const std::string &a, const std::string &b) override {
    return call("idiv", a, b);
  }
  std::string mod(const std::string &a, const std::string &b) override {
    return call("imod", a, b);
  }
  std::string max(const std::string &a, const std::string &b) override {
    return call("imax", a, b);
  }
  std::string min(const std::string &a, const std::string &b) override {
    return call("imin", a, b);
  }

private:
  /// The loosest operator at a text's top level; symbols, calls and literals are atoms.
  enum Level { Atom, Product, Sum };

  std::string made(std::string text, Level level) {
    levels_[text] = level;
    return text;
  }
  std::string as(const std::string &text, Level context) const {
    auto it = levels_.find(text);
    bool wrap = it != levels_.end() && it->second > context;
    return wrap ? "(" + text + ")" : text;
  }
  std::string call(std::string_view fn, const std::string &a, const std::string &b) {
    return fmt::format("kiln::{}({}, {})", fn, a, b);
  }

  const SymInt &e_;
  const Names &names_;
  std::unordered_map<std::string, Level> levels_;
};

} // namespace

std::string indexExpr(const SymInt &e, const Names &names) {
  IndexWriter writer(e, names);
  std::string text = ir::walkSymInt(e, writer);
  // A bare negative literal is parenthesized so callers can place it anywhere.
  return e.isConstant() && text.front() == '-' ? "(" + text + ")" : text;
}

std::optional<std::vector<SymInt>> alignmentTerms(const SymInt &offset, const std::string &laneVar,
                                                  const ir::loop::VarRanges &ranges) {
  std::optional<ir::loop::AffineForm> form = ir::loop::affineForm(offset, ranges);
  if (!form)
    return std::nullopt;
  auto lane = form->coeffs.find(laneVar);
  if (lane == form->coeffs.end() || lane->second.constant() != 1)
    return std::nullopt;
  std::vector<SymInt> terms{form->base};
  for (const auto &[var, coeff] : form->coeffs)
    if (var != laneVar)
      terms.push_back(coeff);
  return terms;
}

} // namespace kiln::codegen::cuda::detail

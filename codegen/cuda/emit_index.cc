// Index expressions as C expressions on long long, and the alignment terms of a vector access.
//
// SymInt has no public view of its terms, so (like codegen/cpu/emit_index.cc) the emitter reads
// its canonical text — `+ - *`, `floordiv`, `mod`, `max(a, b)`, `min(a, b)`, parentheses,
// integers, symbol names — and writes C: `floordiv`/`mod` become kiln::idiv/kiln::imod (Python
// rounding), max/min kiln::imax/kiln::imin. Parentheses are written only where C needs them.

#include "codegen/cuda/emit_impl.h"

#include "ir/loop/index.h"
#include "runtime/error.h"

#include <cctype>

namespace kiln::codegen::cuda::detail {
namespace {

/// A C expression and the loosest operator at its top level.
struct Piece {
  std::string text;
  enum Level { Atom, Product, Sum } level = Atom;
  std::string as(Level context) const { return level > context ? "(" + text + ")" : text; }
};

class IndexTranslator {
public:
  IndexTranslator(std::string_view text, const Names &names) : text_(text), names_(names) {}

  std::string translate() {
    Piece p = expr();
    skipSpace();
    check(pos_ == text_.size(), "trailing text");
    return p.text;
  }

private:
  Piece expr() {
    Piece v = term();
    while (true) {
      skipSpace();
      const char *op = consume("+") ? " + " : consume("-") ? " - " : nullptr;
      if (!op)
        return v;
      Piece rhs = term();
      // `a - (b + c)` keeps its parentheses; `a + b*c` needs none.
      v = {v.as(Piece::Sum) + op + rhs.as(op[1] == '-' ? Piece::Product : Piece::Sum), Piece::Sum};
    }
  }

  Piece term() {
    Piece v = unary();
    while (true) {
      skipSpace();
      if (consume("*")) {
        Piece rhs = unary();
        v = {v.as(Piece::Product) + " * " + rhs.as(Piece::Atom), Piece::Product};
      } else if (consumeWord("floordiv")) {
        v = {fmt::format("kiln::idiv({}, {})", v.text, unary().text), Piece::Atom};
      } else if (consumeWord("mod")) {
        v = {fmt::format("kiln::imod({}, {})", v.text, unary().text), Piece::Atom};
      } else {
        return v;
      }
    }
  }

  Piece unary() {
    skipSpace();
    if (consume("-"))
      return {"-" + unary().as(Piece::Atom), Piece::Product};
    return primary();
  }

  Piece primary() {
    skipSpace();
    check(pos_ < text_.size(), "unexpected end");
    if (std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      size_t start = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])))
        ++pos_;
      return {std::string(text_.substr(start, pos_ - start)), Piece::Atom};
    }
    if (consume("(")) {
      Piece v = expr();
      skipSpace();
      check(consume(")"), "expected ')'");
      return v;
    }
    std::string_view word = identifier();
    check(!word.empty(), "expected an operand");
    if (word == "max" || word == "min") {
      skipSpace();
      check(consume("("), "expected '('");
      Piece a = expr();
      skipSpace();
      check(consume(","), "expected ','");
      Piece b = expr();
      skipSpace();
      check(consume(")"), "expected ')'");
      return {fmt::format("kiln::i{}({}, {})", word, a.text, b.text), Piece::Atom};
    }
    auto it = names_.find(word);
    KILN_CHECK(it != names_.end(),
               "cuda emitter: index expression {} uses '{}', which no loop or size argument "
               "defines",
               text_, word);
    return {it->second, Piece::Atom};
  }

  std::string_view identifier() {
    size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_'))
      ++pos_;
    return text_.substr(start, pos_ - start);
  }

  void skipSpace() {
    while (pos_ < text_.size() && text_[pos_] == ' ')
      ++pos_;
  }

  bool consume(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s)
      return false;
    pos_ += s.size();
    return true;
  }

  bool consumeWord(std::string_view w) {
    size_t end = pos_ + w.size();
    if (text_.substr(pos_, w.size()) != w ||
        (end < text_.size() &&
         (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_')))
      return false;
    pos_ = end;
    return true;
  }

  void check(bool ok, std::string_view what) {
    KILN_CHECK(ok, "cuda emitter: cannot read index expression '{}' at {}: {}", text_, pos_, what);
  }

  std::string_view text_;
  const Names &names_;
  size_t pos_ = 0;
};

} // namespace

std::string indexExpr(const SymInt &e, const Names &names) {
  if (std::optional<int64_t> c = e.constant())
    return *c < 0 ? fmt::format("({})", *c) : std::to_string(*c);
  std::string text = e.str();
  return IndexTranslator(text, names).translate();
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

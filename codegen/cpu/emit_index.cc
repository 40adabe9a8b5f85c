// Index expressions as arith ops on `index`, and the coefficient of a lane variable.
//
// SymInt has no public view of its terms, so the emitter reads its canonical text (the grammar
// of ir/sym_int_text.cc: + - * floordiv mod, max(a, b), min(a, b), parentheses, integers and
// symbol names) and emits one op per operator. Repeated subexpressions are left to MLIR's CSE
// and LLVM's loop passes (strength reduction, invariant hoisting).

#include "codegen/cpu/emit_impl.h"

#include "runtime/error.h"

#include <cctype>

namespace kiln::codegen::cpu::detail {
namespace {

class IndexParser {
public:
  IndexParser(Builder &b, std::string_view text, const Names &names)
      : b_(b), text_(text), names_(names) {}

  std::string parse() {
    std::string v = expr();
    skipSpace();
    check(pos_ == text_.size(), "trailing text");
    return v;
  }

private:
  std::string expr() {
    std::string v = term();
    while (true) {
      skipSpace();
      if (consume("+"))
        v = b_.indexOp("arith.addi", v, term());
      else if (consume("-"))
        v = b_.indexOp("arith.subi", v, term());
      else
        return v;
    }
  }

  std::string term() {
    std::string v = unary();
    while (true) {
      skipSpace();
      if (consume("*")) {
        v = b_.indexOp("arith.muli", v, unary());
      } else if (consumeWord("floordiv")) {
        v = b_.indexOp("arith.floordivsi", v, unary());
      } else if (consumeWord("mod")) { // Python mod: a - (a floordiv b) * b
        std::string d = unary();
        std::string q = b_.indexOp("arith.floordivsi", v, d);
        v = b_.indexOp("arith.subi", v, b_.indexOp("arith.muli", q, d));
      } else {
        return v;
      }
    }
  }

  std::string unary() {
    skipSpace();
    if (consume("-")) {
      skipSpace();
      if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])))
        return b_.indexConst(-number());
      return b_.indexOp("arith.subi", b_.indexConst(0), unary());
    }
    return primary();
  }

  std::string primary() {
    skipSpace();
    check(pos_ < text_.size(), "unexpected end");
    char c = text_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c)))
      return b_.indexConst(number());
    if (consume("(")) {
      std::string v = expr();
      skipSpace();
      check(consume(")"), "expected ')'");
      return v;
    }
    std::string_view word = identifier();
    check(!word.empty(), "expected an operand");
    if (word == "max" || word == "min") {
      skipSpace();
      check(consume("("), "expected '('");
      std::string a = expr();
      skipSpace();
      check(consume(","), "expected ','");
      std::string bv = expr();
      skipSpace();
      check(consume(")"), "expected ')'");
      return b_.indexOp(word == "max" ? "arith.maxsi" : "arith.minsi", a, bv);
    }
    auto it = names_.find(word);
    KILN_CHECK(it != names_.end(),
               "cpu emitter: index expression {} uses '{}', which no loop or "
               "size argument defines",
               text_, word);
    return it->second;
  }

  int64_t number() {
    size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])))
      ++pos_;
    return std::stoll(std::string(text_.substr(start, pos_ - start)));
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
        (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])))))
      return false;
    pos_ = end;
    return true;
  }

  void check(bool ok, std::string_view what) {
    KILN_CHECK(ok, "cpu emitter: cannot read index expression '{}' at {}: {}", text_, pos_, what);
  }

  Builder &b_;
  std::string_view text_;
  const Names &names_;
  size_t pos_ = 0;
};

} // namespace

std::string emitIndex(Builder &b, const SymInt &e, const Names &names) {
  if (std::optional<int64_t> c = e.constant())
    return b.indexConst(*c);
  if (std::string_view s = e.symbolName(); !s.empty()) {
    auto it = names.find(s);
    KILN_CHECK(it != names.end(), "cpu emitter: '{}' is not defined here", s);
    return it->second;
  }
  std::string text = e.str();
  return IndexParser(b, text, names).parse();
}

std::optional<SymInt> laneCoefficient(const SymInt &e, const std::string &var) {
  SymInt base = e.substitute({{var, SymInt(0)}});
  SymInt coeff = e.substitute({{var, SymInt(1)}}) - base;
  if (!(base + coeff * SymInt::symbol(var) == e))
    return std::nullopt;
  return coeff;
}

} // namespace kiln::codegen::cpu::detail

// SymInt and SymRelation text: printing the canonical form and parsing it back.

#include "ir/lexer.h"
#include "ir/sym_int_impl.h"

#include <fmt/format.h>

namespace kiln::ir {

using namespace detail;

namespace {

constexpr int kMaxNesting = 200;

bool isDivAtom(const SymAtom &a) { return a.kind == AtomKind::FloorDiv || a.kind == AtomKind::Mod; }

// An operand of floordiv/mod prints bare only when it cannot split the infix expression.
std::string divOperand(const SymInt &s) {
  if (std::optional<int64_t> c = s.constant())
    return *c >= 0 ? std::to_string(*c) : fmt::format("({})", *c);
  if (!s.symbolName().empty())
    return std::string(s.symbolName());
  return "(" + s.str() + ")";
}

std::string atomStr(const SymAtom &a) {
  switch (a.kind) {
  case AtomKind::Symbol:
    return a.name;
  case AtomKind::FloorDiv:
    return divOperand(a.lhs) + " floordiv " + divOperand(a.rhs);
  case AtomKind::Mod:
    return divOperand(a.lhs) + " mod " + divOperand(a.rhs);
  case AtomKind::Max:
    return "max(" + a.lhs.str() + ", " + a.rhs.str() + ")";
  case AtomKind::Min:
    return "min(" + a.lhs.str() + ", " + a.rhs.str() + ")";
  }
  return "?";
}

// `bare`: the term is exactly one floordiv/mod atom that no operator around it can capture.
std::string monomialStr(const Monomial &mono, bool bare) {
  std::string out;
  for (const Factor &f : mono) {
    std::string s = atomStr(*f.atom);
    if (isDivAtom(*f.atom) && !bare)
      s = "(" + s + ")";
    for (int64_t p = 0; p < f.power; ++p)
      out += (out.empty() ? "" : "*") + s;
  }
  return out;
}

uint64_t magnitude(int64_t v) { return v < 0 ? 0 - static_cast<uint64_t>(v) : v; }

SymInt parseExpr(Lexer &lex, int depth);

SymInt parsePrimary(Lexer &lex, int depth) {
  const Token &tok = lex.peek();
  if (tok.kind == Tok::Int)
    return lex.intValue(lex.next(), false);
  if (tok.kind == Tok::LParen) {
    lex.next();
    SymInt v = parseExpr(lex, depth + 1);
    lex.expect(Tok::RParen, "to close '('");
    return v;
  }
  if (tok.kind == Tok::Ident && (tok.text == "max" || tok.text == "min")) {
    bool isMax = lex.next().text == "max";
    lex.expect(Tok::LParen, isMax ? "after 'max'" : "after 'min'");
    SymInt a = parseExpr(lex, depth + 1);
    lex.expect(Tok::Comma, "between the two operands");
    SymInt b = parseExpr(lex, depth + 1);
    lex.expect(Tok::RParen, "after the second operand");
    return isMax ? max(a, b) : min(a, b);
  }
  if (tok.kind == Tok::Ident && SymInt::isValidSymbolName(tok.text))
    return SymInt::symbol(lex.next().text);
  lex.errorExpected("a symbolic integer (a number, a symbol like 's0', or '(')", tok);
}

SymInt parseUnary(Lexer &lex, int depth) {
  if (depth > kMaxNesting)
    lex.errorAt(lex.peek().pos, "symbolic int expression nested too deeply");
  TextPos minusPos = lex.peek().pos;
  if (!lex.consumeIf(Tok::Minus))
    return parsePrimary(lex, depth);
  if (lex.peek().kind == Tok::Int) // keeps INT64_MIN representable
    return lex.intValue(lex.next(), true);
  SymInt operand = parseUnary(lex, depth + 1);
  try {
    return -operand;
  } catch (const Error &e) { // -(INT64_MIN) overflows
    lex.errorAt(minusPos, e.what());
  }
}

// Arithmetic errors (overflow, division by zero) get the operator's position.
template <typename Fn> SymInt atPos(Lexer &lex, TextPos pos, Fn &&fn) {
  try {
    return fn();
  } catch (const DiagnosticError &) {
    throw;
  } catch (const Error &e) {
    lex.errorAt(pos, e.what());
  }
}

SymInt parseTerm(Lexer &lex, int depth) {
  SymInt v = parseUnary(lex, depth);
  while (true) {
    const Token &tok = lex.peek();
    TextPos pos = tok.pos;
    if (tok.kind == Tok::Star) {
      lex.next();
      SymInt r = parseUnary(lex, depth);
      v = atPos(lex, pos, [&] { return v * r; });
    } else if (tok.kind == Tok::Ident && (tok.text == "floordiv" || tok.text == "mod")) {
      bool isDiv = lex.next().text == "floordiv";
      SymInt r = parseUnary(lex, depth);
      v = atPos(lex, pos, [&] { return isDiv ? floorDiv(v, r) : mod(v, r); });
    } else {
      return v;
    }
  }
}

SymInt parseExpr(Lexer &lex, int depth) {
  SymInt v = parseTerm(lex, depth);
  while (true) {
    TextPos pos = lex.peek().pos;
    if (lex.consumeIf(Tok::Plus)) {
      SymInt r = parseTerm(lex, depth);
      v = atPos(lex, pos, [&] { return v + r; });
    } else if (lex.consumeIf(Tok::Minus)) {
      SymInt r = parseTerm(lex, depth);
      v = atPos(lex, pos, [&] { return v - r; });
    } else {
      return v;
    }
  }
}

std::optional<RelOp> relOpOf(Tok kind) {
  switch (kind) {
  case Tok::EqEq:
    return RelOp::Eq;
  case Tok::NotEq:
    return RelOp::Ne;
  case Tok::Less:
    return RelOp::Lt;
  case Tok::LessEq:
    return RelOp::Le;
  case Tok::Greater:
    return RelOp::Gt;
  case Tok::GreaterEq:
    return RelOp::Ge;
  default:
    return std::nullopt;
  }
}

bool holds(RelOp op, int64_t l, int64_t r) {
  switch (op) {
  case RelOp::Eq:
    return l == r;
  case RelOp::Ne:
    return l != r;
  case RelOp::Lt:
    return l < r;
  case RelOp::Le:
    return l <= r;
  case RelOp::Gt:
    return l > r;
  case RelOp::Ge:
    return l >= r;
  }
  return false;
}

} // namespace

namespace detail {
SymInt parseSymIntExpr(Lexer &lex) { return parseExpr(lex, 0); }

SymRelation parseSymRelation(Lexer &lex) {
  SymInt lhs = parseExpr(lex, 0);
  std::optional<RelOp> op = relOpOf(lex.peek().kind);
  if (!op)
    lex.errorExpected("a comparison ('==', '!=', '<', '<=', '>' or '>=')", lex.peek());
  lex.next();
  return SymRelation{lhs, *op, parseExpr(lex, 0)};
}
} // namespace detail

std::string SymInt::str() const {
  if (!poly_)
    return std::to_string(constant_);
  std::string out;
  bool first = true;
  for (const Term &t : poly_->terms) {
    uint64_t mag = magnitude(t.coeff);
    bool bare = mag == 1 && t.mono.size() == 1 && t.mono[0].power == 1 && !(first && t.coeff < 0);
    std::string body = monomialStr(t.mono, bare);
    if (mag != 1)
      body += "*" + std::to_string(mag);
    out += (first ? (t.coeff < 0 ? "-" : "") : (t.coeff < 0 ? " - " : " + ")) + body;
    first = false;
  }
  if (poly_->constant != 0)
    out += (poly_->constant < 0 ? " - " : " + ") + std::to_string(magnitude(poly_->constant));
  return out;
}

SymInt SymInt::parse(std::string_view text) {
  Lexer lex(text, "");
  SymInt v = parseExpr(lex, 0);
  lex.expect(Tok::Eof, "after the expression");
  return v;
}

std::string_view relOpSpelling(RelOp op) {
  static constexpr std::string_view kSpellings[] = {"==", "!=", "<", "<=", ">", ">="};
  return kSpellings[static_cast<int>(op)];
}

std::string SymRelation::str() const {
  return lhs.str() + " " + std::string(relOpSpelling(op)) + " " + rhs.str();
}

bool SymRelation::evaluate(const SymbolValues &values) const {
  return holds(op, lhs.evaluate(values), rhs.evaluate(values));
}

std::optional<bool> SymRelation::staticValue() const {
  std::optional<int64_t> d = (lhs - rhs).constant();
  if (!d)
    return std::nullopt;
  return holds(op, *d, 0);
}

SymRelation SymRelation::parse(std::string_view text) {
  Lexer lex(text, "");
  SymRelation r = parseSymRelation(lex);
  lex.expect(Tok::Eof, "after the relation");
  return r;
}

} // namespace kiln::ir

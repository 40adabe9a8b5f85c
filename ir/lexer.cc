#include "ir/lexer.h"

#include "ir/tensor_meta.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace kiln::ir {

namespace {
bool isIdentStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool isIdentChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

constexpr std::array kReservedWords = {
    "graph", "return",  "loc", "true", "false", "inf",      "nan", "int", "float",
    "bool",  "strided", "on",  "cpu",  "cuda",  "floordiv", "mod", "max", "min",
};
} // namespace

std::string_view tokDescription(Tok kind) {
  switch (kind) {
  case Tok::Eof:
    return "end of input";
  case Tok::Ident:
    return "an identifier";
  case Tok::ValueId:
    return "a value name like '%x'";
  case Tok::GraphId:
    return "a graph name like '@forward'";
  case Tok::Int:
    return "an integer";
  case Tok::Float:
    return "a float";
  case Tok::String:
    return "a string";
  case Tok::LParen:
    return "'('";
  case Tok::RParen:
    return "')'";
  case Tok::LBrace:
    return "'{'";
  case Tok::RBrace:
    return "'}'";
  case Tok::LBracket:
    return "'['";
  case Tok::RBracket:
    return "']'";
  case Tok::Comma:
    return "','";
  case Tok::Colon:
    return "':'";
  case Tok::Assign:
    return "'='";
  case Tok::Plus:
    return "'+'";
  case Tok::Minus:
    return "'-'";
  case Tok::Star:
    return "'*'";
  case Tok::EqEq:
    return "'=='";
  case Tok::NotEq:
    return "'!='";
  case Tok::Less:
    return "'<'";
  case Tok::LessEq:
    return "'<='";
  case Tok::Greater:
    return "'>'";
  case Tok::GreaterEq:
    return "'>='";
  }
  return "a token";
}

bool isReservedWord(std::string_view word) {
  for (std::string_view w : kReservedWords)
    if (w == word)
      return true;
  return dtypeFromShortName(word).has_value();
}

bool isIdentifier(std::string_view s) {
  if (s.empty() || !isIdentStart(s[0]))
    return false;
  for (char c : s)
    if (!isIdentChar(c))
      return false;
  return true;
}

Lexer::Lexer(std::string_view text, std::string buffer, int firstLine)
    : text_(text), buffer_(std::move(buffer)), line_(firstLine) {}

char Lexer::cur(size_t ahead) const {
  return offset_ + ahead < text_.size() ? text_[offset_ + ahead] : '\0';
}

void Lexer::advance() {
  if (text_[offset_] == '\n') {
    ++line_;
    col_ = 1;
  } else {
    ++col_;
  }
  ++offset_;
}

void Lexer::skipSpaceAndComments() {
  while (offset_ < text_.size()) {
    char c = cur();
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      advance();
    } else if (c == '/' && cur(1) == '/') {
      while (offset_ < text_.size() && cur() != '\n')
        advance();
    } else {
      return;
    }
  }
}

const Token &Lexer::peek(int ahead) {
  while (static_cast<int>(lookahead_.size()) <= ahead)
    lookahead_.push_back(lex());
  return lookahead_[ahead];
}

Token Lexer::next() {
  peek();
  Token tok = std::move(lookahead_.front());
  lookahead_.pop_front();
  return tok;
}

bool Lexer::consumeIf(Tok kind) {
  if (peek().kind != kind)
    return false;
  next();
  return true;
}

bool Lexer::consumeIfWord(std::string_view word) {
  if (peek().kind != Tok::Ident || peek().text != word)
    return false;
  next();
  return true;
}

Token Lexer::expect(Tok kind, std::string_view context) {
  if (peek().kind != kind)
    errorExpected(std::string(tokDescription(kind)) + " " + std::string(context), peek());
  return next();
}

void Lexer::expectWord(std::string_view word, std::string_view context) {
  if (!consumeIfWord(word))
    errorExpected("'" + std::string(word) + "' " + std::string(context), peek());
}

void Lexer::errorAt(TextPos pos, std::string message) const {
  throw DiagnosticError(Diagnostic{std::move(message), buffer_, pos});
}

void Lexer::errorExpected(std::string_view what, const Token &got) const {
  errorAt(got.pos, "expected " + std::string(what) + ", got " + describe(got));
}

std::string Lexer::describe(const Token &tok) {
  if (tok.kind == Tok::Eof)
    return "end of input";
  std::string_view text = tok.text;
  std::string prefix = tok.kind == Tok::ValueId ? "%" : tok.kind == Tok::GraphId ? "@" : "";
  if (text.size() > 32)
    return "'" + prefix + std::string(text.substr(0, 32)) + "...'";
  return "'" + prefix + std::string(text) + "'";
}

int64_t Lexer::intValue(const Token &tok, bool negative) const {
  uint64_t magnitude = 0;
  auto [ptr, ec] =
      std::from_chars(tok.text.data(), tok.text.data() + tok.text.size(), magnitude, 10);
  uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + (negative ? 1 : 0);
  if (ec != std::errc() || ptr != tok.text.data() + tok.text.size() || magnitude > limit)
    errorAt(tok.pos, "integer literal " + describe(tok) + " is out of the int64 range");
  return negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
}

double Lexer::floatValue(const Token &tok, bool negative) const {
  double value = 0;
  auto [ptr, ec] = std::from_chars(tok.text.data(), tok.text.data() + tok.text.size(), value);
  if (ec != std::errc() || ptr != tok.text.data() + tok.text.size())
    errorAt(tok.pos, "float literal " + describe(tok) + " is out of the double range");
  return negative ? -value : value;
}

Token Lexer::lex() {
  skipSpaceAndComments();
  TextPos pos{line_, col_};
  size_t start = offset_;
  if (offset_ >= text_.size())
    return Token{Tok::Eof, {}, pos, {}};
  char c = cur();
  if (isIdentStart(c)) {
    while (isIdentChar(cur()))
      advance();
    return Token{Tok::Ident, text_.substr(start, offset_ - start), pos, {}};
  }
  if (isDigit(c))
    return lexNumber(pos, start);
  if (c == '"')
    return lexString(pos);
  if (c == '%' || c == '@')
    return lexSigil(c == '%' ? Tok::ValueId : Tok::GraphId, pos);
  auto single = [&](Tok kind, size_t len) {
    for (size_t i = 0; i < len; ++i)
      advance();
    return Token{kind, text_.substr(start, len), pos, {}};
  };
  char n = cur(1);
  switch (c) {
  case '(':
    return single(Tok::LParen, 1);
  case ')':
    return single(Tok::RParen, 1);
  case '{':
    return single(Tok::LBrace, 1);
  case '}':
    return single(Tok::RBrace, 1);
  case '[':
    return single(Tok::LBracket, 1);
  case ']':
    return single(Tok::RBracket, 1);
  case ',':
    return single(Tok::Comma, 1);
  case ':':
    return single(Tok::Colon, 1);
  case '+':
    return single(Tok::Plus, 1);
  case '-':
    return single(Tok::Minus, 1);
  case '*':
    return single(Tok::Star, 1);
  case '=':
    return n == '=' ? single(Tok::EqEq, 2) : single(Tok::Assign, 1);
  case '<':
    return n == '=' ? single(Tok::LessEq, 2) : single(Tok::Less, 1);
  case '>':
    return n == '=' ? single(Tok::GreaterEq, 2) : single(Tok::Greater, 1);
  case '!':
    if (n == '=')
      return single(Tok::NotEq, 2);
    break;
  default:
    break;
  }
  unsigned char uc = static_cast<unsigned char>(c);
  errorAt(pos, std::isprint(uc) ? fmt::format("unexpected character '{}'", c)
                                : fmt::format("unexpected byte 0x{:02x}", uc));
}

Token Lexer::lexNumber(TextPos pos, size_t start) {
  bool isFloat = false;
  while (isDigit(cur()))
    advance();
  if (cur() == '.' && isDigit(cur(1))) {
    isFloat = true;
    advance();
    while (isDigit(cur()))
      advance();
  }
  if ((cur() == 'e' || cur() == 'E') &&
      (isDigit(cur(1)) || ((cur(1) == '+' || cur(1) == '-') && isDigit(cur(2))))) {
    isFloat = true;
    advance();
    if (cur() == '+' || cur() == '-')
      advance();
    while (isDigit(cur()))
      advance();
  }
  if (isIdentChar(cur()) || cur() == '.')
    errorAt(pos, fmt::format("malformed number '{}'", text_.substr(start, offset_ - start + 1)));
  return Token{isFloat ? Tok::Float : Tok::Int, text_.substr(start, offset_ - start), pos, {}};
}

Token Lexer::lexString(TextPos pos) {
  size_t start = offset_;
  advance(); // opening quote
  std::string value;
  while (true) {
    char c = cur();
    if (offset_ >= text_.size() || c == '\n')
      errorAt(pos, "unterminated string literal");
    if (c == '"')
      break;
    if (static_cast<unsigned char>(c) < 0x20)
      errorAt({line_, col_}, "control character in string literal (write it as \\xHH)");
    if (c != '\\') {
      value += c;
      advance();
      continue;
    }
    TextPos escPos{line_, col_};
    advance();
    char e = cur();
    if (e == '\\' || e == '"') {
      value += e;
    } else if (e == 'n') {
      value += '\n';
    } else if (e == 't') {
      value += '\t';
    } else if (e == 'x' && std::isxdigit(static_cast<unsigned char>(cur(1))) &&
               std::isxdigit(static_cast<unsigned char>(cur(2)))) {
      value += static_cast<char>(std::stoi(std::string(text_.substr(offset_ + 1, 2)), nullptr, 16));
      advance();
      advance();
    } else {
      errorAt(escPos,
              "unknown escape sequence in string literal (use \\\\, \\\", \\n, \\t or \\xHH)");
    }
    advance();
  }
  advance(); // closing quote
  return Token{Tok::String, text_.substr(start, offset_ - start), pos, std::move(value)};
}

Token Lexer::lexSigil(Tok kind, TextPos pos) {
  char sigil = cur();
  advance();
  size_t start = offset_;
  while (isIdentChar(cur()))
    advance();
  if (offset_ == start)
    errorAt(pos, fmt::format("expected a name after '{}'", sigil));
  return Token{kind, text_.substr(start, offset_ - start), pos, {}};
}

} // namespace kiln::ir

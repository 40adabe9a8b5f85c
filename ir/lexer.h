#pragma once
/// Lexer: splits .kir text into tokens for the graph parser and the SymInt parser.
///
/// Tokens: identifiers (`add`, `f32`, `s0`), value ids (`%x`, `%0`), graph ids (`@forward`),
/// integer and float literals (no sign: `-` is its own token), string literals with `\\`, `\"`,
/// `\n`, `\t` and `\xHH` escapes, and punctuation. `//` starts a comment that runs to the end of
/// the line. Every token records its 1-based line and column; every error is a DiagnosticError
/// naming them, so malformed input never crashes the caller.

#include "ir/diagnostic.h"

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

namespace kiln::ir {

/// Token kinds.
enum class Tok : uint8_t {
  Eof,
  Ident,
  ValueId,
  GraphId,
  Int,
  Float,
  String,
  LParen,
  RParen,
  LBrace,
  RBrace,
  LBracket,
  RBracket,
  Comma,
  Colon,
  Assign,
  Plus,
  Minus,
  Star,
  EqEq,
  NotEq,
  Less,
  LessEq,
  Greater,
  GreaterEq,
};

/// How a token kind reads in an "expected ..." message: `')'`, `an identifier`.
std::string_view tokDescription(Tok kind);

/// Words the .kir grammar gives a meaning, which therefore cannot name symbols.
bool isReservedWord(std::string_view word);
/// Whether `s` is an identifier: [A-Za-z_][A-Za-z0-9_]*.
bool isIdentifier(std::string_view s);

/// One token; `text` points into the lexer's buffer.
struct Token {
  Tok kind = Tok::Eof;
  /// The spelling in the source; for value and graph ids without the sigil.
  std::string_view text;
  TextPos pos;
  /// The decoded contents of a string literal.
  std::string str;
};

/// A tokenizer with arbitrary lookahead over a text buffer it does not own.
class Lexer {
public:
  /// `buffer` names the text in diagnostics; `firstLine` is the line number of its first line
  /// (kiln-opt splits a file into chunks and keeps the file's line numbers).
  Lexer(std::string_view text, std::string buffer, int firstLine = 1);

  /// The token `ahead` positions after the current one, without consuming anything.
  const Token &peek(int ahead = 0);
  Token next();
  /// Consumes the next token when it has kind `kind`.
  bool consumeIf(Tok kind);
  /// Consumes the next token when it is the identifier `word`.
  bool consumeIfWord(std::string_view word);
  /// Consumes a token of kind `kind` or fails with "expected <kind> <context>, got '<tok>'".
  Token expect(Tok kind, std::string_view context);
  /// Consumes the identifier `word` or fails like expect().
  void expectWord(std::string_view word, std::string_view context);

  /// The value of an integer token, negated when `negative`; fails when out of int64 range.
  int64_t intValue(const Token &tok, bool negative) const;
  /// The value of a float or integer token.
  double floatValue(const Token &tok, bool negative) const;

  [[noreturn]] void errorAt(TextPos pos, std::string message) const;
  /// Fails at `got` with "expected <what>, got <got>".
  [[noreturn]] void errorExpected(std::string_view what, const Token &got) const;
  /// How a token reads in a message: `'foo'` or `end of input`.
  static std::string describe(const Token &tok);
  const std::string &buffer() const { return buffer_; }

private:
  Token lex();
  Token lexNumber(TextPos pos, size_t start);
  Token lexString(TextPos pos);
  Token lexSigil(Tok kind, TextPos pos);
  void skipSpaceAndComments();
  char cur(size_t ahead = 0) const;
  void advance();

  std::string_view text_;
  std::string buffer_;
  size_t offset_ = 0;
  int line_;
  int col_ = 1;
  std::deque<Token> lookahead_;
};

} // namespace kiln::ir

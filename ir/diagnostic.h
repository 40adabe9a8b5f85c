#pragma once
/// Diagnostic: the one error report of the IR layer (parser, verifier, passes).
///
/// A diagnostic carries a message and, where known, the position in a .kir buffer it refers to.
/// It prints as `file:line:col: error: message`, the format compilers and FileCheck tests use.
/// Code that cannot continue throws it as a DiagnosticError, which is a kiln::Error (kind Value),
/// so callers that only know kiln::Error still catch it.

#include "runtime/error.h"

#include <string>

namespace kiln::ir {

class Node;

/// A 1-based line and column in a text buffer; line 0 means unknown.
struct TextPos {
  int line = 0;
  int col = 0;
  bool known() const { return line > 0; }
  bool operator==(const TextPos &) const = default;
};

struct Diagnostic {
  std::string message;
  /// Name of the buffer (a file name or "<stdin>"); empty when the error is not from text.
  std::string buffer;
  TextPos pos;
  /// The node the verifier complains about, when there is one.
  const Node *node = nullptr;

  /// `buffer:line:col: error: message`, leaving out what is unknown.
  std::string str() const;
};

class DiagnosticError : public Error {
public:
  explicit DiagnosticError(Diagnostic diag)
      : Error(ErrorKind::Value, diag.str()), diag_(std::move(diag)) {}
  const Diagnostic &diagnostic() const { return diag_; }

private:
  Diagnostic diag_;
};

} // namespace kiln::ir

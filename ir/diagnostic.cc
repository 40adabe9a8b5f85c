#include "ir/diagnostic.h"

#include <fmt/format.h>

namespace kiln::ir {

std::string Diagnostic::str() const {
  std::string where;
  if (!buffer.empty())
    where = buffer + ":";
  if (pos.known())
    where += fmt::format("{}:{}:", pos.line, pos.col);
  if (!where.empty())
    where += " ";
  return where + "error: " + message;
}

} // namespace kiln::ir

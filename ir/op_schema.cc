#include "ir/op_schema.h"

#include <fmt/format.h>

#include <cctype>
#include <stdexcept>

namespace kiln::ir {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

[[noreturn]] void malformed(std::string_view schema, std::string_view what) {
  throw std::invalid_argument(fmt::format("malformed op schema '{}': {}", schema, what));
}

/// Splits the argument list at top-level commas (defaults such as `[0, 1]` hold commas).
std::vector<std::string_view> splitArgs(std::string_view list) {
  std::vector<std::string_view> parts;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    char c = list[i];
    if (c == '[' || c == '(')
      ++depth;
    else if (c == ']' || c == ')')
      --depth;
    else if (c == ',' && depth == 0) {
      parts.push_back(trim(list.substr(start, i - start)));
      start = i + 1;
    }
  }
  std::string_view last = trim(list.substr(start));
  if (!last.empty() || !parts.empty())
    parts.push_back(last);
  return parts;
}

struct TypeSpelling {
  std::string_view text;
  SchemaType type;
};

constexpr TypeSpelling kTypes[] = {
    {"Tensor", SchemaType::Tensor},
    {"Tensor[]", SchemaType::TensorList},
    {"Scalar", SchemaType::Scalar},
    {"int", SchemaType::Int},
    {"int[]", SchemaType::IntList},
    {"SymInt", SchemaType::SymInt},
    {"SymInt[]", SchemaType::SymIntList},
    {"float", SchemaType::Float},
    {"bool", SchemaType::Bool},
    {"str", SchemaType::Str},
    {"ScalarType", SchemaType::ScalarType},
    {"Any", SchemaType::Any},
};

SchemaArg parseArg(std::string_view schema, std::string_view part, bool kwOnly) {
  SchemaArg arg;
  arg.kwOnly = kwOnly;
  arg.text = std::string(part);
  std::string_view decl = part;
  if (size_t eq = part.find('='); eq != std::string_view::npos) {
    arg.defaultText = std::string(trim(part.substr(eq + 1)));
    decl = trim(part.substr(0, eq));
    if (arg.defaultText->empty())
      malformed(schema, fmt::format("argument '{}' has an empty default", part));
  }
  size_t space = decl.find_last_of(" \t");
  if (space == std::string_view::npos)
    malformed(schema, fmt::format("argument '{}' has no type or no name", part));
  arg.name = std::string(trim(decl.substr(space + 1)));
  std::string type(trim(decl.substr(0, space)));
  arg.typeText = type;
  if (!type.empty() && type.back() == '?') {
    arg.optional = true;
    type.pop_back();
  }
  // int[2] -> int[] with a size.
  if (size_t open = type.find('[');
      open != std::string::npos && type.back() == ']' && open + 2 < type.size()) {
    std::string digits = type.substr(open + 1, type.size() - open - 2);
    for (char c : digits)
      if (!std::isdigit(static_cast<unsigned char>(c)))
        malformed(schema, fmt::format("argument '{}' has a list size that is not a number", part));
    arg.listSize = std::stoi(digits);
    type = type.substr(0, open) + "[]";
  }
  for (const TypeSpelling &t : kTypes)
    if (t.text == type) {
      arg.type = t.type;
      return arg;
    }
  malformed(schema, fmt::format("unknown type '{}' of argument '{}'", type, arg.name));
}

} // namespace

std::string_view schemaTypeName(SchemaType type) {
  switch (type) {
  case SchemaType::Tensor:
    return "Tensor";
  case SchemaType::TensorList:
    return "tuple of Tensors";
  case SchemaType::Scalar:
    return "Number";
  case SchemaType::Int:
  case SchemaType::SymInt:
    return "int";
  case SchemaType::IntList:
  case SchemaType::SymIntList:
    return "tuple of ints";
  case SchemaType::Float:
    return "float";
  case SchemaType::Bool:
    return "bool";
  case SchemaType::Str:
    return "str";
  case SchemaType::ScalarType:
    return "torch.dtype";
  case SchemaType::Any:
    return "object";
  }
  return "object";
}

int OpSchema::numPositional() const {
  int n = 0;
  for (const SchemaArg &a : args)
    n += !a.kwOnly;
  return n;
}

int OpSchema::find(std::string_view argName) const {
  for (size_t i = 0; i < args.size(); ++i)
    if (args[i].name == argName)
      return static_cast<int>(i);
  return -1;
}

OpSchema parseOpSchema(std::string_view text) {
  OpSchema schema;
  schema.text = std::string(trim(text));
  std::string_view s = schema.text;
  size_t open = s.find('(');
  size_t arrow = s.rfind("->");
  size_t close = s.rfind(')', arrow);
  if (open == std::string_view::npos || arrow == std::string_view::npos ||
      close == std::string_view::npos || close < open)
    malformed(s, "expected `name(arguments) -> Result`");
  schema.name = std::string(trim(s.substr(0, open)));
  if (schema.name.empty())
    malformed(s, "the op has no name");
  bool kwOnly = false;
  for (std::string_view part : splitArgs(s.substr(open + 1, close - open - 1))) {
    if (part.empty())
      malformed(s, "empty argument");
    if (part == "*") {
      kwOnly = true;
      continue;
    }
    SchemaArg arg = parseArg(s, part, kwOnly);
    if (schema.find(arg.name) >= 0)
      malformed(s, fmt::format("argument '{}' appears twice", arg.name));
    if (!arg.kwOnly && !arg.defaultText && !schema.args.empty() && schema.args.back().defaultText &&
        !schema.args.back().kwOnly)
      malformed(s, fmt::format("required argument '{}' follows one with a default", arg.name));
    schema.args.push_back(std::move(arg));
  }
  return schema;
}

} // namespace kiln::ir

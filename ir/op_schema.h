#pragma once
/// A user-facing op's torch schema (`add(Tensor input, Tensor other, *, Scalar alpha=1) ->
/// Tensor`, the KILN_SPELLING rows of ops.def) parsed once: the eager bindings bind Python
/// arguments to it and the capture frontend reads the same parse through `_C._ir.op_table()`.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ir {

/// The argument types the table's schemas use (torch's names).
enum class SchemaType {
  Tensor,
  TensorList, ///< Tensor[]
  Scalar,     ///< a number
  Int,
  IntList, ///< int[] / int[N] (an int is accepted for int[N])
  SymInt,
  SymIntList,
  Float,
  Bool,
  Str,
  ScalarType, ///< a dtype
  Any,        ///< accepted as given (legacy arguments such as size_average)
};

/// torch's name of a type, as its argument errors print it (`Tensor`, `tuple of ints`, ...).
std::string_view schemaTypeName(SchemaType type);

struct SchemaArg {
  std::string name;
  SchemaType type;
  bool optional = false; ///< `Tensor?`: None is accepted
  bool kwOnly = false;   ///< after `*`
  int listSize = 0;      ///< N of `int[N]`, else 0
  /// The default as written (`1`, `None`, `'mean'`, `[]`); nullopt when required.
  std::optional<std::string> defaultText;
  /// `Type name[=default]` as written.
  std::string text;
  /// The type as written (`int[1]?`, `Tensor?`).
  std::string typeText;
};

struct OpSchema {
  std::string name;
  std::vector<SchemaArg> args;
  std::string text; ///< the schema as written

  /// The number of arguments that may be given by position (those before `*`).
  int numPositional() const;
  /// The index of the argument called `name`, or -1.
  int find(std::string_view argName) const;
};

/// Parses `name(Type arg, ..., *, Type kwarg=default) -> Result`. Throws std::invalid_argument
/// naming the schema and the malformed part.
OpSchema parseOpSchema(std::string_view text);

} // namespace kiln::ir

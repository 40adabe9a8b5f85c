#pragma once
/// The .kir parser: reads the text printGraph writes (grammar in ir/README.md) back into Graphs.
///
/// Semantics: parsing is syntactic plus name resolution. It checks the grammar, that every value
/// is defined once and before its uses, that op keywords, dtypes and types exist, and that each
/// node's result names match its result types; arity, attributes and dtype rules are left to the
/// verifier, so broken graphs can be written down in tests. Every error is a DiagnosticError with
/// the buffer name, line and column and the token that was expected; malformed input never
/// crashes. print(parse(text)) == text for any text the printer produced.

#include "ir/diagnostic.h"
#include "ir/graph.h"

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::ir {

/// Where each parsed node starts in the text, so later diagnostics (the verifier's) can point
/// at the line that defines the node.
using NodePositions = std::unordered_map<const Node *, TextPos>;

struct ParsedModule {
  std::vector<std::unique_ptr<Graph>> graphs;
  NodePositions positions;
};

/// Parses zero or more graphs. `buffer` names the text in diagnostics; `firstLine` is the line
/// number of the text's first line (for a chunk cut out of a larger file).
ParsedModule parseModule(std::string_view text, std::string buffer = "<string>", int firstLine = 1);
/// Parses text that holds exactly one graph.
std::unique_ptr<Graph> parseGraph(std::string_view text, std::string buffer = "<string>");

} // namespace kiln::ir

#pragma once
/// The verifier: checks every invariant of a Graph and names the node and the rule it breaks.
///
/// Rules, in the order they are checked:
/// - structure: `input` nodes come first, exactly one `return` node comes last, the graph name
///   is an identifier;
/// - each node: operand and result counts match ops.def; every operand is a value of this graph
///   defined by an earlier node; use lists agree with operands; attributes are those ops.def
///   lists for the op, with the right kinds, and required ones are present; tensor types are
///   well formed (as many strides as sizes, no negative constant size);
/// - op rules per class (elementwise, reduction, view, extern, ...): operand kinds, dtype
///   promotion (torch.result_type), broadcast and reduced shapes, dims in range, devices agree.
///   Shapes are compared structurally; a symbolic size is only rejected when a constant proves it
///   wrong, since guards may have established what the text does not show.
///
/// Every pass runs the verifier after itself in tests and in kiln-opt.

#include "ir/diagnostic.h"
#include "ir/graph.h"

#include <optional>

namespace kiln::ir {

/// The first broken invariant of `graph`, or nullopt when it is well formed. The diagnostic's
/// `node` is the offending node (null for graph-level rules); its message starts with the node
/// as it prints (`%2 = add: ...`).
std::optional<Diagnostic> verify(const Graph &graph);
/// Throws DiagnosticError with the first broken invariant.
void verifyOrThrow(const Graph &graph);

} // namespace kiln::ir

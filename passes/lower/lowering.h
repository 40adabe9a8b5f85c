#pragma once
/// Lowering: a verified graph becomes a loop program (ir/loop), one short function per op family.
///
/// [Note: lowering]
/// lowerGraph walks the graph in node order and calls the lowering registered for each node's op
/// kind (one registry keyed by OpKind, filled from the family files lower_elementwise.cc,
/// lower_reduce.cc, lower_views.cc and lower_nn.cc). A lowering reads its operands as refs (see
/// [Note: lowering values] in lower_context.h), adds loop nodes whose bodies are define-by-run
/// callables recorded once into expression DAGs, and defines its results. The program it builds
/// is *unfused*: roughly one loop node per computing op, views folded into index maps, constants
/// and size expressions folded into bodies. passes/schedule fuses it.
///
/// Semantics kept from eager (PyTorch): broadcasting (a size-1 dim is read at index 0, i.e.
/// stride 0), torch.result_type promotion with explicit casts in bodies (the loop IR never
/// promotes), float16/bfloat16 computed in float32 and rounded once, reductions that subtract
/// the max (softmax, log_softmax, logsumexp), Welford statistics (var, layer_norm), and library
/// calls as Extern nodes (matmul, linear, conv2d, scaled_dot_product_attention) whose bias is a
/// pointwise epilogue, gathers (embedding, gather, index_select) as indirect loads. The extern contract (op names, operands, attributes) is in
/// passes/lower/README.md.
///
/// A lowering may decline (an op without a lowering, an in-place op, a `call`, a dtype it does
/// not handle): lowerGraph then throws ir::DiagnosticError whose diagnostic names the node
/// (`%3 = call: cannot lower: ...`) and points at it (Diagnostic::node).

#include "ir/graph.h"
#include "ir/loop/program.h"

#include <string>
#include <vector>

namespace kiln::passes::lower {

/// Lowers `graph` (verified) to an unfused loop program: one input buffer per graph input, in
/// order (scalar inputs are 0-d buffers: i64, f64 or b8), and one output buffer per graph output.
ir::loop::LoopProgram lowerGraph(const ir::Graph &graph);

/// A node that lowering declines, and why (the diagnostic's message: `%3 = call: cannot lower:
/// ...`).
struct Declined {
  const ir::Node *node;
  std::string reason;
};

/// Every node of `graph` (verified) that lowering declines, in node order, found in one walk: a
/// declining node's results become program inputs, as a partition makes them (values computed
/// eagerly before the next compiled part), and the walk goes on. Empty when the graph lowers.
std::vector<Declined> findDeclines(const ir::Graph &graph);

/// Whether op kind `op` has a lowering (the graph-structure ops `input`/`return` do not need one;
/// `call` and `copy_` have none).
bool hasLowering(ir::OpKind op);

} // namespace kiln::passes::lower

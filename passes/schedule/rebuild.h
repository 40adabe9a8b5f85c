#pragma once
/// Rebuilding loop programs from their recorded DAGs: inlining producers, dropping and
/// reordering nodes, cutting out one node.
///
/// [Note: replaying a body]
/// A recorded body is never re-run as a closure. To change it, rebuild() records a new body
/// whose callable walks the old DAG (Replayer): each Expr is re-issued on the new Ops with its
/// loop variables substituted, loads of kept buffers renamed, and each load of an inlined
/// buffer replaced by the producer's own DAG, replayed with the producer's variables bound to
/// the loaded element's per-dimension index (decodeIndex). Hash-consing in the new Ops merges
/// what becomes equal.

#include "ir/loop/program.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::passes::schedule {

using ir::SymInt;
using ir::loop::BufferId;
using ir::loop::IndexExpr;
using ir::loop::LoopNode;
using ir::loop::LoopProgram;

/// The per-dimension index of the element at flat offset `flat` of a contiguous buffer `meta`
/// (size-1 dims read 0), simplified with the reader's loop ranges; nullopt when the buffer is not
/// contiguous.
std::optional<std::vector<IndexExpr>> decodeIndex(const IndexExpr &flat, const ir::TensorMeta &meta,
                                                  const ir::loop::VarRanges &ranges);

/// The node of `program` that writes `id`, or -1 for an input.
std::vector<int> producers(const LoopProgram &program);

struct RebuildPlan {
  /// Per buffer of the source: a pointwise producer folded into the loads that read it.
  std::vector<bool> inlined;
  /// Source node indices to emit, in this order (nodes left out are dropped; inlined ones must
  /// be left out).
  std::vector<size_t> order;
};

/// The source rebuilt by `plan`; buffers are renumbered (inputs first, then node outputs in the
/// new order), the program outputs stay the same buffers, in order.
LoopProgram rebuild(const LoopProgram &source, const RebuildPlan &plan);

/// Node indices of `source` that some output needs, in order, given the inlined buffers (a node
/// whose results nobody reads, directly or through an inlined body, is dead).
std::vector<size_t> liveNodes(const LoopProgram &source, const std::vector<bool> &inlined);

/// The body of `node` (of `program`) with its loop variables replaced by `subst` (a variable
/// absent from it stays), recorded over `ranges`; it reads the same buffers.
std::shared_ptr<const ir::loop::Body>
substituteVars(const LoopProgram &program, const LoopNode &node,
               const std::map<std::string, SymInt, std::less<>> &subst,
               const ir::loop::VarRanges &ranges);

/// Node `node` of `source` as a program of its own: its inputs are the buffers it reads (in id
/// order, returned in `reads`), its outputs the buffers it writes. What a backend compiling one
/// kernel at a time, or a test running a memory plan, needs.
LoopProgram extractNode(const LoopProgram &source, size_t node, std::vector<BufferId> &reads);

} // namespace kiln::passes::schedule

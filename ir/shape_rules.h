#pragma once
/// Shape rules: the type of an op's result computed from its operands and attributes alone.
///
/// The verifier checks a node's result type against these rules; the `shape-infer` pass sets it
/// from them. One set of rules serves both, so what shape-infer writes always verifies.
///
/// Semantics:
/// - dtype follows torch: elementwise ops promote with torch.result_type, Python scalars being
///   weak (an i64 tensor times a `float` is the default float dtype); comparisons give bool;
///   FloatResult ops of integer inputs give the default float dtype; reductions, casts and
///   library calls follow their own rules (see verifier_rules*.cc and shape_rules*.cc).
/// - Sizes are SymInts. Broadcasting `1` with `n` gives `n` and equal sizes stay. Two sizes that
///   differ structurally, neither 1, must be equal at run time (`s0` with `s1`, `s0` with `4`):
///   the rule keeps the LEFT one and records `left == right` as an assumption. Only sizes that
///   constants prove different (`4` vs `3`, `s0` vs `s0 + 1`) are an error.
/// - A `slice` with symbolic bounds assumes `start <= end <= size` (as a guard would establish)
///   and records what the text does not show; constant bounds on constant sizes clamp like torch.
///   A `-1` in a view shape is the element count divided by the other sizes.
/// - Strides: views (`view`, `reshape` when the strides allow it, `permute`, `transpose`,
///   `expand`, `slice`, `select`, `squeeze`, `unsqueeze`) get the strides eager kiln gives the
///   view; `copy_` returns its operand 0 unchanged; every other op gets contiguous strides.
/// - Ops whose results are typed as given have no rule: `input`, `return`, `constant` and `call`
///   (an opaque Python callable: its types are what the capture observed).
/// - A rule that cannot hold throws kiln::Error (kind Value) whose message names the broken rule
///   (`operand shapes do not broadcast: 4 vs 3 in dim -1`); callers prefix the node.

#include "ir/graph.h"
#include "ir/sym_int.h"

#include <optional>
#include <span>
#include <vector>

namespace kiln::ir {

/// Facts about symbols that the rules assumed while computing sizes (`s0 == s1`), in the order
/// they were found, each once. Guards must establish them before compiled code relies on the
/// computed types.
class SymAssumptions {
public:
  /// Records `r` unless it is already recorded or holds for every symbol value.
  void add(SymRelation r);
  const std::vector<SymRelation> &relations() const { return relations_; }
  bool empty() const { return relations_.empty(); }

private:
  std::vector<SymRelation> relations_;
};

/// The broadcast of `shapes` (numpy rules, symbolic as described above). Throws kiln::Error when
/// constants prove two sizes clash. `assumed` (optional) receives the equalities it relied on.
std::vector<SymInt> broadcastShapes(const std::vector<std::span<const SymInt>> &shapes,
                                    SymAssumptions *assumed = nullptr);

/// torch.result_type of the operands of `node` from `first` on: Python scalars are weak, 0-d
/// tensors vote below dimensioned ones (`where` promotes from operand 1: its condition does not
/// vote).
DType promotedDType(const Node &node, int first = 0);

/// The type of result 0 of `node` as its op's rule computes it from the node's operands and
/// attributes, or nullopt for ops that are typed as given (input, return, constant, call).
/// Throws kiln::Error naming the broken rule when the operands cannot satisfy it.
std::optional<ValueType> inferResultType(const Node &node, SymAssumptions *assumed = nullptr);

/// A new `op` node before `anchor` whose result is typed by the op's shape rule; returns that
/// result. For rewrites that build nodes the graph did not have.
Value *createTypedBefore(Graph &graph, Node *anchor, OpKind op, std::vector<Value *> operands,
                         Attributes attrs, SourceLoc loc);

} // namespace kiln::ir

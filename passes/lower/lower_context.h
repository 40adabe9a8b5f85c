#pragma once
/// LowerContext: what a lowering function sees while one graph becomes a loop program.
///
/// [Note: lowering values]
/// Every graph value is lowered to one of two things:
/// - a TensorRef: a buffer of the loop program read through a per-dimension index map (or a
///   constant fill). Views (permute, expand, slice, reshape, ...) only rewrite the index map, so
///   they never copy: `transpose(%x)` is buf0 read at `[i1, i0]`. A node that computes something
///   (add, sum, ...) writes a new buffer and yields the identity map over it.
/// - a ScalarRef: a Python number of the graph, known at compile time (a literal, a size
///   expression from `sym_size`) or bound at run time (a scalar graph input, a 0-d buffer).
/// Index maps are SymInts over the view's own variables `i0, i1, ...`; reading a ref at a point
/// substitutes the point for them (SymInt substitution is simultaneous, so the names never clash
/// with the loop variables of the node doing the reading).

#include "ir/graph.h"
#include "ir/loop/program.h"

#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

namespace kiln::passes::lower {

using ir::SymInt;
using ir::loop::BodyFn;
using ir::loop::BufferId;
using ir::loop::IndexExpr;
using ir::loop::LoopProgram;
using ir::loop::Ops;
using ir::loop::Val;
using Idx = std::span<const IndexExpr>;

/// A graph tensor value: `buffer` read at `index` (one expression per buffer dim, over the
/// value's variables i0..i{rank-1}), or, when `buffer` is invalid, every element `fill`.
struct TensorRef {
  DType dtype = DType::Float32;
  std::vector<SymInt> sizes;
  BufferId buffer;
  std::vector<IndexExpr> index;
  double fill = 0; ///< the value of a constant fill (exact for the integers it is used with)

  int64_t rank() const { return static_cast<int64_t>(sizes.size()); }
  bool isFill() const { return !buffer.valid(); }
  /// The identity map over `id`, whose sizes are `sizes`.
  static TensorRef of(const LoopProgram &program, BufferId id);
  /// Whether this reads all of `buffer` at the identity index (no view in between).
  bool isWholeBuffer(const LoopProgram &program) const;
  /// This value viewed as `newSizes`, where `map[k]` is the index of this value's dim k as an
  /// expression over the new value's variables.
  TensorRef view(std::vector<SymInt> newSizes, std::span<const IndexExpr> map) const;
};

/// A graph scalar value: a literal (double for floats, int64 for ints and bools), a size
/// expression, or a 0-d input buffer.
struct ScalarRef {
  ir::ScalarType type = ir::ScalarType::Float;
  std::variant<double, int64_t, SymInt, BufferId> value;

  /// The dtype the scalar has in a loop body (i64, f64 or b8).
  DType dtype() const;
  /// The literal's value, if it is one.
  std::optional<double> literal() const;
};

/// A size expression as a value of `dtype` (a literal when it is constant).
Val sizeAs(Ops &ops, const SymInt &size, DType dtype);
/// The loop variables `i0..i{n-1}` as index expressions.
std::vector<IndexExpr> loopVars(size_t n);
/// The product of `sizes` (1 for none).
SymInt numel(std::span<const SymInt> sizes);

class LowerContext {
public:
  LowerContext(const ir::Graph &graph, LoopProgram &program);

  LoopProgram &program() { return program_; }
  const ir::Graph &graph() const { return graph_; }

  bool has(const ir::Value *v) const;
  const TensorRef &tensor(const ir::Value *v) const;
  const ScalarRef &scalar(const ir::Value *v) const;
  void define(const ir::Value *v, TensorRef t);
  void define(const ir::Value *v, ScalarRef s);

  /// Throws the lowering's refusal: a DiagnosticError naming `node` and `reason`.
  [[noreturn]] void decline(const ir::Node &node, const std::string &reason) const;

  /// Reads `t` at the point `idx` (one expression per dim of t).
  static Val load(Ops &ops, const TensorRef &t, Idx idx);
  /// Reads operand `v` (a tensor broadcast to `outSizes`, or a scalar) at the point `idx` of
  /// the result, converted to `dtype`.
  Val read(Ops &ops, const ir::Value *v, Idx idx, std::span<const SymInt> outSizes,
           DType dtype) const;
  /// A scalar's value in a body, converted to `dtype`.
  static Val scalarVal(Ops &ops, const ScalarRef &s, DType dtype);

  /// `t`, or a realized copy of it when its buffer index is not affine in the view's variables
  /// (a reshape's floordiv): what loadAlong reads.
  TensorRef gatherSource(const TensorRef &t);
  /// Reads `t` (from gatherSource) at `idx` except along `dim`, where the i64 `position` is the
  /// index, checked against t's size there (an indirect load of t's buffer: a sliced, selected or
  /// transposed view is read in place).
  Val loadAlong(Ops &ops, const TensorRef &t, Idx idx, size_t dim, Val position,
                bool wrapNegative) const;

  /// A new pointwise node over `sizes`; returns the identity ref over its buffer.
  TensorRef pointwise(std::vector<SymInt> sizes, const BodyFn &body);
  /// A buffer that holds exactly `t`, contiguous: t's own when it is a whole buffer, else a copy
  /// (what an extern's operands need).
  BufferId realize(const TensorRef &t);

private:
  const ir::Graph &graph_;
  LoopProgram &program_;
  std::unordered_map<const ir::Value *, std::variant<TensorRef, ScalarRef>> values_;
};

/// torch.result_type of the operands of `node` from `first` on.
DType promotedOperandDType(const ir::Node &node, int first = 0);
/// A dim attribute wrapped to [0, rank).
int64_t wrapDim(int64_t dim, int64_t rank);

/// One lowering function per op kind: reads the node's operands from `ctx` and defines its
/// results, or declines.
using LowerFn = void (*)(LowerContext &ctx, const ir::Node &node);

/// The registry: one slot per OpKind, filled by the family files through these functions (one
/// explicit list in lowering.cc; no static initializers).
class Registry {
public:
  void add(ir::OpKind op, LowerFn fn) { fns_[static_cast<size_t>(op)] = fn; }
  LowerFn find(ir::OpKind op) const { return fns_[static_cast<size_t>(op)]; }

private:
  LowerFn fns_[ir::kNumOpKinds] = {};
};

void registerElementwise(Registry &r);   // lower_elementwise.cc
void registerReductions(Registry &r);    // lower_reduce.cc
void registerViews(Registry &r);         // lower_views.cc
void registerNN(Registry &r);            // lower_nn.cc
void registerPools(Registry &r);         // lower_pool.cc
void registerShapeOps(Registry &r);      // lower_shape_ops.cc
void registerGathers(Registry &r);       // lower_gather.cc
void registerClassLosses(Registry &r);   // lower_class_loss.cc
void registerScansAndSorts(Registry &r); // lower_sort.cc
void registerRandom(Registry &r);        // lower_random.cc

} // namespace kiln::passes::lower

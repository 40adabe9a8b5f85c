#pragma once
/// Ops: the handler a loop body is written against, which records it into an Expr DAG.
///
/// [Note: define-by-run bodies]
/// A lowering writes a loop body as a C++ callable `(Ops &ops, std::span<const IndexExpr> idx)
/// -> Val`: idx holds the node's loop variables (`i0, ...` then `r0, ...`), and the body reads like
/// the math (`ops.maximum(ops.load(x, {idx[0], idx[1]}) + ops.load(b, {idx[1]}), zero)`).
/// LoopProgram runs the callable exactly once, against an Ops that records each call into a
/// hash-consed, dtype-checked Expr DAG (expr.h), then drops the callable. Everything after that
/// (printer, hash, interpreter, code generators, fusion) walks the DAG and never the closure: one
/// handler runs closures, and a new backend is one more DAG walker.

#include "ir/loop/expr.h"

#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace kiln::ir::loop {

class Ops;

/// A value of a body being recorded: a DAG node and the Ops recording it.
class Val {
public:
  Val() = default;
  const Expr *expr() const { return expr_; }
  DType dtype() const;
  Ops &ops() const;
  /// Same node (hash-consing makes this structural equality).
  bool operator==(const Val &other) const { return expr_ == other.expr_; }

private:
  friend class Ops;
  Val(Ops *ops, const Expr *expr, uint64_t serial) : ops_(ops), expr_(expr), serial_(serial) {}
  Ops *ops_ = nullptr;
  const Expr *expr_ = nullptr;
  uint64_t serial_ = 0; ///< which recording made it (an Ops may reuse a dead one's address)
};

/// The signature of a body.
using BodyFn = std::function<Val(Ops &ops, std::span<const IndexExpr> idx)>;

class Ops {
public:
  Ops(const Ops &) = delete;
  Ops &operator=(const Ops &) = delete;

  /// Reads `buffer` at a per-dimension index (one expression per dimension), flattened with the
  /// buffer's strides. Throws kiln::Error when the rank differs or the index mentions a loop
  /// variable this node does not have.
  Val load(BufferId buffer, std::span<const IndexExpr> index);
  Val load(BufferId buffer, std::initializer_list<IndexExpr> index) {
    return load(buffer, std::span<const IndexExpr>(index.begin(), index.size()));
  }
  /// Reads `buffer` at `index` except along `dim`, where the i64 value `position` is the index
  /// (index[dim] is ignored): a gather. position must be in [0, size of dim), or in
  /// [-size, size) with `wrapNegative` (see expr.h); the check runs with the body.
  Val loadIndirect(BufferId buffer, std::span<const IndexExpr> index, size_t dim, Val position,
                   bool wrapNegative = false);
  Val loadIndirect(BufferId buffer, std::initializer_list<IndexExpr> index, size_t dim,
                   Val position, bool wrapNegative = false) {
    return loadIndirect(buffer, std::span<const IndexExpr>(index.begin(), index.size()), dim,
                        position, wrapNegative);
  }
  /// loadIndirect with the rest of the index already flat and the position's dimension given
  /// by its stride and extent (replaying a recorded indirect load).
  Val loadIndirectFlat(BufferId buffer, IndexExpr flat, IndexExpr stride, IndexExpr extent,
                       Val position, bool wrapNegative);
  /// A literal of `dtype`, rounded to it when floating; integers must fit the dtype, and a
  /// double for an integer or b8 dtype must be a whole number (0 or 1 for b8).
  Val constant(double value, DType dtype);
  Val constant(int64_t value, DType dtype);
  Val constant(int value, DType dtype) { return constant(int64_t{value}, dtype); }
  /// A b8 literal.
  Val constant(bool value) { return constant(int64_t{value}, DType::Bool); }
  /// An index expression as an i64 value.
  Val indexValue(const IndexExpr &index);
  /// `value` converted to `dtype` (itself when it already has that dtype).
  Val cast(Val value, DType dtype);

  // One method per prim row of loop.def: `ops.add(a, b)` records `add a, b`, `ops.maximum(a, b)`
  // records `max a, b`, each checked by the row's type rule.
#define KILN_LOOP_PARAMS_1 Val a
#define KILN_LOOP_PARAMS_2 Val a, Val b
#define KILN_LOOP_PARAMS_3 Val a, Val b, Val c
#define KILN_LOOP_ARGS_1 a
#define KILN_LOOP_ARGS_2 a, b
#define KILN_LOOP_ARGS_3 a, b, c
#define KILN_LOOP_PRIM(E, M, K, N, R)                                                              \
  Val M(KILN_LOOP_PARAMS_##N) { return prim(ExprKind::E, {KILN_LOOP_ARGS_##N}); }
#include "ir/loop/loop.def"
#undef KILN_LOOP_PARAMS_1
#undef KILN_LOOP_PARAMS_2
#undef KILN_LOOP_PARAMS_3
#undef KILN_LOOP_ARGS_1
#undef KILN_LOOP_ARGS_2
#undef KILN_LOOP_ARGS_3

  /// `a floordiv c` / `a mod c` simplified with this node's loop ranges (floorDivInRange).
  IndexExpr indexFloorDiv(const IndexExpr &a, const SymInt &c) const;
  IndexExpr indexMod(const IndexExpr &a, const SymInt &c) const;
  /// The node's loop variables and their extents.
  const VarRanges &ranges() const { return ranges_; }

  /// Runs `fn` once against a fresh Ops over `ranges` and returns the recorded body. `buffers`
  /// are those the body may load; `context` names the node in messages ("pointwise buf2").
  static std::shared_ptr<const Body> record(const BodyFn &fn, std::span<const Buffer> buffers,
                                            VarRanges ranges, std::string context);

private:
  Ops(std::span<const Buffer> buffers, VarRanges ranges, std::string context);
  Val prim(ExprKind kind, std::initializer_list<Val> operands);
  /// Returns the existing node equal to `proto`, or adds it.
  Val intern(Expr proto);
  const Expr *check(Val v, std::string_view what) const;
  const Buffer &checkedBuffer(BufferId buffer) const;
  void checkVars(const IndexExpr &index, std::string_view what) const;
  [[noreturn]] void failType(ExprKind kind, std::span<const Expr *const> operands,
                             std::string_view rule) const;

  uint64_t serial_;
  std::span<const Buffer> buffers_;
  VarRanges ranges_;
  std::string context_;
  std::unique_ptr<Body> body_;
  std::unordered_map<size_t, std::vector<const Expr *>> interned_;
};

Val operator+(Val a, Val b);
Val operator-(Val a, Val b);
Val operator*(Val a, Val b);
Val operator/(Val a, Val b);
Val operator-(Val a);

} // namespace kiln::ir::loop

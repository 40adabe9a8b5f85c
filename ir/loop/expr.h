#pragma once
/// The expression DAG of a loop body: what running a body callable against Ops records.
///
/// Semantics:
/// - A Body is a DAG of immutable Expr nodes, hash-consed: building the same expression twice
///   (same kind, dtype, operands and payload) yields the same node, so structurally equal
///   subexpressions are one node and compare equal by pointer.
/// - Every Expr has a dtype, inferred from the type rule of its kind in loop.def when it is built.
///   There is no implicit promotion: operands must already agree (lowerings insert casts).
/// - Values follow their dtype: a floating result is rounded to its dtype, an integer result
///   wraps (two's complement). `div` is true division of floats; `floordiv`/`mod` round like
///   Python and an integer division by zero is an error; `max`/`min` propagate NaN; `pow` of
///   integers needs a non-negative exponent; `not`/`and`/`or`/`xor` are logical on b8 and bitwise
///   on integers; a cast to an integer truncates toward zero, a cast to b8 tests `!= 0`.
/// - Leaves: `load` reads a buffer at a flat IndexExpr offset (index.h), `constant` is a literal
///   (rounded to its dtype when built), `index` is an IndexExpr as an i64 value.
/// - An indirect load (gather, index_select, embedding) reads at `index + p * indirectStride`,
///   where the position p is its one operand (an i64 value computed in the body, typically a
///   load of an index tensor): p must lie in [0, indirectExtent), or in [-extent, extent) when
///   negative positions count from the end (wrapsNegative, p + extent then). Any other p is an
///   IndexError of the whole program run (the interpreter throws; compiled kernels read a
///   clamped in-bounds element and report the position, and the run throws).
/// - Bodies have no side effects, so only the dependencies of the result matter: `exprs()` lists
///   exactly those in a canonical order, depth-first from the result with operands left to right
///   (each node after its operands). The order C++ happened to evaluate a body's arguments in
///   (`load(a) + load(b)` may build load(b) first) never shows in the text or the hash.

#include "ir/loop/buffer.h"
#include "ir/loop/index.h"
#include "runtime/dtype.h"

#include <array>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::ir::loop {

enum class ExprKind : uint8_t {
#define KILN_LOOP_LEAF(E, K) E,
#define KILN_LOOP_PRIM(E, M, K, N, R) E,
#include "ir/loop/loop.def"
};

/// How a prim's operand dtypes are checked and its result dtype inferred (see loop.def).
enum class TypeRule : uint8_t { None, Numeric, Float, Ordered, Compare, Bits, Select, Int64 };

/// The text keyword (`add`, `load`, ...).
std::string_view exprKeyword(ExprKind kind);
/// Operand count: 0 for load/constant/index, 1 for cast, the table's arity for prims.
int exprArity(ExprKind kind);
/// None for the leaves and cast.
TypeRule exprTypeRule(ExprKind kind);
/// Whether a prim costs like exp (the Costly math rows of loop.def, rsqrt, sigmoid, pow): fusion
/// does not duplicate it into several consumers and kernels keep its values instead of recomputing.
bool isTranscendental(ExprKind kind);

/// One node of a body. Only ever seen as `const Expr *`, owned by its Body.
struct Expr {
  ExprKind kind = ExprKind::Constant;
  DType dtype = DType::Bool;
  std::array<const Expr *, 3> operandSlots{};
  int numOperands = 0;
  BufferId buffer; ///< load, indirect load
  IndexExpr index; ///< load (flat offset), index; indirect load (the static part)
  IndexExpr indirectStride, indirectExtent; ///< indirect load: the position's dimension
  double floatValue = 0; ///< constant of a floating dtype (already rounded to it)
  int64_t intValue = 0;  ///< constant of an integer or bool dtype
  size_t hash = 0;       ///< structural, for hash-consing within one process

  std::span<const Expr *const> operands() const {
    return {operandSlots.data(), size_t(numOperands)};
  }
  const Expr *operand(int k) const { return operandSlots[k]; }
  bool isConstant() const { return kind == ExprKind::Constant; }
  /// A load or an indirect load (both read `buffer`).
  bool isLoad() const { return kind == ExprKind::Load || kind == ExprKind::IndirectLoad; }
  /// Indirect load: whether a negative position counts from the end (intValue holds it).
  bool wrapsNegative() const { return kind == ExprKind::IndirectLoad && intValue != 0; }
};

/// The literal text of a constant: `0.0` (f32), `2` (i64), `true` (b8); other dtypes carry a
/// suffix (`0.5:f64`, `3:i32`).
std::string literalStr(const Expr &constant);

/// The error of an indirect load whose position is out of range, in every backend's words:
/// "index 7 is out of bounds for a dimension with size 5".
std::string indexOutOfRange(int64_t position, int64_t extent);

/// A recorded body: an immutable expression DAG and its result.
class Body {
public:
  /// The nodes the result depends on, in canonical order (above), constants included.
  std::span<const Expr *const> exprs() const { return order_; }
  const Expr *result() const { return result_; }
  DType dtype() const { return result_->dtype; }
  /// The buffers the body loads, in id order, each once.
  std::vector<BufferId> reads() const;
  /// The statements `%0 = ...` and the final `yield`, each on a line starting with `indent`.
  std::string str(std::string_view indent = "  ") const;

private:
  friend class Ops;
  std::vector<std::unique_ptr<const Expr>> storage_; ///< every node built, live or not
  std::vector<const Expr *> order_;
  const Expr *result_ = nullptr;
};

} // namespace kiln::ir::loop

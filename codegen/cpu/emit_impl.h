#pragma once
// Internals of the loop-IR → MLIR emitter (emit*.cc), shared by its translation units only.
//
//   emit_builder.cc  Builder: SSA names, indentation, typed op helpers, scf.for
//   emit_index.cc    SymInt → arith on index; the coefficient of a lane variable
//   emit_plan.cc     which loop of a node is vectorized, how wide, and which is tiled with it
//   emit_expr.cc     body DAG → arith/math (scalar or vector), loads, stores, casts
//   emit_reduce.cc   reduction accumulators (init, update, lane merge, results)
//   emit_module.cc   the module, the kernel ABI prologue, loop nests

#include "codegen/cpu/emit.h"
#include "ir/loop/lanes.h"
#include "passes/schedule/schedule.h"

#include <fmt/format.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::codegen::cpu::detail {

using ir::SymInt;
using ir::loop::BufferId;
using ir::loop::ExprKind;
using ir::loop::ReductionKind;

/// An SSA value of the kernel being written.
struct Value {
  std::string name; ///< `%t12`
  std::string elem; ///< scalar element type: f32, f64, i1, i8, i16, i32, i64, index
  int lanes = 0;    ///< 0: a scalar; otherwise vector<lanes x elem>

  std::string type() const { return lanes ? fmt::format("vector<{}x{}>", lanes, elem) : elem; }
  bool isVector() const { return lanes > 0; }
};

/// The MLIR element type of a dtype in memory (bool: i8, bfloat16: i16) and in registers
/// (bool: i1, float16/bfloat16: f32).
std::string memElem(DType t);
std::string computeElem(DType t);
/// Bits of computeElem (bool counts as 8).
int computeBits(DType t);
/// Integer dtypes compared, extended and divided as unsigned (bool, uint8).
bool isUnsignedDType(DType t);
bool isFloatElem(std::string_view elem);
int elemBits(std::string_view elem);

/// Writes one function body: fresh SSA names, indentation, and one helper per op shape. Operands
/// of elementwise helpers are broadcast to a common lane count first.
class Builder {
public:
  explicit Builder(int depth = 2) : depth_(depth) {}

  std::string fresh(std::string_view hint = "t");
  void line(std::string_view text);
  template <typename... A> void emit(fmt::format_string<A...> f, A &&...args) {
    line(fmt::format(f, std::forward<A>(args)...));
  }
  /// `header` then one more indentation level until close().
  void open(std::string_view header);
  void close(std::string_view footer = "}");
  std::string take() { return std::move(out_); }

  // index arithmetic (SSA names of type index)
  std::string indexConst(int64_t v);
  std::string indexOp(std::string_view op, const std::string &a, const std::string &b);
  Value indexToI64(const std::string &index);

  // typed values
  Value floatConst(double v, const std::string &elem, int lanes = 0);
  Value intConst(int64_t v, const std::string &elem, int lanes = 0);
  Value broadcast(const Value &v, int lanes);
  /// `%r = <op> %a : T` (math.exp, arith.negf, ...).
  Value unary(std::string_view op, const Value &a);
  /// `%r = <op> %a, %b : T` (arith.addf, arith.maxsi, ...), broadcasting a scalar operand.
  Value binary(std::string_view op, Value a, Value b);
  /// `%r = arith.cmpf <pred>, %a, %b : T` (op is arith.cmpf or arith.cmpi); result i1.
  Value compare(std::string_view op, std::string_view pred, Value a, Value b);
  Value select(Value cond, Value a, Value b);
  /// `%r = <op> %a : T to U` (arith.extf, arith.trunci, arith.bitcast, ...).
  Value convert(std::string_view op, const Value &a, const std::string &toElem);
  /// The SSA value `%name` of a loop result (`%r#1` for several).
  static Value result(const std::string &name, size_t k, size_t count, const Value &like);

  /// scf.for over [lo, hi) by step carrying `inits`; `body(iv, args)` returns the yielded values.
  using LoopBody =
      std::function<std::vector<Value>(const std::string &iv, const std::vector<Value> &args)>;
  std::vector<Value> forLoop(const std::string &lo, const std::string &hi, const std::string &step,
                             const std::vector<Value> &inits, const LoopBody &body);

  /// libm functions the module must declare (`tanh` -> "(f64) -> f64").
  std::map<std::string, std::string> &externals() { return externals_; }

private:
  int next_ = 0;
  int depth_;
  std::string out_;
  std::map<std::string, std::string> externals_;
};

/// SSA names of the loop variables and size symbols in scope (all of type index).
using Names = std::map<std::string, std::string, std::less<>>;

/// Emits `e` as arith ops on index; every symbol of e must be in `names`.
std::string emitIndex(Builder &b, const SymInt &e, const Names &names);

using ir::loop::clampedAlong;
using ir::loop::ClampedIndex;
using ir::loop::laneCoefficient;

/// How a node is vectorized (emit_plan.cc).
struct NodePlan {
  LaneMode mode = LaneMode::Scalar;
  int width = 1;
  std::string laneVar; ///< `i<k-1>` or `r<m-1>`; empty when scalar
};
/// The schedule's lane at the widest vectors this node's values fit (scalar where the target
/// cannot vectorize its math: float64 functions without glibc's libmvec).
NodePlan planNode(const ir::loop::LoopNode &node, const passes::schedule::LoopOrder &order,
                  const EmitOptions &options);

/// The side of a tile in vectors (on AVX-512 f32 transposes, 1 and 4 measured slower than 2).
constexpr int kTileFactor = 2;

/// What a body sees: the program, a memref per buffer, and the index names in scope.
struct KernelScope {
  const ir::loop::LoopProgram *program = nullptr;
  std::map<BufferId, std::string> memrefs;
  /// Buffers of one value per shared outer point that a fused run keeps in registers: loads of
  /// them read this value (in the compute type) instead of memory.
  std::map<BufferId, Value> registers;
  /// Values a reduction earlier in a fused run already computed and stored at this point of a
  /// buffer (flat offset, in the loop variables): the body loads them instead of recomputing.
  std::map<const ir::loop::Expr *, std::pair<BufferId, SymInt>> stashes;
  Names names;
  /// The memref<?xi64> of KernelInfo::checksIndices's record (empty when the kernel has none).
  std::string errorRecord;
};

/// Evaluates one body at the current loop point (emit_expr.cc). With lanes > 0 the values
/// along `laneVar` (bound to the first lane's index) form vectors; values that do not depend on
/// it stay scalar.
class BodyEmitter {
public:
  BodyEmitter(Builder &b, const KernelScope &scope, int lanes, std::string laneVar)
      : b_(b), scope_(scope), lanes_(lanes), laneVar_(std::move(laneVar)) {}
  /// The body's result in its compute type.
  Value emit(const ir::loop::Body &body);

private:
  Value emitExpr(const ir::loop::Expr &e);
  Value emitLoad(const ir::loop::Expr &e);
  Value emitIndirectLoad(const ir::loop::Expr &e);
  /// A vector load at a clamped position: contiguous when the vector lies inside the clamp
  /// range (the interior), a gather of the clamped positions otherwise (the edges).
  Value emitClampedLoad(const ir::loop::Expr &e, const ClampedIndex &c);
  /// Records `position` (of an indirect load, `ok` false where it is out of range) in the
  /// kernel's index-error record, when some lane is.
  void reportOutOfRange(const Value &ok, const Value &position, const Value &extent);
  Value emitIndexValue(const ir::loop::Expr &e);

  Builder &b_;
  const KernelScope &scope_;
  int lanes_;
  std::string laneVar_;
  std::map<const ir::loop::Expr *, Value> values_;
};

/// The value of prim `kind` (operands in compute types of `operandType`).
Value emitPrim(Builder &b, ExprKind kind, DType operandType, std::span<const Value> args);
/// exp and log of f64 scalars or vectors as arithmetic (emit_math64.cc), within 1 ulp of libm.
Value exp64(Builder &b, const Value &x);
Value log64(Builder &b, const Value &x);
/// `x ** y` for the constant exponents NumPy code writes (2, 3, -1, -2, +-0.5, +-1.5) as
/// multiplies, divides and square roots, with pow's results at zeros and infinities; nullopt
/// for other exponents (math.powf: libm per lane in f64).
std::optional<Value> powByConstant(Builder &b, const Value &x, double y);
/// Whether glibc's vector math library (libmvec) is loaded, so kernels may call it.
bool vectorLibmAvailable();
/// The libm function `kind` computes when libmvec has a vector form of it ("" when not).
std::string_view vectorLibmFunction(ExprKind kind);
/// `kind` on f64 vectors of 2, 4 or 8 lanes (and erfc on f32 vectors of 4, 8 or 16) as one
/// libmvec call (within 4 ulp), or nullopt.
std::optional<Value> vectorLibmCall(Builder &b, ExprKind kind, std::span<const Value> args);
/// `kind` on a scalar as one call of libm (`erfc`, `erfcf`): math without an MLIR op.
Value scalarLibmCall(Builder &b, ExprKind kind, const Value &x);
/// `v` (compute type of `from`) converted to the compute type of `to`, with the rounding of `to`.
Value emitCast(Builder &b, const Value &v, DType from, DType to);
/// Loads `buffer` at flat offset `index` (at the first lane); `lanes` > 0 with `coeff` the
/// offset's coefficient along the lane variable (0: scalar, 1: vector.load, else a gather).
Value emitLoad(Builder &b, const KernelScope &scope, BufferId buffer, const std::string &index,
               int lanes, const std::optional<std::string> &coeff, bool contiguous);
/// Loads `buffer` at the flat i64 offsets of the vector `offsets` (vector.gather).
Value emitGather(Builder &b, const KernelScope &scope, BufferId buffer, const Value &offsets);
/// `lanes` elements `stride` apart from `index` (a pooling window's column, a stride-2
/// convolution's input), for a small constant stride: one masked load of the contiguous span
/// (the mask stops at the last element read, so nothing past it is touched) and a shuffle that
/// keeps every `stride`-th element (up to passes::schedule::kMaxShuffledStride); a gather costs
/// several times more.
Value emitStridedLoad(Builder &b, const KernelScope &scope, BufferId buffer,
                      const std::string &index, int lanes, int64_t stride);
/// Stores `v` (compute type of the buffer's dtype) at `index`: W elements `stride` apart when
/// `lanes` > 0 (a scalar v is broadcast): contiguous, or for a stride of up to
/// kMaxShuffledStride one masked store of the span with the values shuffled into place.
void emitStore(Builder &b, const KernelScope &scope, BufferId buffer, const std::string &index,
               Value v, int lanes, int64_t stride = 1);

/// The running state of one reduction (emit_reduce.cc).
class Accumulator {
public:
  Accumulator(Builder &b, ReductionKind kind, DType dtype, int lanes)
      : b_(b), kind_(kind), dtype_(dtype), lanes_(lanes) {}
  /// Initial state values (the identity, or an empty argmax/welford state).
  std::vector<Value> init();
  /// The state after one more value `v`; `position` (index) is the row-major position in the
  /// reduction ranges (argmax/argmin only).
  std::vector<Value> update(const std::vector<Value> &state, const Value &v,
                            const std::string &position);
  /// Whether the state is one value folded by one associative op (sum/prod/max/min): such
  /// states can be split over several independent accumulators and combined at the end.
  bool foldsOneValue() const;
  /// Whether each fold rounds (a floating-point sum): a long chain of them loses precision
  /// that a blocked accumulation keeps.
  bool rounds() const;
  /// The state of two partial accumulations of a foldsOneValue() reduction, combined.
  std::vector<Value> combine(const std::vector<Value> &a, const std::vector<Value> &b);
  /// Folds the vector state of a sum/prod/max/min/welford into the scalar state `scalar`
  /// (horizontal vectorization).
  std::vector<Value> mergeLanes(const std::vector<Value> &vector, const std::vector<Value> &scalar);
  /// One value per output buffer, in the compute type of its dtype; `count` (index) is the
  /// number of reduced points (welford).
  std::vector<Value> results(const std::vector<Value> &state, const std::string &count);

private:
  Value identity();
  Value reduceLanes(const char *kind, const Value &v);
  Builder &b_;
  ReductionKind kind_;
  DType dtype_;
  int lanes_;
};

} // namespace kiln::codegen::cpu::detail

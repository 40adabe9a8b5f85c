#pragma once
// Internals of the loop-IR → CUDA C emitter (emit*.cc), shared by its translation units only.
//
//   emit_prelude.cc    the device helpers every module starts with
//   emit_writer.cc     Writer (indented text, fresh names), C types and literals per dtype
//   emit_index.cc      SymInt → a C expression on long long
//   emit_expr.cc       BodyWriter: a body DAG → `const T vN = ...;` statements (prims, casts,
//                      loads), split into what depends on inner loop variables and what not
//   emit_pointwise.cc  the grid-stride pointwise kernel and its 128-bit vector twin
//   emit_reduce.cc     reduction kernels: block per output, thread per output, split passes
//   emit_fused.cc      the kernels of one launch of the schedule as one kernel
//   emit_module.cc     kernel signatures, arguments, the module

#include "codegen/cuda/emit.h"
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

namespace kiln::codegen::cuda::detail {

using ir::SymInt;
using ir::loop::BufferId;
using ir::loop::ExprKind;
using ir::loop::ReductionKind;

/// Writes one kernel: lines at the current indentation, `{ }` blocks, fresh names.
class Writer {
public:
  explicit Writer(int depth = 0) : depth_(depth) {}
  void line(std::string_view text);
  template <typename... A> void emit(fmt::format_string<A...> f, A &&...args) {
    line(fmt::format(f, std::forward<A>(args)...));
  }
  /// `header {` and one more indentation level until close().
  void open(std::string_view header);
  void close(std::string_view footer = "}");
  /// `prefix<N>` with N counting up per prefix.
  std::string fresh(std::string_view prefix);
  std::string take() { return std::move(out_); }

private:
  int depth_;
  std::string out_;
  std::map<std::string, int, std::less<>> next_;
};

/// C types of a dtype: in memory (`unsigned short` for float16/bfloat16 bits, `unsigned char`
/// for bool) and in registers (`float` for float16/bfloat16, `bool`).
std::string_view memType(DType t);
std::string_view computeType(DType t);
/// A literal of compute type `t`: `1.5f`, `0.25`, `kiln::inff()`, `-3`, `true`.
std::string floatLiteral(double v, DType t);
std::string intLiteral(int64_t v, DType t);
/// `raw` (a memory value) in the compute type, and back.
std::string fromMemory(const std::string &raw, DType t);
std::string toMemory(const std::string &value, DType t);

/// C expressions of the index symbols in scope: loop variables (`i0`, `r1`) and size symbols
/// (`sz_s0`).
using Names = std::map<std::string, std::string, std::less<>>;
/// The C name of size symbol `s`: `sz_<s>` (never collides with a loop variable or a local).
std::string sizeName(std::string_view symbol);

/// `e` as a C expression of type long long; every symbol of e must be in `names`.
std::string indexExpr(const SymInt &e, const Names &names);

/// The affine pieces of a vector access's offset that must be divisible by the width: the
/// constant part and the coefficient of every loop variable other than `laneVar`; nullopt when
/// the offset is not affine in the node's variables or its lane coefficient is not 1.
std::optional<std::vector<SymInt>> alignmentTerms(const SymInt &offset, const std::string &laneVar,
                                                  const ir::loop::VarRanges &ranges);

/// How a body is split across a loop: what depends on the inner variables is emitted inside.
struct LaneInfo {
  std::string var;                              ///< the vectorized loop variable (`i1`)
  int width = 0;                                ///< lanes per iteration
  std::set<const ir::loop::Expr *> vectorLoads; ///< loads done as one Vec load
};

/// Writes a body's statements. Every node gets a C name (`vN`) or, for constants, a literal.
class BodyWriter {
public:
  /// `locals`: buffers held in registers (by their C names, compute type): a load of one reads
  /// the register. `staged`: loads read from elsewhere (a shared-memory tile), by their C
  /// expression in the compute type.
  BodyWriter(Writer &w, const ir::loop::LoopProgram &program, const ir::loop::Body &body,
             const std::map<BufferId, std::string> *locals = nullptr,
             const std::map<const ir::loop::Expr *, std::string> *staged = nullptr)
      : w_(w), program_(program), body_(body), locals_(locals), staged_(staged) {}

  /// Emits the nodes that do not depend on any of `inner` (loop variable names), with `names`
  /// in scope. With `lane`, vector loads are emitted here as `kiln::Vec` values.
  void emitOuter(const std::set<std::string> &inner, const Names &names,
                 const LaneInfo *lane = nullptr);
  /// Emits the remaining nodes (inside the inner loop); with `lane`, `lane` is the lane index
  /// in scope, vector loads read their element, and `laneDecl` is written first when a
  /// per-lane load or index needs the lane's own index.
  void emitInner(const Names &names, const LaneInfo *lane = nullptr,
                 std::string_view laneDecl = "");
  /// The C expression of the result (compute type of the body's dtype).
  std::string result() const { return ref(body_.result()); }

private:
  bool dependsOn(const ir::loop::Expr *e, const std::set<std::string> &vars);
  void emitNode(const ir::loop::Expr &e, const Names &names);
  std::string ref(const ir::loop::Expr *e) const;
  std::string exprText(const ir::loop::Expr &e, const Names &names) const;

  Writer &w_;
  const ir::loop::LoopProgram &program_;
  const ir::loop::Body &body_;
  const std::map<BufferId, std::string> *locals_;
  const std::map<const ir::loop::Expr *, std::string> *staged_;
  std::map<const ir::loop::Expr *, std::string> names_;
  std::map<const ir::loop::Expr *, std::string> vectors_; ///< vector loads: their Vec value
  std::map<const ir::loop::Expr *, bool> depends_;
};

/// The C expression of prim `kind` over operand expressions (compute types of `operandType`).
std::string primText(ExprKind kind, DType operandType, const std::vector<std::string> &args);
/// `v` (compute type of `from`) converted to `to`, with `to`'s rounding.
std::string castText(const std::string &v, DType from, DType to);

/// What every kernel of a node shares: the program, the node, its signature pieces.
struct NodeContext {
  const ir::loop::LoopProgram *program = nullptr;
  const ir::loop::LoopNode *node = nullptr;
  size_t index = 0;
  std::string baseName;             ///< `node<k>_buf<id>`
  std::vector<BufferId> buffers;    ///< read or written and in memory, in id order
  std::vector<std::string> symbols; ///< the program's size symbols, sorted
  /// Outputs the memory plan keeps out of memory (a Welford count nobody reads): not stored.
  std::set<BufferId> locals;
  /// The range loop the schedule walks in tiles with the lane (LoopOrder::tileVar), or empty.
  std::string tileVar;

  bool writes(BufferId id) const;
  /// Whether the node has indirect loads (its kernels take the index-error record).
  bool checksIndices() const;
  /// Which buffers a kernel takes.
  enum class Buffers : uint8_t { All, Inputs, Outputs };
  /// `extern "C" __global__ void name(<buffers>, <sizes><extra>)`; fills `args`.
  std::string signature(const std::string &name, Buffers which, std::string_view extra,
                        std::vector<KernelArg> &args) const;
  /// Size symbols by their C names.
  Names sizeNames() const;
};

/// `extern "C" __global__ void name(<buffers>, <sizes>[, index error]<extra>)`; fills `args`.
/// `written(id)` says whether a kernel writes buffer `id` (else it is `const`).
std::string kernelSignature(const ir::loop::LoopProgram &program, const std::string &name,
                            std::span<const BufferId> buffers,
                            const std::function<bool(BufferId)> &written,
                            std::span<const std::string> symbols, bool checksIndices,
                            std::string_view extra, std::vector<KernelArg> &args);

/// Whether `node` has indirect loads (its kernel takes the index-error record).
bool hasIndirectLoads(const ir::loop::LoopNode &node);

/// The product of `v` (1 when empty).
SymInt product(const std::vector<SymInt> &v);

/// `const long long v = ...;` lines that split flat index `flat` (row-major over `extents`)
/// into `vars` (the innermost, fastest-moving, last), with C `/` and `%`: indices are >= 0.
void decompose(Writer &w, const std::string &flat, const std::vector<std::string> &vars,
               const std::vector<SymInt> &extents, const Names &names);

/// The offset (as C) at which node outputs store the current range point.
std::string storeOffset(const NodeContext &ctx, BufferId out, const Names &names);

/// The accumulator of a reduction: its C++ type, identity and size in a partials workspace.
struct Accumulator {
  ReductionKind kind;
  DType value;          ///< the body's dtype
  DType element;        ///< what it accumulates in: Float32, Float64, Int32 or Int64
  std::string type;     ///< `kiln::Sum<float>`
  std::string identity; ///< `{0.0f}`
  int stateBytes = 0;

  Accumulator(ReductionKind k, DType t);
  /// `acc.push(v, position);` with v converted to the accumulator's element type.
  std::string push(const std::string &v, const std::string &position) const;
  /// The value stored in output `n` (compute type of that output's dtype).
  std::string result(size_t n, DType outType) const;
};

/// Everything a fused kernel needs: the schedule and the kernels of one launch.
struct LaunchContext {
  const passes::schedule::Schedule *schedule = nullptr;
  std::vector<size_t> kernels;      ///< indices into schedule->kernels, in order
  std::vector<std::string> symbols; ///< the program's size symbols, sorted
  std::set<BufferId> locals;        ///< buffers the memory plan keeps in registers
};
FusedKernel emitFused(const LaunchContext &ctx);

NodeKernels emitPointwise(const NodeContext &ctx, const CudaEmitOptions &options);
NodeKernels emitReduction(const NodeContext &ctx, const CudaEmitOptions &options);

} // namespace kiln::codegen::cuda::detail

#pragma once
/// LoopProgram: buffers and the loop nodes that define them, the loop-level IR of one graph.
///
/// Semantics:
/// - A program declares its input buffers, then loop nodes in execution order. Each node writes
///   one buffer, or one per result when its kind has several (welford: mean, m2, count), and
///   may read the inputs and the buffers of earlier nodes.
/// - Pointwise{ranges, body}: for every point i of ranges, out[i] = body(i).
/// - Reduction{ranges, reductionRanges, kind, body}: for every point i of ranges, out[i] folds
///   body(i, r) over every point r of reductionRanges (row-major order) by kind:
///     sum, prod       numeric; empty: 0 / 1
///     max, min        any dtype; a NaN wins; empty: -inf / +inf (lowest / highest integer)
///     argmax, argmin  i64: the row-major flat index in reductionRanges of the first extreme
///                     element (a NaN counts as extreme, ties keep the first, as in torch);
///                     empty ranges are an error
///     welford         floating; three results: mean and m2 (the sum of squared deviations,
///                     var = m2 / count) in the body's dtype, and count (i64); empty: 0, 0, 0
///   Accumulation is at least as precise as the dtype (the interpreter uses double and int64)
///   and each result is rounded to its dtype once.
/// - Extern{op, inputs, attributes}: a call into a library (`mm`, `conv2d`, ...) that does it
///   better; the lowering gives the types of its output buffers.
/// - The buffers a pointwise or reduction node writes have its ranges as sizes and contiguous
///   strides unless strides are given; point i is stored at the flat offset of i under them.
/// - Text (LoopProgram::str) and hash: see ir/loop/README.md. The hash is FNV-1a over the text,
///   so it is the same in every process and on every machine.

#include "ir/attribute.h"
#include "ir/loop/ops.h"

#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace kiln::ir::loop {

enum class LoopNodeKind : uint8_t {
#define KILN_LOOP_NODE(E, K) E,
#include "ir/loop/loop.def"
};

enum class ReductionKind : uint8_t {
#define KILN_LOOP_REDUCTION(E, K, N) E,
#include "ir/loop/loop.def"
};

std::string_view loopNodeKeyword(LoopNodeKind kind);
std::string_view reductionKeyword(ReductionKind kind);
/// How many buffers a reduction of this kind writes (welford: 3, the others: 1).
int reductionNumResults(ReductionKind kind);

/// One loop node. The fields a kind does not use are empty.
struct LoopNode {
  LoopNodeKind kind = LoopNodeKind::Pointwise;
  std::vector<BufferId> outputs;
  std::vector<SymInt> ranges;          ///< pointwise, reduction
  std::vector<SymInt> reductionRanges; ///< reduction
  ReductionKind reduction = ReductionKind::Sum;
  std::shared_ptr<const Body> body;   ///< pointwise, reduction
  std::string externOp;               ///< extern
  std::vector<BufferId> externInputs; ///< extern (a body's reads are body->reads())
  Attributes attributes;              ///< extern

  /// The loop variables of the body and their extents.
  VarRanges varRanges() const { return VarRanges(ranges, reductionRanges); }
  /// The buffers the node reads.
  std::vector<BufferId> reads() const { return body ? body->reads() : externInputs; }
};

/// The results of a welford reduction.
struct WelfordBuffers {
  BufferId mean, m2, count;
};

class LoopProgram {
public:
  using Strides = std::optional<std::vector<SymInt>>;

  /// Declares the next input (inputs come before the first node). Strides default to
  /// contiguous.
  BufferId addInput(DType dtype, std::vector<SymInt> sizes, Strides strides = {});
  /// Adds a pointwise node; its buffer's dtype is the body's.
  BufferId pointwise(std::vector<SymInt> ranges, const BodyFn &body, Strides strides = {});
  /// Adds a reduction with one result (every kind but welford).
  BufferId reduction(ReductionKind kind, std::vector<SymInt> ranges,
                     std::vector<SymInt> reductionRanges, const BodyFn &body, Strides strides = {});
  /// Adds a welford reduction: mean, m2 and count of the body's values.
  WelfordBuffers welford(std::vector<SymInt> ranges, std::vector<SymInt> reductionRanges,
                         const BodyFn &body);
  /// Adds an extern node writing one buffer per entry of `outputs`.
  std::vector<BufferId> external(std::string op, std::vector<BufferId> inputs,
                                 std::vector<TensorMeta> outputs, Attributes attributes = {});
  /// Appends `id` (written by a node) to the program's results.
  void markOutput(BufferId id);

  const Buffer &buffer(BufferId id) const;
  std::span<const Buffer> buffers() const { return buffers_; }
  std::span<const BufferId> inputs() const { return inputs_; }
  std::span<const BufferId> outputs() const { return outputs_; }
  std::span<const LoopNode> nodes() const { return nodes_; }
  /// The size symbols the program mentions (sizes, strides, ranges, indices), sorted.
  std::set<std::string, std::less<>> sizeSymbols() const;

  /// The program's text (see ir/loop/README.md).
  std::string str() const;
  /// FNV-1a 64 of str(): stable across processes, for kernel caches.
  uint64_t hash() const;

private:
  std::vector<BufferId> addNode(LoopNode node, std::span<const DType> dtypes,
                                const Strides &strides);
  std::vector<BufferId> addReduction(ReductionKind kind, std::vector<SymInt> ranges,
                                     std::vector<SymInt> reductionRanges, const BodyFn &body,
                                     const Strides &strides);
  std::string nextName() const;

  std::vector<Buffer> buffers_;
  std::vector<BufferId> inputs_, outputs_;
  std::vector<LoopNode> nodes_;
};

} // namespace kiln::ir::loop

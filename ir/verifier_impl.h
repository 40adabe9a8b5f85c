#pragma once
// Private to the verifier and the shape rules: the per-op-class dtype and shape rules and their
// shared helpers. Rules throw kiln::Error with the broken rule; verifier.cc prefixes the node.
// The computations (what a result's dtype and sizes must be) live in shape_rules*.cc, where the
// shape-infer pass finds them too; the checks (what else must hold) live in verifier_rules*.cc.

#include "ir/graph.h"
#include "ir/shape_rules.h"
#include "runtime/error.h"

#include <fmt/format.h>

namespace kiln::ir::detail {

/// The op table's checks of a node's signature (verifier.cc), shared by the verifier and
/// GraphBuilder: operand and result counts, then the attributes (names, kinds, required ones).
/// Each throws kiln::Error with the broken rule (`expects 1 operand, got 2`).
void checkArity(OpKind op, int numOperands, int numResults);
void checkAttributes(OpKind op, const Attributes &attrs);

/// Checks the dtype/shape rules of `node`, whose arity, result count and attribute kinds are
/// already verified.
void checkOpRules(const Node &node);

// verifier_rules.cc: elementwise, reductions, constants, sym_size, call.
void checkElementwise(const Node &n);
void checkReduction(const Node &n);
void checkConstant(const Node &n);
void checkSymSize(const Node &n);
void checkCall(const Node &n);
// verifier_rules_shape.cc: views, cat, library calls and composites.
void checkView(const Node &n);
void checkCat(const Node &n);
void checkMatmul(const Node &n);
void checkLinear(const Node &n);
void checkConv(const Node &n);
void checkAttention(const Node &n);
void checkLayerNorm(const Node &n);
void checkLoss(const Node &n);
void checkEmbedding(const Node &n);
void checkScatter(const Node &n);

/// Throws the kiln::Error a broken rule is reported with.
template <typename... Args>
[[noreturn]] void ruleFails(fmt::format_string<Args...> f, Args &&...args) {
  fail(ErrorKind::Value, f, std::forward<Args>(args)...);
}

/// Operand `i` as a tensor, or a rule failure naming its type.
const TensorMeta &tensorOperand(const Node &n, int i);
/// Result 0 as a tensor, or a rule failure.
const TensorMeta &tensorResult(const Node &n);
/// Whether constants prove a != b (a - b is a nonzero constant).
bool provablyDifferent(const SymInt &a, const SymInt &b);
/// Fails unless `got` has the rank of `want` and no dim provably differs; `why` says where `want`
/// comes from.
void expectSizes(std::span<const SymInt> got, std::span<const SymInt> want, std::string_view why);
/// `dim` wrapped into [0, rank) (a 0-d tensor accepts 0 and -1), or a failure naming `what`.
int64_t wrapDim(int64_t dim, int64_t rank, std::string_view what);
/// Fails unless every tensor operand is on the result's device.
void expectSameDevice(const Node &n);
/// Fails unless the result dtype is `want`; `why` names the rule.
void expectResultDType(const Node &n, DType want, std::string_view why);
/// The value of an optional int attribute.
int64_t intAttrOr(const Node &n, std::string_view name, int64_t fallback);

// shape_rules.cc: what the result of each op class must be. Each also fails (ruleFails) when
// the operands leave no result to compute (dims out of range, clashing sizes, wrong ranks).
/// The dtype of an elementwise op's tensor result: promoted, bool for comparisons, the cast's
/// dtype, or the default float dtype for FloatResult ops of non-floating operands.
DType elementwiseDType(const Node &n);
DType reductionDType(const Node &n, DType in);
std::vector<SymInt> reductionSizes(const Node &n, const TensorMeta &in);
/// cat: the promoted dtype and the sizes (operand sizes summed along dim).
std::pair<DType, std::vector<SymInt>> catType(const Node &n, SymAssumptions *assumed);
std::vector<SymInt> matmulSizes(const Node &n, SymAssumptions *assumed);
std::vector<SymInt> linearSizes(const Node &n);
/// conv2d's and conv3d's result sizes (torch's formula per spatial dim).
std::vector<SymInt> convSizes(const Node &n);
std::vector<SymInt> attentionSizes(const Node &n);
std::vector<SymInt> embeddingSizes(const Node &n);
// shape_rules_view.cc
/// The sizes of a view op's result (copy_: operand 0's, after checking operand 1 broadcasts to
/// them). `given` (the result's sizes, for the verifier) resolves a `-1` in a view shape when it
/// has the right rank; otherwise the -1 is the element count divided by the other sizes.
std::vector<SymInt> viewSizes(const Node &n, const TensorMeta &in, std::span<const SymInt> given,
                              SymAssumptions *assumed);
/// The strides eager kiln gives the view `n` of `in` with result sizes `sizes`.
std::vector<SymInt> viewResultStrides(const Node &n, const TensorMeta &in,
                                      std::span<const SymInt> sizes);
/// slice_scatter / select_scatter: the sizes operand 1 must have (those of the slice/select of
/// operand 0 the attributes name).
std::vector<SymInt> scatterSourceSizes(const Node &n, SymAssumptions *assumed);

} // namespace kiln::ir::detail

#pragma once
// Private to the verifier: the per-op-class dtype and shape rules and their shared helpers.
// Rules throw kiln::Error with the broken rule; verifier.cc prefixes the node.

#include "ir/graph.h"
#include "runtime/error.h"

#include <fmt/format.h>

namespace kiln::ir::detail {

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
void checkConv2d(const Node &n);
void checkAttention(const Node &n);
void checkLayerNorm(const Node &n);
void checkEmbedding(const Node &n);

/// Throws the kiln::Error a broken rule is reported with.
template <typename... Args>
[[noreturn]] void ruleFails(fmt::format_string<Args...> f, Args &&...args) {
  fail(ErrorKind::Value, f, std::forward<Args>(args)...);
}

/// Operand `i` as a tensor, or a rule failure naming its type.
const TensorMeta &tensorOperand(const Node &n, int i);
/// Result 0 as a tensor, or a rule failure.
const TensorMeta &tensorResult(const Node &n);
/// `[s0, 128]`.
std::string shapeStr(std::span<const SymInt> sizes);
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
/// The broadcast of the given shapes (numpy rules), failing when constants prove they clash.
std::vector<SymInt> broadcastShapes(const std::vector<std::span<const SymInt>> &shapes);
/// The value of an optional int attribute.
int64_t intAttrOr(const Node &n, std::string_view name, int64_t fallback);

} // namespace kiln::ir::detail

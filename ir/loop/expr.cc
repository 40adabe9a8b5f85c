// The tables behind ExprKind, constant literals, and the text of a body.

#include "ir/loop/expr.h"

#include "ir/attribute.h"

#include <cmath>
#include <fmt/format.h>
#include <map>
#include <set>

namespace kiln::ir::loop {

namespace {

struct ExprInfo {
  std::string_view keyword;
  int arity;
  TypeRule rule;
};

constexpr ExprInfo kExprInfo[] = {
#define KILN_LOOP_LEAF(E, K)                                                                       \
  {K, ExprKind::E == ExprKind::Cast || ExprKind::E == ExprKind::IndirectLoad ? 1 : 0,              \
   TypeRule::None},
#define KILN_LOOP_PRIM(E, M, K, N, R) {K, N, TypeRule::R},
#include "ir/loop/loop.def"
};

/// Shortest text that reads back to the same float: `0.1`, `1e-05`, `2.0`.
std::string formatFloat(float v) {
  if (std::isnan(v))
    return "nan";
  if (std::isinf(v))
    return v < 0 ? "-inf" : "inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos)
    s += ".0";
  return s;
}

} // namespace

std::string_view exprKeyword(ExprKind kind) { return kExprInfo[static_cast<int>(kind)].keyword; }
int exprArity(ExprKind kind) { return kExprInfo[static_cast<int>(kind)].arity; }
TypeRule exprTypeRule(ExprKind kind) { return kExprInfo[static_cast<int>(kind)].rule; }

bool isTranscendental(ExprKind kind) {
  constexpr bool Costly = true, Cheap = false;
  switch (kind) {
#define KILN_LOOP_MATH(E, M, K, N, MLIR, C, COST)                                                  \
  case ExprKind::E:                                                                                \
    return COST;
#include "ir/loop/loop.def"
  case ExprKind::Rsqrt:
  case ExprKind::Sigmoid:
  case ExprKind::Pow:
  case ExprKind::Philox:
    return true;
  default:
    return false;
  }
}

std::string literalStr(const Expr &c) {
  switch (c.dtype) {
  case DType::Bool:
    return c.intValue ? "true" : "false";
  case DType::Int64:
    return std::to_string(c.intValue);
  case DType::Float32:
    return formatFloat(static_cast<float>(c.floatValue));
  case DType::Float64:
    return formatDouble(c.floatValue) + ":f64";
  case DType::Float16:
  case DType::BFloat16:
    return formatFloat(static_cast<float>(c.floatValue)) + ":" +
           std::string(dtypeShortName(c.dtype));
  default:
    return std::to_string(c.intValue) + ":" + std::string(dtypeShortName(c.dtype));
  }
}

std::string indexOutOfRange(int64_t position, int64_t extent) {
  return fmt::format("index {} is out of bounds for a dimension with size {}", position, extent);
}

std::vector<BufferId> Body::reads() const {
  std::set<BufferId> ids;
  for (const Expr *e : order_)
    if (e->isLoad())
      ids.insert(e->buffer);
  return {ids.begin(), ids.end()};
}

std::string Body::str(std::string_view indent) const {
  std::map<const Expr *, int> numbers;
  auto ref = [&](const Expr *e) {
    return e->isConstant() ? literalStr(*e) : fmt::format("%{}", numbers.at(e));
  };
  std::string out;
  for (const Expr *e : order_) {
    if (e->isConstant())
      continue; // printed inline where used
    int n = static_cast<int>(numbers.size());
    numbers.emplace(e, n);
    std::string rhs;
    switch (e->kind) {
    case ExprKind::Load:
      rhs = fmt::format("load {}[{}]", bufferName(e->buffer), e->index.str());
      break;
    case ExprKind::IndirectLoad: {
      // `load buf0[i0*64 + %2 * 64, %2 in [0, 50)]`: the static part, the position's term, and
      // the positions that are in range ([-50, 50) when negative ones count from the end).
      std::string pos = ref(e->operand(0)), base = e->index.str();
      std::string term = e->indirectStride == SymInt(1)
                             ? pos
                             : fmt::format("{} * {}", pos, e->indirectStride.str());
      rhs = fmt::format("load {}[{}{}, {} in [{}, {})]", bufferName(e->buffer),
                        base == "0" ? "" : base + " + ", term, pos,
                        e->wrapsNegative() ? "-" + e->indirectExtent.str() : "0",
                        e->indirectExtent.str());
      break;
    }
    case ExprKind::Index:
      rhs = fmt::format("index {}", e->index.str());
      break;
    case ExprKind::Cast:
      rhs = fmt::format("cast {} to {}", ref(e->operand(0)), dtypeShortName(e->dtype));
      break;
    default: {
      rhs = std::string(exprKeyword(e->kind));
      for (int k = 0; k < e->numOperands; ++k)
        rhs += (k ? ", " : " ") + ref(e->operand(k));
    }
    }
    out += fmt::format("{}%{} = {}\n", indent, n, rhs);
  }
  return out + fmt::format("{}yield {}\n", indent, ref(result_));
}

} // namespace kiln::ir::loop

// A body's expression DAG as CUDA C statements: prims, casts, loads, constants; the split of a
// body into what an inner loop (reduction points, vector lanes) changes and what it does not.

#include "codegen/cuda/emit_impl.h"

#include "runtime/error.h"

namespace kiln::codegen::cuda::detail {

using namespace ir::loop;

namespace {

/// `f` with the float suffix (`expf`) for single precision, bare (`exp`) for double.
std::string mathFn(std::string_view f, DType t) {
  return fmt::format("{}{}", f, t == DType::Float64 ? "" : "f");
}

const char *compareOp(ExprKind kind) {
  switch (kind) {
  case ExprKind::Eq:
    return "==";
  case ExprKind::Ne:
    return "!=";
  case ExprKind::Lt:
    return "<";
  case ExprKind::Le:
    return "<=";
  case ExprKind::Gt:
    return ">";
  default:
    return ">=";
  }
}

} // namespace

std::string primText(ExprKind kind, DType t, const std::vector<std::string> &a) {
  bool fl = isFloating(t);
  std::string_view ct = computeType(t);
  auto binary = [&](const char *op, const char *intFn) {
    return fl ? fmt::format("{} {} {}", a[0], op, a[1])
              : fmt::format("kiln::{}({}, {})", intFn, a[0], a[1]);
  };
  auto bits = [&](const char *boolOp, const char *op) {
    return t == DType::Bool ? fmt::format("{} {} {}", a[0], boolOp, a[1])
                            : fmt::format("({})({} {} {})", ct, a[0], op, a[1]);
  };
  switch (kind) {
  case ExprKind::Neg:
    return fl ? "-" + a[0] : fmt::format("kiln::neg({})", a[0]);
  case ExprKind::Abs:
    return fl                  ? fmt::format("{}({})", t == DType::Float64 ? "fabs" : "fabsf", a[0])
           : t == DType::UInt8 ? a[0]
                               : fmt::format("kiln::abs({})", a[0]);
  case ExprKind::Rsqrt:
    return fmt::format("{}({})", mathFn("rsqrt", t), a[0]);
#define KILN_LOOP_MATH(E, M, K, N, MLIR, C, COST)                                                  \
  case ExprKind::E:                                                                                \
    return N == 1 ? fmt::format("{}({})", mathFn(#C, t), a[0])                                     \
                  : fmt::format("{}({}, {})", mathFn(#C, t), a[0], a[1]);
#include "ir/loop/loop.def"
  case ExprKind::Sigmoid: {
    std::string one = floatLiteral(1.0, t);
    return fmt::format("{} / ({} + {}(-{}))", one, one, mathFn("exp", t), a[0]);
  }
  case ExprKind::Not:
    return t == DType::Bool ? "!" + a[0] : fmt::format("({})~{}", ct, a[0]);
  case ExprKind::Add:
    return binary("+", "add");
  case ExprKind::Sub:
    return binary("-", "sub");
  case ExprKind::Mul:
    return binary("*", "mul");
  case ExprKind::Div:
    return fmt::format("{} / {}", a[0], a[1]);
  case ExprKind::FloorDiv:
    return fmt::format("kiln::floordiv{}({}, {})", fl ? "_f" : "", a[0], a[1]);
  case ExprKind::Mod:
    return fmt::format("kiln::mod{}({}, {})", fl ? "_f" : "", a[0], a[1]);
  case ExprKind::Pow:
    return fl ? fmt::format("{}({}, {})", mathFn("pow", t), a[0], a[1])
              : fmt::format("kiln::pow({}, {})", a[0], a[1]);
  case ExprKind::Max:
    return fmt::format("kiln::max({}, {})", a[0], a[1]);
  case ExprKind::Min:
    return fmt::format("kiln::min({}, {})", a[0], a[1]);
  case ExprKind::Eq:
  case ExprKind::Ne:
  case ExprKind::Lt:
  case ExprKind::Le:
  case ExprKind::Gt:
  case ExprKind::Ge:
    return fmt::format("{} {} {}", a[0], compareOp(kind), a[1]);
  case ExprKind::And:
    return bits("&&", "&");
  case ExprKind::Or:
    return bits("||", "|");
  case ExprKind::Xor:
    return bits("!=", "^");
  case ExprKind::Where:
    return fmt::format("{} ? {} : {}", a[0], a[1], a[2]);
  case ExprKind::Philox:
    return fmt::format("kiln::philox({}, {}, {})", a[0], a[1], a[2]);
  default:
    fail(ErrorKind::Runtime, "cuda emitter: {} is not a prim", exprKeyword(kind));
  }
}

std::string castText(const std::string &v, DType from, DType to) {
  if (from == to)
    return v;
  std::string_view ct = computeType(to);
  if (to == DType::Bool)
    return fmt::format("({} != 0)", v);
  if (isFloating(to)) {
    if (to == DType::Float64)
      return fmt::format("(double){}", v);
    // To f32 first: from f64 or an integer (int64 through double, like the interpreter).
    std::string f32 = from == DType::Float64 ? fmt::format("(float){}", v)
                      : isFloating(from)     ? v
                      : from == DType::Int64 ? fmt::format("(float)(double){}", v)
                                             : fmt::format("(float){}", v);
    if (to == DType::Float16)
      return fmt::format("kiln::round_f16({})", f32);
    if (to == DType::BFloat16)
      return fmt::format("kiln::round_bf16({})", f32);
    return f32;
  }
  if (isFloating(from)) // toward zero, NaN and out of range as the interpreter, then wrapped
    return to == DType::Int64 ? fmt::format("kiln::f2i({})", v)
                              : fmt::format("({})kiln::f2i({})", ct, v);
  return fmt::format("({}){}", ct, v);
}

bool BodyWriter::dependsOn(const Expr *e, const std::set<std::string> &vars) {
  auto it = depends_.find(e);
  if (it != depends_.end())
    return it->second;
  bool d = false;
  if (e->isLoad() || e->kind == ExprKind::Index) {
    std::set<std::string, std::less<>> symbols;
    e->index.collectSymbols(symbols);
    for (const std::string &s : symbols)
      d |= vars.count(s) > 0;
  }
  if (e->kind != ExprKind::Load && e->kind != ExprKind::Index)
    for (const Expr *op : e->operands())
      d |= dependsOn(op, vars);
  depends_[e] = d;
  return d;
}

std::string BodyWriter::ref(const Expr *e) const {
  auto it = names_.find(e);
  KILN_CHECK(it != names_.end(), "cuda emitter: {} used before it was emitted",
             exprKeyword(e->kind));
  return it->second;
}

std::string BodyWriter::exprText(const Expr &e, const Names &names) const {
  switch (e.kind) {
  case ExprKind::Load:
    if (staged_)
      if (auto it = staged_->find(&e); it != staged_->end())
        return it->second;
    if (locals_)
      if (auto it = locals_->find(e.buffer); it != locals_->end())
        return it->second;
    return fromMemory(fmt::format("{}[{}]", bufferName(e.buffer), indexExpr(e.index, names)),
                      program_.buffer(e.buffer).meta.dtype);
  case ExprKind::IndirectLoad: {
    std::string position =
        fmt::format("kiln::checked_position({}, {}, {}, kiln_index_error)", ref(e.operand(0)),
                    indexExpr(e.indirectExtent, names), e.wrapsNegative() ? "true" : "false");
    return fromMemory(fmt::format("{}[{} + {} * {}]", bufferName(e.buffer),
                                  indexExpr(e.index, names), position,
                                  indexExpr(e.indirectStride, names)),
                      program_.buffer(e.buffer).meta.dtype);
  }
  case ExprKind::Index:
    return indexExpr(e.index, names);
  case ExprKind::Cast:
    return castText(ref(e.operand(0)), e.operand(0)->dtype, e.dtype);
  default: {
    std::vector<std::string> args;
    for (const Expr *op : e.operands())
      args.push_back(ref(op));
    return primText(e.kind, e.operand(e.kind == ExprKind::Where ? 1 : 0)->dtype, args);
  }
  }
}

void BodyWriter::emitNode(const Expr &e, const Names &names) {
  if (e.isConstant()) {
    names_[&e] =
        isFloating(e.dtype) ? floatLiteral(e.floatValue, e.dtype) : intLiteral(e.intValue, e.dtype);
    return;
  }
  std::string text = exprText(e, names);
  if (e.kind == ExprKind::Cast && text == ref(e.operand(0))) { // float16 -> float32: no change
    names_[&e] = text;
    return;
  }
  std::string name = w_.fresh("v");
  w_.emit("const {} {} = {};", computeType(e.dtype), name, text);
  names_[&e] = name;
}

void BodyWriter::emitOuter(const std::set<std::string> &inner, const Names &names,
                           const LaneInfo *lane) {
  depends_.clear();
  for (const Expr *e : body_.exprs()) {
    if (!dependsOn(e, inner)) {
      emitNode(*e, names);
    } else if (lane && lane->vectorLoads.count(e)) {
      DType t = program_.buffer(e->buffer).meta.dtype;
      std::string name = w_.fresh("w");
      w_.emit("const kiln::Vec<{}, {}> {} = kiln::load_vec<{}>({} + {});", memType(t), lane->width,
              name, lane->width, bufferName(e->buffer), indexExpr(e->index, names));
      vectors_[e] = name;
    }
  }
}

void BodyWriter::emitInner(const Names &names, const LaneInfo *lane, std::string_view laneDecl) {
  if (lane && !laneDecl.empty())
    for (const Expr *e : body_.exprs())
      if (!names_.count(e) && !vectors_.count(e) && (e->isLoad() || e->kind == ExprKind::Index)) {
        w_.line(laneDecl);
        break;
      }
  for (const Expr *e : body_.exprs()) {
    if (names_.count(e))
      continue;
    auto v = vectors_.find(e);
    if (lane && v != vectors_.end()) {
      std::string name = w_.fresh("v");
      w_.emit("const {} {} = {};", computeType(e->dtype), name,
              fromMemory(v->second + ".v[lane]", e->dtype));
      names_[e] = name;
      continue;
    }
    emitNode(*e, names);
  }
}

} // namespace kiln::codegen::cuda::detail

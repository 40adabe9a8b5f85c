// LowerContext: value refs, broadcasting reads, realization and declines.

#include "passes/lower/lower_context.h"

#include "ir/diagnostic.h"
#include "ir/loop/index.h"
#include "ir/printer.h"
#include "runtime/error.h"

#include <fmt/format.h>
#include <map>

namespace kiln::passes::lower {

namespace {

using Substitution = std::map<std::string, SymInt, std::less<>>;

Substitution bindVars(Idx idx) {
  Substitution s;
  for (size_t k = 0; k < idx.size(); ++k)
    s.emplace(ir::loop::loopVarName(k), idx[k]);
  return s;
}

bool isOne(const SymInt &s) { return s == SymInt(1); }

} // namespace

std::vector<IndexExpr> loopVars(size_t n) {
  std::vector<IndexExpr> vars;
  for (size_t k = 0; k < n; ++k)
    vars.push_back(SymInt::symbol(ir::loop::loopVarName(k)));
  return vars;
}

Val sizeAs(Ops &ops, const SymInt &size, DType dtype) {
  if (std::optional<int64_t> c = size.constant())
    return ops.constant(*c, dtype);
  return ops.cast(ops.indexValue(size), dtype);
}

SymInt numel(std::span<const SymInt> sizes) {
  SymInt n = 1;
  for (const SymInt &s : sizes)
    n = n * s;
  return n;
}

TensorRef TensorRef::of(const LoopProgram &program, BufferId id) {
  const ir::TensorMeta &meta = program.buffer(id).meta;
  return TensorRef{meta.dtype, meta.sizes, id, loopVars(meta.sizes.size()), 0};
}

bool TensorRef::isWholeBuffer(const LoopProgram &program) const {
  if (isFill())
    return false;
  const ir::TensorMeta &meta = program.buffer(buffer).meta;
  return meta.sizes == sizes && index == loopVars(sizes.size());
}

TensorRef TensorRef::view(std::vector<SymInt> newSizes, std::span<const IndexExpr> map) const {
  TensorRef out = *this;
  out.sizes = std::move(newSizes);
  Substitution s = bindVars(map);
  for (IndexExpr &e : out.index)
    e = e.substitute(s);
  return out;
}

DType ScalarRef::dtype() const {
  switch (type) {
  case ir::ScalarType::Int:
    return DType::Int64;
  case ir::ScalarType::Bool:
    return DType::Bool;
  default:
    return DType::Float64;
  }
}

std::optional<double> ScalarRef::literal() const {
  if (const double *d = std::get_if<double>(&value))
    return *d;
  if (const int64_t *i = std::get_if<int64_t>(&value))
    return static_cast<double>(*i);
  if (const SymInt *s = std::get_if<SymInt>(&value); s && s->constant())
    return static_cast<double>(*s->constant());
  return std::nullopt;
}

LowerContext::LowerContext(const ir::Graph &graph, LoopProgram &program)
    : graph_(graph), program_(program) {}

bool LowerContext::has(const ir::Value *v) const { return values_.count(v) != 0; }

const TensorRef &LowerContext::tensor(const ir::Value *v) const {
  auto it = values_.find(v);
  KILN_CHECK(it != values_.end() && std::holds_alternative<TensorRef>(it->second),
             "lowering: value {} has no tensor lowering", v->name());
  return std::get<TensorRef>(it->second);
}

const ScalarRef &LowerContext::scalar(const ir::Value *v) const {
  auto it = values_.find(v);
  KILN_CHECK(it != values_.end() && std::holds_alternative<ScalarRef>(it->second),
             "lowering: value {} has no scalar lowering", v->name());
  return std::get<ScalarRef>(it->second);
}

void LowerContext::define(const ir::Value *v, TensorRef t) { values_.insert_or_assign(v, t); }
void LowerContext::define(const ir::Value *v, ScalarRef s) { values_.insert_or_assign(v, s); }

void LowerContext::decline(const ir::Node &node, const std::string &reason) const {
  ir::ValueNumbering names(graph_);
  std::string results;
  for (const ir::Value *r : node.results())
    results += (results.empty() ? "" : ", ") + names.name(r);
  std::string label = results.empty() ? std::string(node.keyword())
                                      : fmt::format("{} = {}", results, node.keyword());
  throw ir::DiagnosticError(
      ir::Diagnostic{fmt::format("{}: cannot lower: {}", label, reason), "", {}, &node});
}

Val LowerContext::load(Ops &ops, const TensorRef &t, Idx idx) {
  if (t.isFill()) {
    if (t.dtype == DType::Bool)
      return ops.constant(t.fill != 0);
    if (!isFloating(t.dtype))
      return ops.constant(static_cast<int64_t>(t.fill), t.dtype);
    return ops.constant(t.fill, t.dtype);
  }
  Substitution s = bindVars(idx);
  std::vector<IndexExpr> at;
  for (const IndexExpr &e : t.index)
    at.push_back(e.substitute(s));
  return ops.load(t.buffer, at);
}

namespace {

/// The affine forms of t's buffer index in its view variables, or nullopt.
std::optional<std::vector<ir::loop::AffineForm>> affineIndex(const TensorRef &t) {
  ir::loop::VarRanges ranges(t.sizes);
  std::vector<ir::loop::AffineForm> forms;
  for (const IndexExpr &e : t.index) {
    std::optional<ir::loop::AffineForm> f = ir::loop::affineForm(e, ranges);
    if (!f)
      return std::nullopt;
    forms.push_back(std::move(*f));
  }
  return forms;
}

} // namespace

TensorRef LowerContext::gatherSource(const TensorRef &t) {
  if (!t.isFill() && affineIndex(t))
    return t;
  return TensorRef::of(program_, realize(t));
}

Val LowerContext::loadAlong(Ops &ops, const TensorRef &t, Idx idx, size_t dim, Val position,
                            bool wrapNegative) const {
  std::optional<std::vector<ir::loop::AffineForm>> forms = affineIndex(t);
  if (!forms)
    throw Error(ErrorKind::Runtime, "loadAlong: the source was not prepared by gatherSource");
  const std::vector<SymInt> &strides = program_.buffer(t.buffer).meta.strides;
  std::vector<IndexExpr> at(idx.begin(), idx.end());
  at[dim] = 0;
  Substitution s = bindVars(at);
  IndexExpr flat = 0, stride = 0;
  std::string var = ir::loop::loopVarName(dim);
  for (size_t k = 0; k < t.index.size(); ++k) {
    flat = flat + t.index[k].substitute(s) * strides[k];
    if (auto c = (*forms)[k].coeffs.find(var); c != (*forms)[k].coeffs.end())
      stride = stride + c->second * strides[k];
  }
  return ops.loadIndirectFlat(t.buffer, flat, stride, t.sizes[dim], position, wrapNegative);
}

Val LowerContext::scalarVal(Ops &ops, const ScalarRef &s, DType dtype) {
  if (const SymInt *sym = std::get_if<SymInt>(&s.value))
    return sizeAs(ops, *sym, dtype);
  if (const BufferId *b = std::get_if<BufferId>(&s.value))
    return ops.cast(ops.load(*b, std::span<const IndexExpr>{}), dtype);
  if (const int64_t *i = std::get_if<int64_t>(&s.value)) {
    if (dtype == DType::Bool)
      return ops.constant(*i != 0);
    return ops.constant(*i, dtype);
  }
  double d = std::get<double>(s.value);
  if (dtype == DType::Bool)
    return ops.constant(d != 0);
  return ops.constant(d, dtype);
}

Val LowerContext::read(Ops &ops, const ir::Value *v, Idx idx, std::span<const SymInt> outSizes,
                       DType dtype) const {
  if (!v->isTensor())
    return scalarVal(ops, scalar(v), dtype);
  const TensorRef &t = tensor(v);
  size_t lead = outSizes.size() - t.sizes.size();
  std::vector<IndexExpr> point;
  for (size_t k = 0; k < t.sizes.size(); ++k)
    point.push_back(isOne(t.sizes[k]) ? IndexExpr(0) : idx[lead + k]);
  return ops.cast(load(ops, t, point), dtype);
}

TensorRef LowerContext::pointwise(std::vector<SymInt> sizes, const BodyFn &body) {
  return TensorRef::of(program_, program_.pointwise(std::move(sizes), body));
}

BufferId LowerContext::realize(const TensorRef &t) {
  if (t.isWholeBuffer(program_))
    return t.buffer;
  return program_.pointwise(t.sizes, [&](Ops &ops, Idx i) { return load(ops, t, i); });
}

DType promotedOperandDType(const ir::Node &node, int first) {
  std::vector<PromotionOperand> operands;
  for (int i = first; i < node.numOperands(); ++i) {
    const ir::Value *v = node.operand(i);
    if (v->isTensor()) {
      operands.push_back({v->meta().dtype, v->meta().rank() > 0 ? PromotionPriority::Tensor
                                                                : PromotionPriority::ZeroDim});
      continue;
    }
    switch (v->type().scalar()) {
    case ir::ScalarType::Int:
      operands.push_back({DType::Int64, PromotionPriority::Scalar});
      break;
    case ir::ScalarType::Float:
      operands.push_back({DType::Float64, PromotionPriority::Scalar});
      break;
    default:
      operands.push_back({DType::Bool, PromotionPriority::Scalar});
    }
  }
  return resultType(operands);
}

int64_t wrapDim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  return dim < 0 ? dim + r : dim;
}

} // namespace kiln::passes::lower

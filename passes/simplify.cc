#include "passes/simplify.h"

#include "ir/shape_rules.h"
#include "passes/functionalize.h"
#include "runtime/error.h"

#include <algorithm>
#include <cmath>

namespace kiln::passes {

namespace {

using ir::Node;
using ir::OpKind;
using ir::Value;

/// The number a `constant` holds (bools as 0/1), or nullopt for any other value.
std::optional<double> constantNumber(const Value *v) {
  const Node *def = v->definingNode();
  if (def->op() != OpKind::Constant)
    return std::nullopt;
  const ir::Attribute &a = *def->attr("value");
  return a.is<bool>() ? (a.toBool() ? 1.0 : 0.0) : a.toDouble();
}

bool isConstant(const Value *v, double want, bool negativeZero = false) {
  std::optional<double> c = constantNumber(v);
  return c && *c == want && (want != 0 || std::signbit(*c) == negativeZero);
}

bool isFloatingResult(const Value *v) {
  return v->isTensor() ? isFloating(v->meta().dtype) : v->type().scalar() == ir::ScalarType::Float;
}

int64_t wrapDim(int64_t d, int64_t rank) { return d < 0 ? d + std::max<int64_t>(rank, 1) : d; }

/// What rewriting one node gives: a value to use instead of its result, or a change in place.
struct Rewrite {
  Value *replacement = nullptr;
  bool inPlace = false;
};

class Simplifier {
public:
  explicit Simplifier(ir::Graph &graph) : graph_(graph) {
    std::optional<std::vector<Value *>> written = writtenBackInputs(graph);
    functional_ = written.has_value();
    written_ = written.value_or(std::vector<Value *>{});
  }

  Rewrite rewrite(Node &n) {
    switch (n.op()) {
    case OpKind::Add:
    case OpKind::Sub:
    case OpKind::Mul:
    case OpKind::Div:
      return {arithmetic(n)};
    case OpKind::Neg: {
      const Node *inner = n.operand(0)->definingNode();
      return {inner->op() == OpKind::Neg ? sameValue(n, inner->operand(0)) : nullptr};
    }
    case OpKind::Cast:
      return {sameValue(n, n.operand(0))};
    case OpKind::Expand:
      return {same(n, n.operand(0))};
    case OpKind::Transpose:
      return {doubleTranspose(n)};
    case OpKind::View:
    case OpKind::Reshape:
      return reshapeOfReshape(n);
    default:
      return {};
    }
  }

private:
  /// `x` when it has exactly the type of `n`'s result, else null.
  static Value *same(const Node &n, Value *x) {
    return x->type() == n.result()->type() ? x : nullptr;
  }

  /// `same(n, x)` where `n` computed a fresh tensor: only when nothing can write x afterwards
  /// (a functional graph, and x is not an input it writes back).
  Value *sameValue(const Node &n, Value *x) const {
    return functional_ && !sharesStorage(x, written_) ? same(n, x) : nullptr;
  }

  Value *arithmetic(Node &n) {
    Value *a = n.operand(0), *b = n.operand(1);
    bool floating = isFloatingResult(n.result());
    if (n.op() == OpKind::Mul && !floating &&
        (isConstant(a, 0) || isConstant(b, 0) || isConstant(a, 0, true) || isConstant(b, 0, true)))
      return zero(n);
    switch (n.op()) {
    case OpKind::Add: // x + (-0.0) is x for every float; x + 0 only for integers
      if (isConstant(b, 0, floating) || (!floating && isConstant(b, 0, true)))
        return sameValue(n, a);
      if (isConstant(a, 0, floating) || (!floating && isConstant(a, 0, true)))
        return sameValue(n, b);
      return nullptr;
    case OpKind::Sub: // x - 0.0 is x for every float
      return isConstant(b, 0) || (!floating && isConstant(b, 0, true)) ? sameValue(n, a) : nullptr;
    case OpKind::Mul:
      return isConstant(b, 1) ? sameValue(n, a) : isConstant(a, 1) ? sameValue(n, b) : nullptr;
    default: // div
      return isConstant(b, 1) ? sameValue(n, a) : nullptr;
    }
  }

  /// `x * 0` of integers or bools: a zero of the result's type.
  Value *zero(Node &n) {
    const Value *r = n.result();
    bool isBool =
        r->isTensor() ? r->meta().dtype == DType::Bool : r->type().scalar() == ir::ScalarType::Bool;
    ir::Attribute value = isBool ? ir::Attribute(false) : ir::Attribute(int64_t{0});
    return graph_
        .createBefore(&n, OpKind::Constant, {}, {{"value", value}}, {n.result()->type()}, n.loc())
        ->result();
  }

  Value *doubleTranspose(Node &n) {
    const Node *inner = n.operand(0)->definingNode();
    if (inner->op() != OpKind::Transpose)
      return nullptr;
    int64_t rank = n.operand(0)->meta().rank();
    auto dims = [rank](const Node &t) {
      int64_t a = wrapDim(t.attr("dim0")->toInt(), rank),
              b = wrapDim(t.attr("dim1")->toInt(), rank);
      return std::pair(std::min(a, b), std::max(a, b));
    };
    return dims(n) == dims(*inner) ? same(n, inner->operand(0)) : nullptr;
  }

  /// `view(view(x))` → `view(x)` (or x); reshapes only in functional graphs, since whether a
  /// reshape copies depends on its operand's strides.
  Rewrite reshapeOfReshape(Node &n) {
    if (Value *x = same(n, n.operand(0)))
      return {x};
    const Node *inner = n.operand(0)->definingNode();
    bool views = n.op() == OpKind::View && inner->op() == OpKind::View;
    if ((inner->op() != OpKind::View && inner->op() != OpKind::Reshape) ||
        !(views || (functional_ && !sharesStorage(inner->operand(0), written_))))
      return {};
    Value *x = inner->operand(0);
    if (Value *y = views ? same(n, x) : sameValue(n, x))
      return {y};
    Value *old = n.operand(0);
    n.setOperand(0, x);
    try {
      if (ir::inferResultType(n) == n.result()->type())
        return {nullptr, true};
    } catch (const Error &) { // x cannot be viewed that way: keep the two steps
    }
    n.setOperand(0, old);
    return {};
  }

  ir::Graph &graph_;
  bool functional_;
  std::vector<Value *> written_; ///< the inputs a functional graph writes back
};

class SimplifyPass final : public Pass {
public:
  std::string_view name() const override { return "simplify"; }
  bool run(ir::Graph &graph) override { return simplify(graph); }
};

} // namespace

bool simplify(ir::Graph &graph) {
  std::vector<Node *> nodes = graph.nodes();
  Simplifier simplifier(graph);
  bool changed = false;
  for (Node *n : nodes) {
    if (!n->hasTrait(ir::trait::Pure) || n->numResults() != 1)
      continue;
    Rewrite r = simplifier.rewrite(*n);
    if (r.replacement) {
      n->result()->replaceAllUsesWith(r.replacement);
      graph.erase(n);
    }
    changed |= r.replacement || r.inPlace;
  }
  return changed;
}

std::unique_ptr<Pass> createSimplifyPass() { return std::make_unique<SimplifyPass>(); }

} // namespace kiln::passes

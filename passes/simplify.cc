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
      if (Value *joined = tiledPieces(n))
        return {joined};
      [[fallthrough]];
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
    case OpKind::Cat:
      if (Value *v = catOfSplitDims(n))
        return {v};
      return {innermostCatAsStack(n)};
    case OpKind::SelectScatter:
    case OpKind::SliceScatter:
      if (unchangedRegion(n.operand(1), n.operand(0), n))
        return {sameValue(n, n.operand(0))};
      return overwrittenRegion(n);
    case OpKind::Select:
    case OpKind::Slice:
      return {writtenRegion(n)};
    case OpKind::Matmul:
      return {vectorDot(n)};
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

  /// Whether `src` holds what the region of `base` that scatter `at` writes holds: that view
  /// of base itself, or a scatter into that view of a region of the view it leaves unchanged.
  /// Functionalized `A[i, j] -= v` writes the element, then writes the element it just wrote
  /// back through the view it came from (`A[i][j] = t`); those second writes are no-ops.
  static bool unchangedRegion(const Value *src, const Value *base, const Node &at) {
    const Node *d = src->definingNode();
    OpKind view = at.op() == OpKind::SelectScatter ? OpKind::Select : OpKind::Slice;
    if (d->op() == view)
      return sameView(d->operand(0), base) && d->attrs() == at.attrs();
    if (d->op() != OpKind::SelectScatter && d->op() != OpKind::SliceScatter)
      return false;
    const Node *region = d->operand(0)->definingNode();
    return region->op() == view && sameView(region->operand(0), base) &&
           region->attrs() == at.attrs() && unchangedRegion(d->operand(1), d->operand(0), *d);
  }

  /// The view `n` of a scatter's result that reads exactly the region the scatter wrote: the
  /// written value (`A[i, j] += x; A[i, j] /= 9`: the second read is the first sum). A write
  /// through such a view then updates the written value (row by row, in SSA), and the scatter
  /// of the row over the first one's replaces it (overwrittenRegion).
  /// Selects only: a slice of a slice_scatter (`B[1:-1, 1:-1]` of a stencil's new B, read with
  /// its shifted neighbours) stays a read of the scatter, which is stored anyway, rather than
  /// making the written value a second buffer.
  Value *writtenRegion(const Node &n) const {
    const Node *d = n.operand(0)->definingNode();
    return n.op() == OpKind::Select && d->op() == OpKind::SelectScatter && d->attrs() == n.attrs()
               ? sameValue(n, d->operand(1))
               : nullptr;
  }

  /// Whether scatter `n` writes into its base, scatter `d` of the same region, what `d` wrote
  /// there: the same value, or the same value at the same place through a view of the base
  /// (functionalized `A[i, j] -= v` writes back the element it just wrote).
  static bool rewritesSame(const Node &n, const Node &d) {
    if (n.operand(1) == d.operand(1))
      return true;
    const Node *s = n.operand(1)->definingNode(), *s0 = d.operand(1)->definingNode();
    if (!isScatter(*s) || s->op() != s0->op() || s->attrs() != s0->attrs() ||
        s->operand(1) != s0->operand(1))
      return false;
    const Node *through = s->operand(0)->definingNode();
    OpKind view = n.op() == OpKind::SelectScatter ? OpKind::Select : OpKind::Slice;
    return through->op() == view && through->attrs() == n.attrs() &&
           through->operand(0) == n.operand(0);
  }

  static bool isScatter(const Node &n) {
    return n.op() == OpKind::SelectScatter || n.op() == OpKind::SliceScatter;
  }

  /// A scatter over a scatter of the same region: the later write replaces the earlier one
  /// (`A[i, j] = a; A[i, j] = b`), so it scatters into what the earlier one wrote into, or is
  /// the earlier one when it writes the same value there. Only when
  /// nothing else reads the earlier one: a view of it that a nested write goes through keeps the
  /// writes one chain, which lowers to one region test (lower_views.cc).
  Rewrite overwrittenRegion(Node &n) const {
    const Node *d = n.operand(0)->definingNode();
    if (d->op() != n.op() || d->attrs() != n.attrs())
      return {};
    if (rewritesSame(n, *d))
      return {sameValue(n, n.operand(0))};
    if (!functional_ || n.operand(0)->uses().size() != 1)
      return {}; // (a copy_ into the base between the two would be skipped over)
    n.setOperand(0, d->operand(0));
    return {nullptr, true};
  }

  /// Whether a and b are one value or the same select/slice chain of one value (functionalize
  /// makes a fresh view per read; cse merges them only later).
  static bool sameView(const Value *a, const Value *b) {
    if (a == b)
      return true;
    const Node *x = a->definingNode(), *y = b->definingNode();
    return x->op() == y->op() && (x->op() == OpKind::Select || x->op() == OpKind::Slice) &&
           x->attrs() == y->attrs() && sameView(x->operand(0), y->operand(0));
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

  /// One piece of a sum of slice_scatters into zeros: `value` lands at [start, end) of `dim`.
  struct Piece {
    ir::SymInt start, end;
    Value *value;
  };

  /// Collects the pieces of `v` when it is a slice_scatter of a value into zeros (step 1) or an
  /// add of such sums of the same type, all along one dim; false for anything else.
  static bool collectPieces(Value *v, std::optional<int64_t> &dim, std::vector<Piece> &out) {
    const Node *d = v->definingNode();
    if (d->op() == OpKind::Add) {
      for (Value *operand : d->operands())
        if (operand->type() != v->type() || !collectPieces(operand, dim, out))
          return false;
      return true;
    }
    if (d->op() != OpKind::SliceScatter)
      return false;
    const Node *base = d->operand(0)->definingNode();
    const ir::Attribute *step = d->attr("step"), *at = d->attr("dim");
    if (base->op() != OpKind::Full || base->attr("value")->toDouble() != 0 ||
        (step && step->toInt() != 1) || d->operand(1)->meta().dtype != v->meta().dtype)
      return false;
    int64_t rank = v->meta().rank();
    int64_t pieceDim = wrapDim(at ? at->toInt() : 0, rank);
    if (dim && *dim != pieceDim)
      return false;
    dim = pieceDim;
    const ir::Attribute *start = d->attr("start"), *end = d->attr("end");
    out.push_back({start ? start->toSymInt() : ir::SymInt(0),
                   end ? end->toSymInt() : v->meta().sizes[pieceDim], d->operand(1)});
    return true;
  }

  /// A sum of slice_scatters into zeros whose pieces tile the whole dim (what the derivatives of
  /// split, chunk and unbind-by-slices accumulate to) as the `cat` of the pieces in order, so
  /// the kernel reads each element once. A -0.0 of a piece stays -0.0, where the sum made it
  /// +0.0 (as eager's split derivative, a cat, gives it).
  Value *tiledPieces(Node &n) {
    std::optional<int64_t> dim;
    std::vector<Piece> pieces;
    if (!n.result()->isTensor() || !collectPieces(n.result(), dim, pieces) || pieces.size() < 2)
      return nullptr;
    std::vector<Value *> ordered;
    ir::SymInt at(0);
    const ir::SymInt &size = n.result()->meta().sizes[*dim];
    while (ordered.size() < pieces.size()) {
      auto next = std::find_if(pieces.begin(), pieces.end(),
                               [&](const Piece &p) { return p.start == at && p.end != at; });
      if (next == pieces.end())
        return nullptr; // a gap or an overlap
      ordered.push_back(next->value);
      at = next->end;
    }
    if (at != size)
      return nullptr;
    return graph_
        .createBefore(&n, OpKind::Cat, ordered, {{"dim", *dim}}, {n.result()->type()}, n.loc())
        ->result();
  }

  /// `cat(reshape(y0), reshape(y1), ...)` along a dim each reshape merged from several dims of
  /// its y (with the same inner factors) as `reshape(cat(y0, y1, ...))` along the outermost of
  /// them: attention's `transpose(1, 2).reshape(b, t, h * d)` pieces of a qkv gradient. The
  /// merged index then needs no division per element, and the cat selects its operand by an
  /// index that is not the innermost (vector) one. Values and their order are unchanged.
  Value *catOfSplitDims(Node &n) {
    const ir::TensorMeta &out = n.result()->meta();
    const ir::Attribute *at = n.attr("dim");
    int64_t rank = out.rank(), dim = wrapDim(at ? at->toInt() : 0, rank);
    std::vector<Value *> inner;
    std::optional<std::vector<ir::SymInt>> factors; // the merged dims after the first
    for (Value *piece : n.operands()) {
      const Node *d = piece->definingNode();
      if ((d->op() != OpKind::Reshape && d->op() != OpKind::View) || !piece->isTensor())
        return nullptr;
      Value *y = d->operand(0);
      const std::vector<ir::SymInt> &ys = y->meta().sizes, &ps = piece->meta().sizes;
      int64_t extra = static_cast<int64_t>(ys.size()) - rank;
      if (extra < 1 || y->meta().dtype != out.dtype)
        return nullptr;
      for (int64_t k = 0; k < rank; ++k)
        if (k != dim && ys[k < dim ? k : k + extra] != ps[k])
          return nullptr;
      std::vector<ir::SymInt> f(ys.begin() + dim + 1, ys.begin() + dim + 1 + extra);
      if (factors && *factors != f)
        return nullptr;
      factors = std::move(f);
      inner.push_back(y);
    }
    return reshapedCat(n, std::move(inner), dim);
  }

  /// A cat along the innermost dim of operands of one constant size S (rotary embeddings'
  /// `cat(-x2, x1)`) as the reshape of their stack along a new dim before it: the kernel then
  /// chooses the operand by that outer index and reads each one with the vector lane, where a
  /// choice along the lane itself needs a clamped, unvectorizable load per operand.
  Value *innermostCatAsStack(Node &n) {
    const ir::TensorMeta &out = n.result()->meta();
    int64_t rank = out.rank();
    const ir::Attribute *at = n.attr("dim");
    if (rank == 0 || wrapDim(at ? at->toInt() : 0, rank) != rank - 1 || n.numOperands() < 2)
      return nullptr;
    std::optional<int64_t> size = n.operand(0)->meta().sizes.back().constant();
    constexpr int64_t kMinLane = 8; // shorter pieces gain nothing from the lane
    if (!size || *size < kMinLane)
      return nullptr;
    for (Value *piece : n.operands())
      if (piece->meta().sizes.back() != ir::SymInt(*size))
        return nullptr;
    std::vector<Value *> lifted;
    for (Value *piece : n.operands())
      lifted.push_back(ir::createTypedBefore(graph_, &n, OpKind::Unsqueeze, {piece},
                                             {{"dim", rank - 1}}, n.loc()));
    return reshapedCat(n, std::move(lifted), rank - 1);
  }

  /// The matmul of two floating vectors as sum(a * b): one reduction kernel that fuses with what
  /// computes its operands, where a library dot costs more to call than to run at the lengths
  /// loops take (a row of a triangular solve).
  Value *vectorDot(Node &n) {
    const Value *a = n.operand(0), *b = n.operand(1);
    const ir::TensorMeta &out = n.result()->meta();
    if (a->meta().rank() != 1 || b->meta().rank() != 1 || !isFloating(out.dtype) ||
        a->meta().dtype != out.dtype || b->meta().dtype != out.dtype)
      return nullptr;
    Value *products =
        ir::createTypedBefore(graph_, &n, OpKind::Mul, {n.operand(0), n.operand(1)}, {}, n.loc());
    return same(n, ir::createTypedBefore(graph_, &n, OpKind::Sum, {products}, {}, n.loc()));
  }

  /// `cat(pieces, dim)` reshaped to the type of the cat `n` it replaces.
  Value *reshapedCat(Node &n, std::vector<Value *> pieces, int64_t dim) {
    Value *joined =
        ir::createTypedBefore(graph_, &n, OpKind::Cat, std::move(pieces), {{"dim", dim}}, n.loc());
    const std::vector<ir::SymInt> &sizes = n.result()->meta().sizes;
    std::vector<ir::SymInt> shape(sizes.begin(), sizes.end());
    return graph_
        .createBefore(&n, OpKind::Reshape, {joined}, {{"shape", shape}}, {n.result()->type()},
                      n.loc())
        ->result();
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
  Simplifier simplifier(graph);
  bool changed = false;
  // A rewrite may create nodes that simplify further (the cat a sum of slice_scatters becomes);
  // a few rounds reach them.
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    bool roundChanged = false;
    for (Node *n : graph.nodes()) {
      if (!n->hasTrait(ir::trait::Pure) || n->numResults() != 1)
        continue;
      Rewrite r = simplifier.rewrite(*n);
      if (r.replacement) {
        n->result()->replaceAllUsesWith(r.replacement);
        graph.erase(n);
      }
      roundChanged |= r.replacement || r.inPlace;
    }
    changed |= roundChanged;
    if (!roundChanged)
      break;
  }
  return changed;
}

std::unique_ptr<Pass> createSimplifyPass() { return std::make_unique<SimplifyPass>(); }

} // namespace kiln::passes

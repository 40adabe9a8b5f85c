// Compiled derivatives of the layout ops that move elements without arithmetic: stack, pad,
// interpolation, fold / unfold and advanced indexing. Each gradient sends every output element's
// gradient back to the input element it was read from (summing where several read one).
#include "passes/autodiff/node_vjp.h"

#include "autograd/derivatives_layout.h"

#include <fmt/format.h>

namespace kiln::passes::autodiff {

using ir::OpKind;
using B = GraphRuleBuilder;
using V = ir::Value *;
using Grads = std::vector<V>;
using Sizes = B::Sizes;

namespace {

V padGrad(B &b, const ir::Node &n, V g) {
  const ir::Attribute *p = n.attr("pad");
  const Sizes pads = p ? p->toInts() : Sizes{};
  const ir::Attribute *m = n.attr("mode");
  const std::string mode = m ? m->toString() : "constant";
  if (mode != "constant" && mode != "reflect" && mode != "replicate" && mode != "circular")
    throw Unsupported(fmt::format("pad mode '{}' has no compiled derivative yet", mode));
  if (mode != "constant" && std::any_of(pads.begin(), pads.end(), [](int64_t w) { return w < 0; }))
    throw Unsupported(fmt::format("pad mode '{}' with a negative amount", mode));
  return autograd::rules::pad(b, g, B::sizes(n.operand(0)), pads, mode);
}

/// The [in, out] weights by which an interpolation along spatial dim `d` mixes input positions
/// into output positions, computed by the node's own op on an identity (so the gradient uses the
/// forward kernel's coordinates and weights exactly; nearest and linear are separable).
V interpolationWeights(B &b, const ir::Node &n, int64_t d, int64_t in, int64_t out, DType dt) {
  const int64_t spatial = n.operand(0)->meta().rank() - 2;
  V ids = b.op(OpKind::Arange, {}, {{"end", ir::SymInt(in)}});
  V eye = b.cast(b.eq(b.unsqueeze(ids, 1), b.unsqueeze(ids, 0)), dt);
  Sizes shape{1, in}, outSize;
  for (int64_t k = 0; k < spatial; ++k) {
    shape.push_back(k == d ? in : 1);
    outSize.push_back(k == d ? out : 1);
  }
  ir::Attributes attrs = n.attrs();
  attrs["output_size"] = std::vector<ir::SymInt>(outSize.begin(), outSize.end());
  return b.reshape(b.op(n.op(), {b.reshape(eye, shape)}, std::move(attrs)), {in, out});
}

V interpolationGrad(B &b, const ir::Node &n, V g) {
  Sizes xs = B::sizes(n.operand(0)), gs = B::sizes(g);
  const int64_t rank = static_cast<int64_t>(xs.size());
  V grad = g;
  for (int64_t d = 0; d + 2 < rank; ++d) {
    const int64_t dim = d + 2;
    if (xs[dim] == gs[dim] && n.op() == OpKind::UpsampleNearest)
      continue; // nearest between equal sizes copies
    V w = interpolationWeights(b, n, d, xs[dim], gs[dim], B::dtype(g));
    V last = b.transpose(grad, dim, -1); // [..., out] @ [out, in]
    grad = b.transpose(b.matmul(last, b.transpose(w, 0, 1)), dim, -1);
  }
  return grad;
}

ir::Attributes windowAttrs(const ir::Node &n) {
  ir::Attributes attrs;
  for (const char *name : {"kernel_size", "dilation", "padding", "stride"})
    attrs[name] = n.attr(name)->toInts();
  return attrs;
}

/// x[..., index, ...] reads along `dim`: the gradient is added back at the (wrapped) positions.
V indexGrad(B &b, const ir::Node &n, V g) {
  V x = n.operand(0), index = n.operand(1);
  Sizes xs = B::sizes(x);
  const int64_t dim = wrapDim(n.attr("dim")->toInt(), static_cast<int64_t>(xs.size()));
  V i = b.cast(index, DType::Int64);
  i = b.reshape(b.where(b.ltScalar(i, 0.0), b.add(i, b.integer(xs[dim])), i), {-1});
  Sizes rows(xs.begin(), xs.begin() + dim);
  rows.push_back(-1);
  rows.insert(rows.end(), xs.begin() + dim + 1, xs.end());
  return b.indexAdd(xs, dim, i, b.reshape(g, rows));
}

} // namespace

bool hasLayoutVjp(OpKind op) {
  switch (op) {
  case OpKind::Stack:
  case OpKind::Pad:
  case OpKind::UpsampleNearest:
  case OpKind::UpsampleLinear:
  case OpKind::Unfold:
  case OpKind::Fold:
  case OpKind::Index:
    return true;
  default:
    return false;
  }
}

std::optional<Grads> layoutVjp(B &b, const ir::Node &n, V g, autograd::rules::Needs need) {
  switch (n.op()) {
  case OpKind::Stack: {
    std::vector<DType> dtypes;
    for (int i = 0; i < n.numOperands(); ++i)
      dtypes.push_back(B::dtype(n.operand(i)));
    return autograd::rules::stack(
        b, g, wrapDim(n.attr("dim") ? n.attr("dim")->toInt() : 0, g->meta().rank()), dtypes, need);
  }
  case OpKind::Pad:
    return Grads{padGrad(b, n, g)};
  case OpKind::UpsampleNearest:
  case OpKind::UpsampleLinear:
    return Grads{interpolationGrad(b, n, g)};
  case OpKind::Unfold: { // im2col's adjoint is col2im, which sums overlapping windows
    Sizes xs = B::sizes(n.operand(0));
    ir::Attributes attrs = windowAttrs(n);
    attrs["output_size"] = Sizes{xs[2], xs[3]};
    return Grads{b.op(OpKind::Fold, {g}, std::move(attrs))};
  }
  case OpKind::Fold:
    return Grads{b.op(OpKind::Unfold, {g}, windowAttrs(n))};
  case OpKind::Index:
    return Grads{need[0] ? indexGrad(b, n, g) : nullptr, nullptr};
  default:
    return std::nullopt;
  }
}

} // namespace kiln::passes::autodiff

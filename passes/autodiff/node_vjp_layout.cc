// Compiled derivatives of the layout ops that move elements without arithmetic: stack, pad,
// interpolation, fold / unfold and advanced indexing. Each gradient sends every output element's
// gradient back to the input element it was read from (summing where several read one).
#include "passes/autodiff/node_vjp.h"

#include <fmt/format.h>

namespace kiln::passes::autodiff {

using ir::OpKind;
using B = GraphRuleBuilder;
using V = ir::Value *;
using Grads = std::vector<V>;
using Sizes = B::Sizes;

namespace {

/// `part` added into zeros of `sizes` at [start, start + its length) along dim.
V placeAt(B &b, V part, const Sizes &sizes, int64_t dim, int64_t start) {
  const int64_t len = B::sizes(part)[dim];
  return b.sliceBackward(part, sizes, dim, start, start + len, 1);
}

/// The gradient of one padded dim (n input elements, `left` and `right` added) for the modes
/// that read input elements: reflect, replicate and circular.
V padDimGrad(B &b, V g, int64_t dim, int64_t left, int64_t right, const std::string &mode) {
  Sizes xs = B::sizes(g);
  const int64_t n = xs[dim] - left - right;
  xs[dim] = n;
  V grad = b.slice(g, dim, left, left + n, 1);
  V before = left ? b.slice(g, dim, 0, left, 1) : nullptr;
  V after = right ? b.slice(g, dim, left + n, left + n + right, 1) : nullptr;
  if (mode == "reflect") { // out[left - 1 - k] = x[k + 1]; out[left + n + k] = x[n - 2 - k]
    if (before)
      grad = b.add(grad, placeAt(b, b.flip(before, {dim}), xs, dim, 1));
    if (after)
      grad = b.add(grad, placeAt(b, b.flip(after, {dim}), xs, dim, n - 1 - right));
  } else if (mode == "replicate") { // every added element reads an edge
    if (before)
      grad = b.add(grad, placeAt(b, b.sum(before, Sizes{dim}, true), xs, dim, 0));
    if (after)
      grad = b.add(grad, placeAt(b, b.sum(after, Sizes{dim}, true), xs, dim, n - 1));
  } else if (mode == "circular") { // out[j] = x[(j - left) mod n]
    if (before)
      grad = b.add(grad, placeAt(b, before, xs, dim, n - left));
    if (after)
      grad = b.add(grad, placeAt(b, after, xs, dim, 0));
  } else {
    throw Unsupported(fmt::format("pad mode '{}' has no compiled derivative yet", mode));
  }
  return grad;
}

V padGrad(B &b, const ir::Node &n, V g) {
  const ir::Attribute *p = n.attr("pad");
  Sizes pads = p ? p->toInts() : Sizes{};
  const ir::Attribute *m = n.attr("mode");
  const std::string mode = m ? m->toString() : "constant";
  if (mode == "constant") { // the inverse crop (a crop's inverse is a zero fill)
    for (int64_t &v : pads)
      v = -v;
    return b.op(OpKind::Pad, {g}, {{"pad", pads}, {"value", 0.0}});
  }
  const int64_t rank = n.operand(0)->meta().rank();
  V grad = g;
  for (size_t i = 0; i + 1 < pads.size(); i += 2) {
    if (pads[i] < 0 || pads[i + 1] < 0)
      throw Unsupported(fmt::format("pad mode '{}' with a negative amount", mode));
    grad = padDimGrad(b, grad, rank - 1 - static_cast<int64_t>(i / 2), pads[i], pads[i + 1], mode);
  }
  return grad;
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
    const int64_t dim = wrapDim(n.attr("dim") ? n.attr("dim")->toInt() : 0, g->meta().rank());
    Grads r(n.numOperands());
    for (int i = 0; i < n.numOperands(); ++i)
      if (need[i])
        r[i] = b.cast(b.select(g, dim, i), B::dtype(n.operand(i)));
    return r;
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

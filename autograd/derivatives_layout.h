#pragma once
/// Derivative rules of the scans, products, vector norms, layout ops (roll, repeat) and
/// index-driven reads and writes (gather, index_select, scatter, scatter_add, index_add), written
/// once against a builder `B` as in derivatives.h: eager autograd (autograd/ops_sort_scan.cc,
/// ops_shape.cc, ops_scatter.cc) and compiled training (passes/autodiff/node_vjp_math.cc) both
/// run them. Dims arrive wrapped (non-negative).

#include "autograd/derivatives.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace kiln::autograd::rules {

// ---- scans -------------------------------------------------------------------------------------

/// cumsum: each input reaches every later output, so its gradient is the reversed running sum.
template <class B> V<B> cumsum(B &b, const V<B> &g, int64_t dim, DType inputDtype) {
  return b.cast(b.flip(b.cumsum(b.flip(g, {dim}), dim), {dim}), inputDtype);
}

/// logcumsumexp: grad_i = sum over j >= i of g_j exp(x_i - y_j), taken in log space with g split
/// by sign (torch's formulation): exp(x + rlcse(log g+ - y)) - exp(x + rlcse(log g- - y)), where
/// rlcse is the scan run from the end.
template <class B>
V<B> logcumsumexp(B &b, const V<B> &g, const V<B> &x, const V<B> &y, int64_t dim) {
  auto part = [&](const V<B> &positive) {
    V<B> t = b.flip(b.sub(b.log(positive), y), {dim});
    return b.exp(b.add(x, b.flip(b.logcumsumexp(t, dim), {dim})));
  };
  V<B> up = b.zeroWhere(g, b.leScalar(g, 0.0));          // max(g, 0), NaN kept
  V<B> down = b.zeroWhere(b.neg(g), b.geScalar(g, 0.0)); // max(-g, 0)
  return b.sub(part(up), part(down));
}

// ---- products and norms ------------------------------------------------------------------------

/// Exclusive products along dim from the left and from the right: their product at i is the
/// product of every other element, exact with zeros.
template <class B> V<B> othersProduct(B &b, const V<B> &x, int64_t dim) {
  auto sizes = B::sizes(x);
  const int64_t n = sizes[dim];
  auto edge = sizes;
  edge[dim] = 1;
  V<B> ones = b.addScalar(b.zeros(edge, B::dtype(x)), 1.0);
  auto exclusive = [&](const V<B> &v) {
    return b.cumprod(b.cat({ones, b.slice(v, dim, 0, n - 1, 1)}, dim), dim);
  };
  return b.mul(exclusive(x), b.flip(exclusive(b.flip(x, {dim})), {dim}));
}

/// prod over one dim (or all of x when absent); x is in the product's dtype.
template <class B>
V<B> prod(B &b, const V<B> &g, const V<B> &x, std::optional<int64_t> dim, bool keepdim) {
  auto sizes = B::sizes(x);
  if (sizes.empty())
    return g;
  if (!dim) {
    V<B> flat = b.reshape(x, {-1});
    if (B::sizes(flat)[0] == 0)
      return b.zeros(sizes, B::dtype(g));
    return b.mul(g, b.reshape(othersProduct(b, flat, 0), sizes));
  }
  if (sizes[*dim] == 0)
    return b.zeros(sizes, B::dtype(g));
  return b.mul(keepdim ? g : b.unsqueeze(g, *dim), othersProduct(b, x, *dim));
}

/// The vector ord-norm y of x: sign(x) |x|^(ord-1) / y^(ord-1) (x / y for 2), zero where y is;
/// the inf-norms give g to the extremes of |x|, split evenly; ord 0 is flat.
template <class B>
V<B> vectorNorm(B &b, const V<B> &g, const V<B> &x, const V<B> &y, double ord, const DimList &dims,
                bool keepdim) {
  const int64_t rank = static_cast<int64_t>(B::sizes(x).size());
  V<B> gk = keepdim ? g : b.unsqueezeReduced(g, dims, rank);
  V<B> yk = keepdim ? y : b.unsqueezeReduced(y, dims, rank);
  V<B> r;
  if (ord == 0.0) {
    r = b.scale(x, 0.0);
  } else if (ord == 1.0) {
    r = b.mul(gk, b.sign(x));
  } else if (std::isinf(ord)) {
    V<B> mask = b.eq(b.abs(x), yk);
    V<B> count = b.sum(b.cast(mask, B::dtype(x)), dims, true);
    r = b.zeroWhere(b.mul(b.div(gk, count), b.sign(x)), b.logicalNot(mask));
  } else if (ord == 2.0) {
    r = b.zeroWhere(b.mul(gk, b.div(x, yk)), b.eqScalar(yk, 0.0));
  } else {
    V<B> local = b.mul(b.sign(x), b.powScalar(b.abs(x), ord - 1.0));
    r = b.zeroWhere(b.mul(gk, b.div(local, b.powScalar(yk, ord - 1.0))), b.eqScalar(yk, 0.0));
  }
  return b.cast(b.expand(r, B::sizes(x)), B::dtype(x));
}

// ---- layout ------------------------------------------------------------------------------------

/// roll back by the negated shifts; no dims rolls the flattened tensor.
template <class B> V<B> roll(B &b, const V<B> &g, const Shape &shifts, const Shape &dims) {
  Shape back;
  for (int64_t s : shifts)
    back.push_back(-s);
  if (dims.empty())
    return b.reshape(b.roll(b.reshape(g, {-1}), back, {0}), B::sizes(g));
  return b.roll(g, back, dims);
}

/// repeat: output dim i holds reps[i] copies of the (left-padded) input dim: view it as
/// (reps[i], size) pairs and sum the copies.
template <class B> V<B> repeat(B &b, const V<B> &g, const Shape &inputSizes, const Shape &reps) {
  const size_t lead = reps.size() - inputSizes.size();
  Shape split, summed;
  for (size_t i = 0; i < reps.size(); ++i) {
    summed.push_back(static_cast<int64_t>(split.size()));
    split.push_back(reps[i]);
    split.push_back(i < lead ? 1 : inputSizes[i - lead]);
  }
  return b.reshape(b.sum(b.reshape(g, split), DimList(summed), false), inputSizes);
}

/// Where an input of a cat lies along its dim: [start, start + length), in its own dtype (a
/// promoted cat's pieces go back in theirs); start -1 for a legacy empty 1-D input, which takes
/// part in no dim and gets no gradient.
struct CatPiece {
  int64_t start = -1, length = 0;
  DType dtype = DType::Float32;
};

/// cat: each piece's gradient is its slice of g.
template <class B>
Out<B> cat(B &b, const V<B> &g, int64_t dim, const std::vector<CatPiece> &pieces,
           const Needs &need) {
  Out<B> r(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    const CatPiece &p = pieces[i];
    if (!need[i] || p.start < 0)
      continue;
    r[i] = b.slice(g, dim, p.start, p.start + p.length, 1);
    if (B::dtype(r[i]) != p.dtype)
      r[i] = b.cast(r[i], p.dtype);
  }
  return r;
}

/// stack: input i's gradient is g's i-th entry along dim, in the input's dtype.
template <class B>
Out<B> stack(B &b, const V<B> &g, int64_t dim, const std::vector<DType> &dtypes,
             const Needs &need) {
  Out<B> r(dtypes.size());
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (!need[i])
      continue;
    r[i] = b.select(g, dim, static_cast<int64_t>(i));
    if (B::dtype(r[i]) != dtypes[i])
      r[i] = b.cast(r[i], dtypes[i]);
  }
  return r;
}

/// `part` added into zeros of `sizes` at [start, start + its length) along dim.
template <class B>
V<B> placeAt(B &b, const V<B> &part, const Shape &sizes, int64_t dim, int64_t start) {
  const int64_t len = B::sizes(part)[dim];
  return b.sliceBackward(part, sizes, dim, start, start + len, 1);
}

/// The gradient of one dim padded by `left` and `right` in a mode that reads input elements:
/// every added element sends its gradient to the element it copied.
template <class B>
V<B> padDim(B &b, const V<B> &g, int64_t dim, int64_t left, int64_t right,
            const std::string &mode) {
  Shape xs = B::sizes(g);
  const int64_t n = xs[dim] - left - right;
  xs[dim] = n;
  V<B> grad = b.slice(g, dim, left, left + n, 1);
  std::optional<V<B>> before, after;
  if (left)
    before = b.slice(g, dim, 0, left, 1);
  if (right)
    after = b.slice(g, dim, left + n, left + n + right, 1);
  if (mode == "reflect") { // out[left - 1 - k] = x[k + 1]; out[left + n + k] = x[n - 2 - k]
    if (before)
      grad = b.add(grad, placeAt(b, b.flip(*before, {dim}), xs, dim, 1));
    if (after)
      grad = b.add(grad, placeAt(b, b.flip(*after, {dim}), xs, dim, n - 1 - right));
  } else if (mode == "replicate") { // every added element reads an edge
    if (before)
      grad = b.add(grad, placeAt(b, b.sum(*before, DimList(Shape{dim}), true), xs, dim, 0));
    if (after)
      grad = b.add(grad, placeAt(b, b.sum(*after, DimList(Shape{dim}), true), xs, dim, n - 1));
  } else { // circular: out[j] = x[(j - left) mod n]
    if (before)
      grad = b.add(grad, placeAt(b, *before, xs, dim, n - left));
    if (after)
      grad = b.add(grad, placeAt(b, *after, xs, dim, 0));
  }
  return grad;
}

/// pad(x, widths, mode): widths pair up from the last dim backwards ((left, right) of dim -1,
/// then of dim -2). Constant padding crops g back (a negative width, a crop, is undone by a
/// zero fill); the other modes add each copied element's gradient to its source.
template <class B>
V<B> pad(B &b, const V<B> &g, const Shape &inputSizes, const Shape &widths,
         const std::string &mode) {
  const int64_t rank = static_cast<int64_t>(inputSizes.size());
  const bool crops = std::any_of(widths.begin(), widths.end(), [](int64_t w) { return w < 0; });
  if (mode == "constant" && crops) {
    Shape inverse;
    for (int64_t w : widths)
      inverse.push_back(-w);
    return b.padConstant(g, inverse);
  }
  V<B> grad = g;
  for (size_t i = 0; i + 1 < widths.size() && static_cast<int64_t>(i / 2) < rank; i += 2) {
    const int64_t dim = rank - 1 - static_cast<int64_t>(i / 2);
    grad = mode == "constant" ? b.slice(grad, dim, widths[i], widths[i] + inputSizes[dim], 1)
                              : padDim(b, grad, dim, widths[i], widths[i + 1], mode);
  }
  return grad;
}

// ---- index-driven reads and writes -------------------------------------------------------------

/// gather: each read position gets the gradients of the outputs that read it.
template <class B>
V<B> gather(B &b, const V<B> &g, const Shape &selfSizes, int64_t dim, const V<B> &index) {
  return b.scatterAdd(selfSizes, dim, index, g);
}

/// index_select (a 1-D index): the selected rows' gradients added back.
template <class B>
V<B> indexSelect(B &b, const V<B> &g, const Shape &selfSizes, int64_t dim, const V<B> &index) {
  return b.indexAdd(selfSizes, dim, index, g);
}

/// scatter(self, dim, index, src): the overwritten positions of self get none; src gets g there.
template <class B> Out<B> scatter(B &b, const V<B> &g, int64_t dim, const V<B> &index, Needs need) {
  Out<B> r(3);
  if (need[0])
    r[0] = b.scatter(g, dim, index, b.zeros(B::sizes(index), B::dtype(g)));
  if (need[2])
    r[2] = b.gather(g, dim, index);
  return r;
}

/// scatter_add(self, dim, index, src): self + the scattered src.
template <class B>
Out<B> scatterAdd(B &b, const V<B> &g, int64_t dim, const V<B> &index, Needs need) {
  Out<B> r(3);
  if (need[0])
    r[0] = g;
  if (need[2])
    r[2] = b.gather(g, dim, index);
  return r;
}

/// index_add(self, dim, index, src, alpha): self + alpha src placed at the (1-D) index.
template <class B>
Out<B> indexAdd(B &b, const V<B> &g, int64_t dim, const V<B> &index, const Shape &srcSizes,
                double alpha, Needs need) {
  Out<B> r(3);
  if (need[0])
    r[0] = g;
  if (need[2])
    r[2] = b.reshape(b.scale(b.indexSelect(g, dim, index), alpha), srcSizes);
  return r;
}

/// embedding(indices, weight): each row's gradient added to the weight row it read; the padding
/// row gets none. `flat` is the indices flattened.
template <class B>
V<B> embedding(B &b, const V<B> &g, const V<B> &flat, const Shape &weightSizes,
               std::optional<int64_t> paddingIdx) {
  V<B> rows = b.reshape(g, {-1, weightSizes[1]});
  if (paddingIdx)
    rows = b.zeroWhere(rows, b.unsqueeze(b.eqScalar(flat, static_cast<double>(*paddingIdx)), 1));
  return b.indexAdd(weightSizes, 0, flat, rows);
}

} // namespace kiln::autograd::rules

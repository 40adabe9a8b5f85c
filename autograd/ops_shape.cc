// Differentiable joins, splits and indexing.
#include "autograd/derivatives_layout.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/ops/factory.h"

namespace kiln::autograd::ops {
namespace {
using B = EagerBuilder;

std::vector<const Tensor *> pointers(std::span<const Tensor> ts) {
  std::vector<const Tensor *> ps;
  for (const Tensor &t : ts)
    ps.push_back(&t);
  return ps;
}

/// The parts of `self` along dim, views recorded by one node whose backward concatenates their
/// gradients (zeros for a part that got none): one pass, not a zero-filled copy of self per part.
std::vector<Tensor> splitSizes(const Tensor &self, const Shape &sizes, int64_t dim) {
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t s : sizes) {
    parts.push_back(self.slice(dim, start, start + s));
    start += s;
  }
  const Tensor *inputs[] = {&self};
  bool recorded = record("SplitBackward0", inputs, parts, [&](const NodePtr &) {
    return [sizes, dim, xs = self.sizes(), dt = self.dtype()](B &b, const Node &, Grads &g) {
      std::vector<Tensor> pieces;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (i < g.size() && g[i].defined()) {
          pieces.push_back(g[i]);
          continue;
        }
        Shape piece = xs;
        piece[dim] = sizes[i];
        pieces.push_back(b.zeros(piece, dt));
      }
      return Grads{pieces.size() == 1 ? pieces[0] : b.cat(pieces, dim)};
    };
  });
  if (recorded) // the parts are views of self's base (an in-place write rewrites it)
    for (Tensor &p : parts)
      markView(p, self, true);
  return parts;
}

Shape sizesOf(const std::vector<Tensor> &parts, int64_t dim) {
  Shape sizes;
  for (const Tensor &p : parts)
    sizes.push_back(p.size(dim));
  return sizes;
}
} // namespace

Tensor cat(std::span<const Tensor> tensors, int64_t dim) {
  Tensor out = kiln::ops::cat(tensors, dim);
  std::vector<const Tensor *> inputs = pointers(tensors);
  record("CatBackward0", inputs, std::span<Tensor>(&out, 1), [&](const NodePtr &) {
    int64_t d = wrapDim(dim, out.dim(), "cat");
    std::vector<rules::CatPiece> pieces;
    int64_t start = 0;
    for (const Tensor &t : tensors) {
      bool skipped = t.dim() == 1 && t.numel() == 0 && out.dim() != 1;
      int64_t len = skipped ? 0 : t.size(d);
      pieces.push_back({skipped ? -1 : start, len, t.dtype()});
      start += len;
    }
    return [pieces, d](B &bd, const Node &n, Grads &g) {
      return rules::cat(bd, g[0], d, pieces, rules::Needs::of(n));
    };
  });
  return out;
}

Tensor stack(std::span<const Tensor> tensors, int64_t dim) {
  Tensor out = kiln::ops::stack(tensors, dim);
  std::vector<const Tensor *> inputs = pointers(tensors);
  record("StackBackward0", inputs, std::span<Tensor>(&out, 1), [&](const NodePtr &) {
    std::vector<DType> dtypes;
    for (const Tensor &t : tensors)
      dtypes.push_back(t.dtype());
    return [d = wrapDim(dim, out.dim(), "stack"), dtypes](B &bd, const Node &node, Grads &g) {
      return rules::stack(bd, g[0], d, dtypes, rules::Needs::of(node));
    };
  });
  return out;
}

namespace {
/// A split's pieces with history: the runtime op computes (and checks) the pieces, which are
/// then taken again as differentiable slices of the same sizes.
std::vector<Tensor> differentiablePieces(const Tensor &self, std::vector<Tensor> plain, int64_t dim,
                                         const char *name) {
  if (!anyRequiresGrad({&self}))
    return plain;
  int64_t d = wrapDim(dim, std::max<int64_t>(self.dim(), 1), name);
  return splitSizes(self, sizesOf(plain, d), d);
}
} // namespace

std::vector<Tensor> split(const Tensor &self, int64_t splitSize, int64_t dim) {
  return differentiablePieces(self, kiln::ops::split(self, splitSize, dim), dim, "split");
}

std::vector<Tensor> splitWithSizes(const Tensor &self, IntList sizes, int64_t dim) {
  return differentiablePieces(self, kiln::ops::splitWithSizes(self, sizes, dim), dim, "split");
}

std::vector<Tensor> chunk(const Tensor &self, int64_t chunks, int64_t dim) {
  return differentiablePieces(self, kiln::ops::chunk(self, chunks, dim), dim, "chunk");
}

std::vector<Tensor> tensorSplit(const Tensor &self, int64_t sections, int64_t dim) {
  return differentiablePieces(self, kiln::ops::tensorSplit(self, sections, dim), dim,
                              "tensor_split");
}

std::vector<Tensor> tensorSplitIndices(const Tensor &self, IntList indices, int64_t dim) {
  return differentiablePieces(self, kiln::ops::tensorSplitIndices(self, indices, dim), dim,
                              "tensor_split");
}

namespace {

/// The gradient of repeat_interleave: each input element's repeats summed back, as an index_add
/// of the output along `dim` at the element each output position repeats (`dim` none: self
/// flattened).
Tensor repeatInterleaveBack(B &b, const Tensor &g, const B::Sizes &sizes,
                            std::optional<int64_t> dim, const Tensor &source) {
  if (!dim) {
    int64_t numel = 1;
    for (int64_t s : sizes)
      numel *= s;
    return b.reshape(b.indexAdd(B::Sizes{numel}, 0, source, g), sizes);
  }
  return b.indexAdd(sizes, *dim, source, g);
}

/// Records repeat_interleave's backward on `out`; `repeats` is 0-d (one count for every
/// element) or holds one count per element.
Tensor recordRepeatInterleave(const char *name, const Tensor &self, Tensor out,
                              const Tensor &repeats, std::optional<int64_t> dim) {
  if (!anyRequiresGrad({&self}))
    return out;
  std::optional<int64_t> d;
  if (dim)
    d = wrapDim(*dim, std::max<int64_t>(self.dim(), 1), "repeat_interleave");
  int64_t n = d ? (self.dim() ? self.size(*d) : 1) : self.numel();
  Tensor counts = repeats.dim() == 0 ? kiln::ops::full({n}, repeats.item(), DType::Int64)
                                     : repeats.to(DType::Int64);
  // Output position -> the input element it repeats, along the repeated dim.
  Tensor source = kiln::ops::repeatInterleaveIndices(counts);
  record(name, {&self}, out, [&](const NodePtr &) {
    return [sizes = self.sizes(), d, source](B &bd, const Node &, Grads &g) {
      return Grads{repeatInterleaveBack(bd, g[0], sizes, d, source)};
    };
  });
  return out;
}

} // namespace

Tensor repeatInterleave(const Tensor &self, int64_t repeats, std::optional<int64_t> dim) {
  return recordRepeatInterleave("RepeatInterleaveBackward0", self,
                                kiln::ops::repeatInterleave(self, repeats, dim),
                                Tensor::scalarTensor(Scalar(repeats), DType::Int64), dim);
}

Tensor repeatInterleave(const Tensor &self, const Tensor &repeats, std::optional<int64_t> dim) {
  return recordRepeatInterleave("RepeatInterleaveBackward1", self,
                                kiln::ops::repeatInterleave(self, repeats, dim), repeats, dim);
}

namespace {

/// Positions of the diagonal `offset` of an (n1 x n2) matrix: row and column index tensors.
std::pair<Tensor, Tensor> diagonalPositions(int64_t n1, int64_t n2, int64_t offset) {
  int64_t r0 = std::max<int64_t>(0, -offset), c0 = std::max<int64_t>(0, offset);
  int64_t len = std::max<int64_t>(0, std::min(n1 - r0, n2 - c0));
  auto range = [len](int64_t from) {
    return kiln::ops::arange(Scalar(from), Scalar(from + len), Scalar(int64_t{1}), DType::Int64);
  };
  return {range(r0), range(c0)};
}

/// The gradient of a diagonal (offset, d1, d2) of a tensor of `sizes`: `g` (the other dims in
/// order, then the diagonal) written onto zeros at the diagonal's positions.
Tensor diagonalBack(B &b, const Tensor &g, const B::Sizes &sizes, DType dtype, int64_t offset,
                    int64_t d1, int64_t d2) {
  const int64_t rank = static_cast<int64_t>(sizes.size());
  Shape order{d1, d2}; // the base with d1, d2 first: index_put with two index tensors
  for (int64_t k = 0; k < rank; ++k)
    if (k != d1 && k != d2)
      order.push_back(k);
  B::Sizes moved;
  for (int64_t k : order)
    moved.push_back(sizes[k]);
  auto [rows, cols] = diagonalPositions(sizes[d1], sizes[d2], offset);
  Shape gOrder{rank - 2}; // the diagonal first, then the other dims
  for (int64_t k = 0; k < rank - 2; ++k)
    gOrder.push_back(k);
  Tensor written = b.indexPutAccumulate(moved, dtype, {rows, cols}, b.permute(g, gOrder));
  Shape inverse(rank);
  for (int64_t k = 0; k < rank; ++k)
    inverse[order[k]] = k;
  return b.permute(written, inverse);
}

} // namespace

Tensor diagonal(const Tensor &self, int64_t offset, int64_t dim1, int64_t dim2) {
  Tensor out = kiln::ops::diagonal(self, offset, dim1, dim2);
  if (!anyRequiresGrad({&self}))
    return out;
  int64_t d1 = wrapDim(dim1, self.dim(), "diagonal"), d2 = wrapDim(dim2, self.dim(), "diagonal");
  bool recorded = record("DiagonalBackward0", {&self}, out, [&](const NodePtr &) {
    return
        [sizes = self.sizes(), dt = self.dtype(), offset, d1, d2](B &bd, const Node &, Grads &g) {
          return Grads{diagonalBack(bd, g[0], sizes, dt, offset, d1, d2)};
        };
  });
  if (recorded)
    markView(out, self);
  return out;
}

Tensor diag(const Tensor &self, int64_t k) {
  if (!anyRequiresGrad({&self}) || (self.dim() != 1 && self.dim() != 2))
    return kiln::ops::diag(self, k); // raises torch's error for other ranks
  if (self.dim() == 2)
    return autograd::contiguous(autograd::ops::diagonal(self, k, 0, 1));
  return autograd::ops::diagEmbed(self, k, 0, 1);
}

Tensor diagEmbed(const Tensor &self, int64_t offset, int64_t dim1, int64_t dim2) {
  Tensor out = kiln::ops::diagEmbed(self, offset, dim1, dim2);
  if (!anyRequiresGrad({&self}))
    return out;
  int64_t d1 = wrapDim(dim1, out.dim(), "diag_embed"), d2 = wrapDim(dim2, out.dim(), "diag_embed");
  record("DiagEmbedBackward0", {&self}, out, [&](const NodePtr &) {
    return [offset, d1, d2](B &, const Node &, Grads &g) {
      return Grads{autograd::ops::diagonal(g[0], offset, d1, d2)};
    };
  });
  return out;
}

Tensor index(const Tensor &self, std::span<const Tensor> indices) {
  Tensor out = kiln::ops::index(self, indices);
  record("IndexBackward0", {&self}, out, [&](const NodePtr &) {
    return [idx = std::vector<Tensor>(indices.begin(), indices.end()), sizes = self.sizes(),
            dt = self.dtype()](B &bd, const Node &, Grads &g) {
      return Grads{bd.indexPutAccumulate(sizes, dt, idx, g[0])};
    };
  });
  return out;
}

Tensor gather(const Tensor &self, int64_t dim, const Tensor &index) {
  Tensor out = kiln::ops::gather(self, dim, index);
  record("GatherBackward0", {&self}, out, [&](const NodePtr &) {
    return [si = SavedTensor(index), sizes = self.sizes(),
            d = wrapDim(dim, std::max<int64_t>(self.dim(), 1), "gather")](B &bd, const Node &n,
                                                                          Grads &g) {
      return Grads{rules::gather(bd, g[0], sizes, d, si.unpack(n))};
    };
  });
  return out;
}

Tensor indexSelect(const Tensor &self, int64_t dim, const Tensor &index) {
  Tensor out = kiln::ops::indexSelect(self, dim, index);
  record("IndexSelectBackward0", {&self}, out, [&](const NodePtr &) {
    return [si = SavedTensor(index), sizes = self.sizes(),
            d = wrapDim(dim, std::max<int64_t>(self.dim(), 1), "index_select")](
               B &bd, const Node &n, Grads &g) {
      return Grads{rules::indexSelect(bd, g[0], sizes, d, si.unpack(n).reshape({-1}))};
    };
  });
  return out;
}

Tensor tril(const Tensor &self, int64_t diagonal) {
  Tensor out = kiln::ops::tril(self, diagonal);
  record("TrilBackward0", {&self}, out, [&](const NodePtr &) {
    return [diagonal](B &bd, const Node &, Grads &g) { return Grads{bd.tril(g[0], diagonal)}; };
  });
  return out;
}

Tensor triu(const Tensor &self, int64_t diagonal) {
  Tensor out = kiln::ops::triu(self, diagonal);
  record("TriuBackward0", {&self}, out, [&](const NodePtr &) {
    return [diagonal](B &bd, const Node &, Grads &g) { return Grads{bd.triu(g[0], diagonal)}; };
  });
  return out;
}

} // namespace kiln::autograd::ops

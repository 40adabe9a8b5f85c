// Differentiable joins, splits and indexing.
#include "autograd/derivatives.h"
#include "autograd/ops.h"
#include "autograd/record.h"

namespace kiln::autograd::ops {
namespace {
using B = EagerBuilder;

std::vector<const Tensor *> pointers(std::span<const Tensor> ts) {
  std::vector<const Tensor *> ps;
  for (const Tensor &t : ts)
    ps.push_back(&t);
  return ps;
}

/// The parts of `self` along dim as differentiable slices, one per size.
std::vector<Tensor> splitSizes(const Tensor &self, const Shape &sizes, int64_t dim) {
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t s : sizes) {
    parts.push_back(autograd::slice(self, dim, start, start + s));
    start += s;
  }
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
    // Legacy empty 1-D inputs take part in no dim: they get no gradient.
    std::vector<std::pair<int64_t, int64_t>> ranges;
    int64_t start = 0;
    for (const Tensor &t : tensors) {
      bool skipped = t.dim() == 1 && t.numel() == 0 && out.dim() != 1;
      int64_t len = skipped ? 0 : t.size(d);
      ranges.push_back({skipped ? -1 : start, len});
      start += len;
    }
    return [ranges, d](B &bd, const Node &n, Grads &g) {
      Grads r(ranges.size());
      for (size_t i = 0; i < ranges.size(); ++i)
        if (n.needsInputGrad(i) && ranges[i].first >= 0)
          r[i] = bd.slice(g[0], d, ranges[i].first, ranges[i].first + ranges[i].second, 1);
      return r;
    };
  });
  return out;
}

Tensor stack(std::span<const Tensor> tensors, int64_t dim) {
  Tensor out = kiln::ops::stack(tensors, dim);
  std::vector<const Tensor *> inputs = pointers(tensors);
  record("StackBackward0", inputs, std::span<Tensor>(&out, 1), [&](const NodePtr &) {
    return [d = wrapDim(dim, out.dim(), "stack"), n = tensors.size()](B &bd, const Node &node,
                                                                      Grads &g) {
      Grads r(n);
      for (size_t i = 0; i < n; ++i)
        if (node.needsInputGrad(i))
          r[i] = bd.select(g[0], d, static_cast<int64_t>(i));
      return r;
    };
  });
  return out;
}

std::vector<Tensor> split(const Tensor &self, int64_t splitSize, int64_t dim) {
  if (!anyRequiresGrad({&self}))
    return kiln::ops::split(self, splitSize, dim);
  std::vector<Tensor> plain = kiln::ops::split(self, splitSize, dim);
  int64_t d = wrapDim(dim, self.dim(), "split");
  return splitSizes(self, sizesOf(plain, d), d);
}

std::vector<Tensor> splitWithSizes(const Tensor &self, IntList sizes, int64_t dim) {
  if (!anyRequiresGrad({&self}))
    return kiln::ops::splitWithSizes(self, sizes, dim);
  std::vector<Tensor> plain = kiln::ops::splitWithSizes(self, sizes, dim); // checks the sizes
  int64_t d = wrapDim(dim, self.dim(), "split");
  return splitSizes(self, sizesOf(plain, d), d);
}

std::vector<Tensor> chunk(const Tensor &self, int64_t chunks, int64_t dim) {
  if (!anyRequiresGrad({&self}))
    return kiln::ops::chunk(self, chunks, dim);
  std::vector<Tensor> plain = kiln::ops::chunk(self, chunks, dim);
  int64_t d = wrapDim(dim, self.dim(), "chunk");
  return splitSizes(self, sizesOf(plain, d), d);
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
      return Grads{bd.scatterAdd(sizes, d, si.unpack(n), g[0])};
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
      return Grads{bd.indexAdd(sizes, d, si.unpack(n).reshape({-1}), g[0])};
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

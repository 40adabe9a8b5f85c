// Differentiable sorts, scans, products, norms and layout ops (flip, roll, repeat).
#include "autograd/autocast.h"
#include "autograd/derivatives_layout.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/ops/compare.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/scan.h"
#include "runtime/ops/sort.h"

#include <limits>

namespace kiln::autograd::ops {
namespace {
using B = EagerBuilder;

/// The values of a selection along dim (sort, topk, cummax, cummin): the gradient scattered back
/// to where each value came from (a value taken by several outputs gets the sum).
std::pair<Tensor, Tensor> selection(const char *name, const Tensor &a, int64_t dim,
                                    std::pair<Tensor, Tensor> result) {
  record(name, {&a}, result.first, [&](const NodePtr &) {
    return [idx = result.second, sizes = a.sizes(),
            d = wrapDim(dim, std::max<int64_t>(a.dim(), 1), name)](B &b, const Node &, Grads &g) {
      return Grads{b.scatterAdd(sizes, d, idx, g[0])};
    };
  });
  return result;
}

} // namespace

std::pair<Tensor, Tensor> sort(const Tensor &a, int64_t dim, bool descending, bool stable) {
  return selection("SortBackward0", a, dim, kiln::ops::sort(a, dim, descending, stable));
}

std::pair<Tensor, Tensor> topk(const Tensor &a, int64_t k, int64_t dim, bool largest, bool sorted) {
  return selection("TopkBackward0", a, dim, kiln::ops::topk(a, k, dim, largest, sorted));
}

std::pair<Tensor, Tensor> cummax(const Tensor &a, int64_t dim) {
  return selection("CummaxBackward0", a, dim, kiln::ops::cummax(a, dim));
}

std::pair<Tensor, Tensor> cummin(const Tensor &a, int64_t dim) {
  return selection("CumminBackward0", a, dim, kiln::ops::cummin(a, dim));
}

namespace {

/// A selection that reduces dim (kthvalue, median, mode): without keepdim the value and index
/// get the dim back (as one) before the gradient is scattered to where each value came from.
std::pair<Tensor, Tensor> reducingSelection(const char *name, const Tensor &a, int64_t dim,
                                            bool keepdim, std::pair<Tensor, Tensor> result) {
  record(name, {&a}, result.first, [&](const NodePtr &) {
    int64_t d = wrapDim(dim, std::max<int64_t>(a.dim(), 1), name);
    return [idx = result.second, sizes = a.sizes(), d,
            keep = keepdim || a.dim() == 0](B &b, const Node &, Grads &g) {
      Tensor i = keep ? idx : idx.unsqueeze(d), grad = keep ? g[0] : b.unsqueeze(g[0], d);
      return Grads{b.scatterAdd(sizes, d, i, grad)};
    };
  });
  return result;
}

} // namespace

std::pair<Tensor, Tensor> maxDim(const Tensor &a, int64_t dim, bool keepdim) {
  return reducingSelection("MaxBackward0", a, dim, keepdim, kiln::ops::maxDim(a, dim, keepdim));
}

std::pair<Tensor, Tensor> minDim(const Tensor &a, int64_t dim, bool keepdim) {
  return reducingSelection("MinBackward0", a, dim, keepdim, kiln::ops::minDim(a, dim, keepdim));
}

std::pair<Tensor, Tensor> kthvalue(const Tensor &a, int64_t k, int64_t dim, bool keepdim) {
  return reducingSelection("KthvalueBackward0", a, dim, keepdim,
                           kiln::ops::kthvalue(a, k, dim, keepdim));
}

std::pair<Tensor, Tensor> medianDim(const Tensor &a, int64_t dim, bool keepdim) {
  return reducingSelection("MedianBackward1", a, dim, keepdim,
                           kiln::ops::medianDim(a, dim, keepdim));
}

std::pair<Tensor, Tensor> nanmedianDim(const Tensor &a, int64_t dim, bool keepdim) {
  return reducingSelection("NanmedianBackward1", a, dim, keepdim,
                           kiln::ops::nanmedianDim(a, dim, keepdim));
}

namespace {

/// median / nanmedian of every element: the gradient goes to the element selected (the lower
/// median, or the first NaN), found as the median of the flattened tensor along its one dim.
Tensor wholeMedian(const char *name, const Tensor &a, bool nan) {
  Tensor out = nan ? kiln::ops::nanmedian(a) : kiln::ops::median(a);
  record(name, {&a}, out, [&](const NodePtr &) {
    Tensor flat = a.reshape({-1});
    Tensor idx =
        (nan ? kiln::ops::nanmedianDim(flat, 0, true) : kiln::ops::medianDim(flat, 0, true)).second;
    return [idx, sizes = a.sizes(), n = flat.numel()](B &b, const Node &, Grads &g) {
      Tensor grad = b.scatterAdd({n}, 0, idx, b.reshape(g[0], {1}));
      return Grads{b.reshape(grad, sizes)};
    };
  });
  return out;
}

} // namespace

Tensor median(const Tensor &a) { return wholeMedian("MedianBackward0", a, false); }

Tensor nanmedian(const Tensor &a) { return wholeMedian("NanmedianBackward0", a, true); }

std::pair<Tensor, Tensor> mode(const Tensor &a, int64_t dim, bool keepdim) {
  return reducingSelection("ModeBackward0", a, dim, keepdim, kiln::ops::mode(a, dim, keepdim));
}

Tensor cumsum(const Tensor &a, int64_t dim, std::optional<DType> dtype) {
  Tensor out = kiln::ops::cumsum(a, dim, dtype);
  record("CumsumBackward0", {&a}, out, [&](const NodePtr &) {
    return [d = wrapDim(dim, std::max<int64_t>(a.dim(), 1), "cumsum"), dt = a.dtype()](
               B &b, const Node &, Grads &g) { return Grads{rules::cumsum(b, g[0], d, dt)}; };
  });
  return out;
}

Tensor cumprod(const Tensor &a, int64_t dim, std::optional<DType> dtype) {
  Tensor out = kiln::ops::cumprod(a, dim, dtype);
  record("CumprodBackward0", {&a}, out, [&](const NodePtr &) {
    return [sa = SavedTensor(a), d = wrapDim(dim, std::max<int64_t>(a.dim(), 1), "cumprod")](
               B &, const Node &n, Grads &g) {
      return Grads{kiln::ops::cumprodBackward(sa.unpack(n), g[0], d)};
    };
  });
  return out;
}

Tensor logcumsumexp(const Tensor &a, int64_t dim) {
  Tensor out = kiln::ops::logcumsumexp(a, dim);
  record("LogcumsumexpBackward0", {&a}, out, [&](const NodePtr &self) {
    return [sa = SavedTensor(a), so = SavedTensor(out, self),
            d = wrapDim(dim, std::max<int64_t>(a.dim(), 1), "logcumsumexp")](B &b, const Node &n,
                                                                             Grads &g) {
      Tensor x = sa.unpack(n);
      if (x.dim() == 0)
        return Grads{g[0]};
      return Grads{rules::logcumsumexp(b, g[0], x, so.unpack(n), d)};
    };
  });
  return out;
}

Tensor prod(const Tensor &a_, std::optional<int64_t> dim, bool keepdim,
            std::optional<DType> dtype) {
  const Tensor a = autocast::widen(a_);
  Tensor out = kiln::ops::prod(a, dim, keepdim, dtype);
  record("ProdBackward0", {&a}, out, [&](const NodePtr &) {
    std::optional<int64_t> d;
    if (dim)
      d = wrapDim(*dim, std::max<int64_t>(a.dim(), 1), "prod");
    return [sa = SavedTensor(a), d, keepdim](B &b, const Node &n, Grads &g) {
      return Grads{rules::prod(b, g[0], sa.unpack(n), d, keepdim)};
    };
  });
  return out;
}

Tensor vectorNorm(const Tensor &a, double ord, const DimList &dims, bool keepdim,
                  std::optional<DType> dtype) {
  Tensor out = kiln::ops::vectorNorm(a, ord, dims, keepdim, dtype);
  record("LinalgVectorNormBackward0", {&a}, out, [&](const NodePtr &self) {
    return [sa = SavedTensor(a), so = SavedTensor(out, self), ord, dims,
            keepdim](B &b, const Node &n, Grads &g) {
      return Grads{rules::vectorNorm(b, g[0], sa.unpack(n), so.unpack(n), ord, dims, keepdim)};
    };
  });
  return out;
}

Tensor nansum(const Tensor &a, const DimList &dims, bool keepdim, std::optional<DType> dtype) {
  Tensor out = kiln::ops::nansum(a, dims, keepdim, dtype);
  record("NansumBackward0", {&a}, out, [&](const NodePtr &) {
    return [sa = SavedTensor(a), dims, keepdim](B &b, const Node &n, Grads &g) {
      Tensor x = sa.unpack(n);
      Tensor spread = rules::sum(b, g[0], rules::infoOf<B>(x), dims, keepdim);
      return Grads{b.zeroWhere(spread, kiln::ops::isnan(x))};
    };
  });
  return out;
}

Tensor flip(const Tensor &self, IntList dims) {
  Tensor out = kiln::ops::flip(self, dims);
  record("FlipBackward0", {&self}, out, [&](const NodePtr &) {
    return [d = Shape(dims.begin(), dims.end())](B &b, const Node &, Grads &g) {
      return Grads{b.flip(g[0], d)};
    };
  });
  return out;
}

Tensor roll(const Tensor &self, IntList shifts, IntList dims) {
  Tensor out = kiln::ops::roll(self, shifts, dims);
  record("RollBackward0", {&self}, out, [&](const NodePtr &) {
    return [s = Shape(shifts.begin(), shifts.end()), d = Shape(dims.begin(), dims.end())](
               B &b, const Node &, Grads &g) { return Grads{rules::roll(b, g[0], s, d)}; };
  });
  return out;
}

Tensor repeat(const Tensor &self, IntList repeats) {
  Tensor out = kiln::ops::repeat(self, repeats);
  record("RepeatBackward0", {&self}, out, [&](const NodePtr &) {
    return [reps = Shape(repeats.begin(), repeats.end()), xs = self.sizes()](
               B &b, const Node &, Grads &g) { return Grads{rules::repeat(b, g[0], xs, reps)}; };
  });
  return out;
}

Tensor tile(const Tensor &self, IntList reps) {
  if (!anyRequiresGrad({&self}))
    return kiln::ops::tile(self, reps);
  Shape full(reps.begin(), reps.end());
  while (static_cast<int64_t>(full.size()) < self.dim())
    full.insert(full.begin(), 1);
  return repeat(self, full);
}

} // namespace kiln::autograd::ops

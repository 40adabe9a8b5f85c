// Differentiable sorts, scans, products, norms and layout ops (flip, roll, repeat).
#include "autograd/autocast.h"
#include "autograd/derivatives.h"
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

/// Exclusive products along dim, from the left and from the right: their product at i is the
/// product of every other element, with zeros handled exactly.
Tensor othersProduct(const Tensor &x, int64_t dim) {
  Tensor ones = kiln::ops::ones(x.select(dim, 0).unsqueeze(dim).sizes(), x.dtype());
  int64_t n = x.size(dim);
  Tensor left = kiln::ops::cumprod(
      kiln::ops::cat(std::vector<Tensor>{ones, x.slice(dim, 0, n - 1)}, dim), dim);
  Tensor rev = kiln::ops::flip(x, {dim});
  Tensor right = kiln::ops::flip(
      kiln::ops::cumprod(kiln::ops::cat(std::vector<Tensor>{ones, rev.slice(dim, 0, n - 1)}, dim),
                         dim),
      {dim});
  return kiln::ops::mul(left, right);
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
    return [d = wrapDim(dim, std::max<int64_t>(a.dim(), 1), "cumsum"),
            dt = a.dtype()](B &b, const Node &, Grads &g) {
      // Each input reaches every later output: a reversed cumulative sum of the gradient.
      Tensor r = kiln::ops::flip(kiln::ops::cumsum(kiln::ops::flip(g[0], {d}), d), {d});
      return Grads{b.cast(r, dt)};
    };
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
  record("LogcumsumexpBackward0", {&a}, out, [&](const NodePtr &) {
    return [sa = SavedTensor(a), so = SavedTensor(out),
            d = wrapDim(dim, std::max<int64_t>(a.dim(), 1), "logcumsumexp")](B &, const Node &n,
                                                                             Grads &g) {
      // grad_i = sum over j >= i of g_j exp(x_i - out_j), in log space with g split by sign
      // (torch's formulation): exp(x + rlcse(log g+ - out)) - exp(x + rlcse(log g- - out)).
      Tensor x = sa.unpack(n), o = so.unpack(n), zero = Tensor::wrapScalar(Scalar(0.0));
      auto part = [&](const Tensor &gp) {
        Tensor t = kiln::ops::sub(kiln::ops::log(gp), o);
        Tensor r = kiln::ops::flip(kiln::ops::logcumsumexp(kiln::ops::flip(t, {d}), d), {d});
        return kiln::ops::exp(kiln::ops::add(x, r));
      };
      Tensor pos = kiln::ops::maximum(g[0], zero),
             neg = kiln::ops::maximum(kiln::ops::neg(g[0]), zero);
      return Grads{kiln::ops::sub(part(pos), part(neg))};
    };
  });
  return out;
}

Tensor prod(const Tensor &a_, std::optional<int64_t> dim, bool keepdim,
            std::optional<DType> dtype) {
  const Tensor a = autocast::widen(a_);
  Tensor out = kiln::ops::prod(a, dim, keepdim, dtype);
  record("ProdBackward0", {&a}, out, [&](const NodePtr &) {
    return [sa = SavedTensor(a), dim, keepdim](B &b, const Node &n, Grads &g) {
      Tensor x = sa.unpack(n);
      if (!dim) {
        Tensor flat = x.reshape({-1});
        Tensor others = othersProduct(flat, 0).reshape(x.sizes());
        return Grads{b.mul(b.expand(b.reshape(g[0], Shape(x.dim(), 1)), x.sizes()), others)};
      }
      int64_t d = wrapDim(*dim, std::max<int64_t>(x.dim(), 1), "prod");
      Tensor gk = keepdim || x.dim() == 0 ? g[0] : b.unsqueeze(g[0], d);
      return Grads{b.mul(b.expand(gk, x.sizes()), othersProduct(x, d))};
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
      Tensor x = sa.unpack(n), y = so.unpack(n);
      int64_t rank = x.dim();
      Tensor gk = keepdim ? g[0] : b.unsqueezeReduced(g[0], dims, rank);
      Tensor yk = keepdim ? y : b.unsqueezeReduced(y, dims, rank);
      Tensor r;
      if (ord == 0.0) {
        r = b.scale(x, 0.0);
      } else if (ord == 1.0) {
        r = b.mul(gk, b.sign(x));
      } else if (std::isinf(ord)) {
        // The gradient goes to the elements reaching the extreme, split evenly, with their sign.
        Tensor mask = b.eq(b.abs(x), yk);
        Tensor count = b.sum(b.cast(mask, x.dtype()), dims, true);
        r = b.zeroWhere(b.mul(b.div(gk, count), b.sign(x)), b.logicalNot(mask));
      } else if (ord == 2.0) {
        r = b.zeroWhere(b.mul(gk, b.div(x, yk)), b.eqScalar(yk, 0.0));
      } else {
        Tensor ax = b.abs(x);
        Tensor num = b.mul(b.sign(x), b.powScalar(ax, ord - 1.0));
        r = b.zeroWhere(b.mul(gk, b.div(num, b.powScalar(yk, ord - 1.0))), b.eqScalar(yk, 0.0));
      }
      return Grads{b.cast(b.expand(r, x.sizes()), x.dtype())};
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
    Shape back;
    for (int64_t s : shifts)
      back.push_back(-s);
    return [back, d = Shape(dims.begin(), dims.end())](B &b, const Node &, Grads &g) {
      return Grads{b.roll(g[0], back, d)};
    };
  });
  return out;
}

Tensor repeat(const Tensor &self, IntList repeats) {
  Tensor out = kiln::ops::repeat(self, repeats);
  record("RepeatBackward0", {&self}, out, [&](const NodePtr &) {
    return [reps = Shape(repeats.begin(), repeats.end()), xs = self.sizes()](B &b, const Node &,
                                                                             Grads &g) {
      // out dim i is reps[i] copies of the (left-padded) input dim: view it as (reps[i], size)
      // pairs and sum the copies.
      const size_t lead = reps.size() - xs.size();
      Shape split, summed;
      for (size_t i = 0; i < reps.size(); ++i) {
        int64_t size = i < lead ? 1 : xs[i - lead];
        summed.push_back(static_cast<int64_t>(split.size()));
        split.push_back(reps[i]);
        split.push_back(size);
      }
      Tensor r = b.sum(b.reshape(g[0], split), DimList(summed), false);
      return Grads{b.reshape(r, xs)};
    };
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

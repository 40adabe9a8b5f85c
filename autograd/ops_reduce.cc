// Differentiable reductions and softmax.
#include "autograd/autocast.h"
#include "autograd/derivatives.h"
#include "autograd/ops.h"
#include "autograd/record.h"

namespace kiln::autograd::ops {
namespace {
using rules::infoOf;
using B = EagerBuilder;

/// Elements per output element: the reduction's count.
double reducedCount(const Tensor &in, const Tensor &out) {
  return out.numel() == 0 ? 0.0 : static_cast<double>(in.numel()) / out.numel();
}

/// amax/amin/max/min share one rule: the gradient split over the elements equal to the result.
Tensor extreme(const char *name, const Tensor &a, Tensor out, const DimList &dims, bool keepdim) {
  record(name, {&a}, out, [&](const NodePtr &self) {
    return [sa = SavedTensor(a), so = SavedTensor(out, self), dims, keepdim](B &bd, const Node &n,
                                                                             Grads &g) {
      return Grads{rules::amax(bd, g[0], sa.unpack(n), so.unpack(n), dims, keepdim)};
    };
  });
  return out;
}

Tensor variance(const char *name, const Tensor &a, Tensor out, const DimList &dims,
                double correction, bool keepdim, bool isStd) {
  record(name, {&a}, out, [&](const NodePtr &self) {
    return [sa = SavedTensor(a), so = SavedTensor(isStd ? out : Tensor(), self), dims, correction,
            keepdim, count = reducedCount(a, out)](B &bd, const Node &n, Grads &g) {
      std::optional<Tensor> stdOut;
      if (so.defined())
        stdOut = so.unpack(n);
      return Grads{rules::var(bd, g[0], sa.unpack(n), dims, correction, keepdim, count, stdOut)};
    };
  });
  return out;
}
} // namespace

Tensor sum(const Tensor &a, const DimList &dims, bool keepdim, std::optional<DType> dtype) {
  Tensor out = kiln::ops::sum(a, dims, keepdim, dtype);
  record("SumBackward1", {&a}, out, [&](const NodePtr &) {
    return [x = infoOf<B>(a), dims, keepdim](B &bd, const Node &, Grads &g) {
      return Grads{rules::sum(bd, g[0], x, dims, keepdim)};
    };
  });
  return out;
}

Tensor mean(const Tensor &a, const DimList &dims, bool keepdim, std::optional<DType> dtype) {
  Tensor out = kiln::ops::mean(a, dims, keepdim, dtype);
  record("MeanBackward1", {&a}, out, [&](const NodePtr &) {
    return [x = infoOf<B>(a), dims, keepdim, count = reducedCount(a, out)](B &bd, const Node &,
                                                                           Grads &g) {
      return Grads{rules::mean(bd, g[0], x, dims, keepdim, count)};
    };
  });
  return out;
}

Tensor nanmean(const Tensor &a, const DimList &dims, bool keepdim, std::optional<DType> dtype) {
  Tensor out = kiln::ops::nanmean(a, dims, keepdim, dtype);
  record("NanmeanBackward0", {&a}, out, [&](const NodePtr &) {
    return [sa = SavedTensor(a), dims, keepdim](B &bd, const Node &n, Grads &g) {
      return Grads{rules::nanmean(bd, g[0], sa.unpack(n), dims, keepdim)};
    };
  });
  return out;
}

std::pair<Tensor, Tensor> aminmax(const Tensor &a, std::optional<int64_t> dim, bool keepdim) {
  if (!anyRequiresGrad({&a}))
    return kiln::ops::aminmax(a, dim, keepdim);
  kiln::ops::aminmax(a, dim, keepdim); // torch's argument errors
  // Recorded as amin and amax (one node each): the same values, and each half's gradient.
  DimList dims = dim ? DimList(Shape{*dim}) : DimList();
  return {autograd::ops::amin(a, dims, keepdim), autograd::ops::amax(a, dims, keepdim)};
}

Tensor amax(const Tensor &a, const DimList &dims, bool keepdim) {
  return extreme("AmaxBackward0", a, kiln::ops::amax(a, dims, keepdim), dims, keepdim);
}
Tensor amin(const Tensor &a, const DimList &dims, bool keepdim) {
  return extreme("AminBackward0", a, kiln::ops::amin(a, dims, keepdim), dims, keepdim);
}
Tensor max(const Tensor &a) { return extreme("MaxBackward1", a, kiln::ops::max(a), {}, false); }
Tensor min(const Tensor &a) { return extreme("MinBackward1", a, kiln::ops::min(a), {}, false); }

Tensor var(const Tensor &a, const DimList &dims, double correction, bool keepdim) {
  return variance("VarBackward0", a, kiln::ops::var(a, dims, correction, keepdim), dims, correction,
                  keepdim, false);
}
Tensor stdDev(const Tensor &a, const DimList &dims, double correction, bool keepdim) {
  return variance("StdBackward0", a, kiln::ops::stdDev(a, dims, correction, keepdim), dims,
                  correction, keepdim, true);
}

Tensor logsumexp(const Tensor &a, const DimList &dims, bool keepdim) {
  Tensor out = kiln::ops::logsumexp(a, dims, keepdim);
  record("LogsumexpBackward0", {&a}, out, [&](const NodePtr &self) {
    return [sa = SavedTensor(a), so = SavedTensor(out, self), dims, keepdim](B &bd, const Node &n,
                                                                             Grads &g) {
      return Grads{rules::logsumexp(bd, g[0], sa.unpack(n), so.unpack(n), dims, keepdim)};
    };
  });
  return out;
}

Tensor softmax(const Tensor &a_, int64_t dim, std::optional<DType> dtype) {
  const Tensor a = autocast::widenOnCuda(a_);
  Tensor out = kiln::ops::softmax(a, dim, dtype);
  int64_t d = wrapDim(dim, std::max<int64_t>(a.dim(), 1), "softmax");
  record("SoftmaxBackward0", {&a}, out, [&](const NodePtr &self) {
    return [so = SavedTensor(out, self), d, dt = a.dtype()](B &bd, const Node &n, Grads &g) {
      Tensor y = so.unpack(n);
      if (!isGradEnabled()) // one fused pass unless the backward is itself recorded
        if (Tensor r = kiln::ops::softmaxBackward(g[0], y, d, false); r.defined())
          return Grads{bd.cast(r, dt)};
      return Grads{bd.cast(rules::softmax(bd, g[0], y, d), dt)};
    };
  });
  return out;
}

Tensor logSoftmax(const Tensor &a_, int64_t dim, std::optional<DType> dtype) {
  const Tensor a = autocast::widenOnCuda(a_);
  Tensor out = kiln::ops::logSoftmax(a, dim, dtype);
  int64_t d = wrapDim(dim, std::max<int64_t>(a.dim(), 1), "log_softmax");
  record("LogSoftmaxBackward0", {&a}, out, [&](const NodePtr &self) {
    return [so = SavedTensor(out, self), d, dt = a.dtype()](B &bd, const Node &n, Grads &g) {
      Tensor y = so.unpack(n);
      if (!isGradEnabled())
        if (Tensor r = kiln::ops::softmaxBackward(g[0], y, d, true); r.defined())
          return Grads{bd.cast(r, dt)};
      return Grads{bd.cast(rules::logSoftmax(bd, g[0], y, d), dt)};
    };
  });
  return out;
}

} // namespace kiln::autograd::ops

// Differentiable scatters (out of place): scatter with a source, scatter_add, index_add and
// index_put.
// Their gradients are the incoming gradient for the input (with the overwritten positions zeroed
// for scatter) and a gather of it at the scattered positions for the source. Also the upsamples,
// whose backward scatters each output gradient back to the inputs it read.
#include "autograd/derivatives.h"
#include "autograd/derivatives_layout.h"
#include "autograd/ops.h"
#include "autograd/record.h"
#include "runtime/ops/factory.h"
#include "runtime/ops/interpolate.h"

namespace kiln::autograd::ops {
namespace {
using B = EagerBuilder;

/// The spatial sizes of an (N, C, *spatial) tensor.
Shape spatialOf(const Tensor &t) { return Shape(t.sizes().begin() + 2, t.sizes().end()); }
} // namespace

Tensor take(const Tensor &self, const Tensor &index) {
  Tensor out = kiln::ops::take(self, index);
  record("TakeBackward0", {&self}, out, [&](const NodePtr &) {
    // The flat positions read, as take's own kernel resolves them (negative ones wrap).
    Tensor positions =
        kiln::ops::take(kiln::ops::arange(0, self.numel(), 1, DType::Int64), index).reshape({-1});
    return [positions, sizes = self.sizes(), n = self.numel()](B &b, const Node &, Grads &g) {
      return Grads{b.reshape(b.scatterAdd({n}, 0, positions, b.reshape(g[0], {-1})), sizes)};
    };
  });
  return out;
}

Tensor scatter(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &src) {
  Tensor out = self.clone();
  kiln::ops::scatter_(out, dim, index, src);
  record("ScatterBackward0", {&self, nullptr, &src}, out, [&](const NodePtr &) {
    return [si = SavedTensor(index), d = wrapDim(dim, std::max<int64_t>(self.dim(), 1), "scatter")](
               B &b, const Node &n, Grads &g) {
      return rules::scatter(b, g[0], d, si.unpack(n), rules::Needs::of(n));
    };
  });
  return out;
}

Tensor scatterAdd(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &src) {
  Tensor out = self.clone();
  kiln::ops::scatterAdd_(out, dim, index, src);
  record("ScatterAddBackward0", {&self, nullptr, &src}, out, [&](const NodePtr &) {
    return [si = SavedTensor(index), d = wrapDim(dim, std::max<int64_t>(self.dim(), 1),
                                                 "scatter_add")](B &b, const Node &n, Grads &g) {
      return rules::scatterAdd(b, g[0], d, si.unpack(n), rules::Needs::of(n));
    };
  });
  return out;
}

Tensor scatterReduce(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &src,
                     const std::string &reduce, bool includeSelf) {
  Tensor out = self.clone();
  kiln::ops::scatterReduce_(out, dim, index, src, reduce, includeSelf);
  record("ScatterReduceBackward0", {&self, nullptr, &src}, out, [&](const NodePtr &node) {
    const bool extreme = reduce == "amax" || reduce == "amin";
    return [ss = SavedTensor(extreme ? self : Tensor()), si = SavedTensor(index),
            sc = SavedTensor(extreme ? src : Tensor()),
            so = SavedTensor(extreme ? out : Tensor(), node), dim, extreme, mean = reduce == "mean",
            includeSelf](B &b, const Node &n, Grads &g) {
      return rules::scatterReduce(b, g[0], ss.unpack(n), si.unpack(n), sc.unpack(n), so.unpack(n),
                                  dim, extreme, mean, includeSelf, rules::Needs::of(n));
    };
  });
  return out;
}

Tensor indexPut(const Tensor &self, std::span<const Tensor> indices, const Tensor &values,
                bool accumulate) {
  Tensor out = kiln::ops::indexPut(self, indices, values, accumulate);
  record("IndexPutBackward0", {&self, &values}, out, [&](const NodePtr &) {
    return [idx = std::vector<Tensor>(indices.begin(), indices.end()), accumulate,
            v = rules::infoOf<B>(values)](B &b, const Node &n, Grads &g) {
      Grads r(2);
      if (n.needsInputGrad(0)) {
        r[0] = g[0];
        if (!accumulate) // what the write replaced gets no gradient
          r[0] = ops::indexPut(g[0], idx, Tensor::scalarTensor(Scalar(0.0), g[0].dtype()));
      }
      if (n.needsInputGrad(1))
        r[1] = b.reduceTo(ops::index(g[0], idx), v.sizes, v.dtype);
      return r;
    };
  });
  return out;
}

Tensor indexAdd(const Tensor &self, int64_t dim, const Tensor &index, const Tensor &source,
                const Scalar &alpha) {
  Tensor out = self.clone();
  kiln::ops::indexAdd_(out, dim, index, source, alpha);
  record("IndexAddBackward0", {&self, nullptr, &source}, out, [&](const NodePtr &) {
    return
        [si = SavedTensor(index), d = wrapDim(dim, std::max<int64_t>(self.dim(), 1), "index_add"),
         alpha = alpha.toDouble(), shape = source.sizes()](B &b, const Node &n, Grads &g) {
          return rules::indexAdd(b, g[0], d, si.unpack(n).reshape({-1}), shape, alpha,
                                 rules::Needs::of(n));
        };
  });
  return out;
}

Tensor upsampleNearest(const Tensor &input, IntList outputSize,
                       const kiln::ops::UpsampleScales &scales, bool exact) {
  Tensor out = kiln::ops::upsampleNearest(input, outputSize, scales, exact);
  record("UpsampleNearestBackward0", {&input}, out, [&](const NodePtr &) {
    return [sizes = input.sizes(), scales, exact](B &, const Node &, Grads &g) {
      Tensor gx = kiln::ops::upsampleNearestBackward(g[0], sizes, scales, exact);
      // The fold is linear in g; its own derivative is the upsample again (for create_graph).
      record("UpsampleNearestBackwardBackward0", {&g[0]}, gx, [&](const NodePtr &) {
        return [out = spatialOf(g[0]), scales, exact](B &, const Node &, Grads &gg) {
          return Grads{upsampleNearest(gg[0], out, scales, exact)};
        };
      });
      return Grads{gx};
    };
  });
  return out;
}

Tensor upsampleLinear(const Tensor &input, IntList outputSize, bool alignCorners,
                      const kiln::ops::UpsampleScales &scales) {
  Tensor out = kiln::ops::upsampleLinear(input, outputSize, alignCorners, scales);
  record("UpsampleLinearBackward0", {&input}, out, [&](const NodePtr &) {
    return [sizes = input.sizes(), alignCorners, scales](B &, const Node &, Grads &g) {
      Tensor gx = kiln::ops::upsampleLinearBackward(g[0], sizes, alignCorners, scales);
      record("UpsampleLinearBackwardBackward0", {&g[0]}, gx, [&](const NodePtr &) {
        return [out = spatialOf(g[0]), alignCorners, scales](B &, const Node &, Grads &gg) {
          return Grads{upsampleLinear(gg[0], out, alignCorners, scales)};
        };
      });
      return Grads{gx};
    };
  });
  return out;
}

} // namespace kiln::autograd::ops

// Differentiable matrix products.
#include "autograd/autocast.h"
#include "autograd/derivatives.h"
#include "autograd/derivatives_linalg.h"
#include "autograd/ops.h"
#include "autograd/record.h"

namespace kiln::autograd::ops {
namespace {
using rules::infoOf;
using rules::Needs;
using B = EagerBuilder;

Tensor product(const char *name, const Tensor &a, const Tensor &b, Tensor out) {
  record(name, {&a, &b}, out, [&](const NodePtr &) {
    return [sa = SavedTensor(a), sb = SavedTensor(b)](B &bd, const Node &n, Grads &g) {
      return rules::matmul(bd, g[0], sa.unpack(n), sb.unpack(n), Needs::of(n));
    };
  });
  return out;
}
} // namespace

Tensor matmul(const Tensor &a_, const Tensor &b_) {
  const Tensor a = autocast::lower(a_);
  const Tensor b = autocast::lower(b_);
  return product("MatmulBackward0", a, b, kiln::ops::matmul(a, b));
}
Tensor mm(const Tensor &a_, const Tensor &b_) {
  const Tensor a = autocast::lower(a_);
  const Tensor b = autocast::lower(b_);
  return product("MmBackward0", a, b, kiln::ops::mm(a, b));
}
Tensor bmm(const Tensor &a_, const Tensor &b_) {
  const Tensor a = autocast::lower(a_);
  const Tensor b = autocast::lower(b_);
  return product("BmmBackward0", a, b, kiln::ops::bmm(a, b));
}

Tensor linear(const Tensor &input_, const Tensor &weight_, const std::optional<Tensor> &bias_) {
  const Tensor input = autocast::lower(input_);
  const Tensor weight = autocast::lower(weight_);
  const std::optional<Tensor> bias = autocast::lower(bias_);
  Tensor out = kiln::ops::linear(input, weight, bias);
  const Tensor *pb = bias ? &*bias : nullptr;
  record("AddmmBackward0", {&input, &weight, pb}, out, [&](const NodePtr &self) {
    std::optional<rules::InputInfo<B>> bi;
    if (bias)
      bi = infoOf<B>(*bias);
    bool needX = self->needsInputGrad(0), needW = self->needsInputGrad(1);
    // The input's gradient reads the weight and the weight's reads the input: save only those.
    return [sx = SavedTensor(needW ? input : Tensor()), sw = SavedTensor(needX ? weight : Tensor()),
            ws = weight.sizes(), bi](B &bd, const Node &n, Grads &g) {
      return rules::linear(bd, g[0], sx.unpack(n), sw.unpack(n), ws, bi, Needs::of(n));
    };
  });
  return out;
}

Tensor addmm(const Tensor &self_, const Tensor &mat1_, const Tensor &mat2_, const Scalar &beta,
             const Scalar &alpha) {
  const Tensor self = autocast::lower(self_);
  const Tensor mat1 = autocast::lower(mat1_);
  const Tensor mat2 = autocast::lower(mat2_);
  Tensor out = kiln::ops::addmm(self, mat1, mat2, beta, alpha);
  record("AddmmBackward0", {&self, &mat1, &mat2}, out, [&](const NodePtr &) {
    return [si = infoOf<B>(self), s1 = SavedTensor(mat1), s2 = SavedTensor(mat2),
            be = beta.toDouble(), al = alpha.toDouble()](B &bd, const Node &n, Grads &g) {
      return rules::addmm(bd, g[0], si, s1.unpack(n), s2.unpack(n), be, al, Needs::of(n));
    };
  });
  return out;
}

} // namespace kiln::autograd::ops

namespace kiln::autograd::ops {
namespace {

/// beta * self + alpha * (a @ b) (addmv, baddbmm): the product's gradients by matmul's rule on
/// alpha * g, self's g * beta reduced to its shape (zeros for beta 0, as torch).
Tensor addProduct(const char *name, const Tensor &self, const Tensor &a, const Tensor &b,
                  const Scalar &beta, const Scalar &alpha, Tensor out) {
  record(name, {&self, &a, &b}, out, [&](const NodePtr &) {
    return [si = infoOf<B>(self), sa = SavedTensor(a), sb = SavedTensor(b), be = beta.toDouble(),
            al = alpha.toDouble()](B &bd, const Node &n, Grads &g) {
      Needs need = Needs::of(n), product;
      product.bits = need.bits >> 1;
      Grads r(3);
      if (need[0])
        r[0] = bd.reduceTo(bd.scale(g[0], be), si.sizes, si.dtype);
      if (product.bits) {
        Grads ab = rules::matmul(bd, bd.scale(g[0], al), sa.unpack(n), sb.unpack(n), product);
        r[1] = ab[0], r[2] = ab[1];
      }
      return r;
    };
  });
  return out;
}

} // namespace

Tensor mv(const Tensor &mat_, const Tensor &vec_) {
  const Tensor mat = autocast::lowerOnCuda(mat_); // on torch's CUDA list, not its CPU one
  const Tensor vec = autocast::lowerOnCuda(vec_);
  return product("MvBackward0", mat, vec, kiln::ops::mv(mat, vec));
}

Tensor dot(const Tensor &a, const Tensor &b, const char *op) {
  return product("DotBackward0", a, b, kiln::ops::dot(a, b, op));
}

Tensor outer(const Tensor &a, const Tensor &b) {
  Tensor out = kiln::ops::outer(a, b);
  record("OuterBackward0", {&a, &b}, out, [&](const NodePtr &) {
    return [sa = SavedTensor(a), sb = SavedTensor(b)](B &bd, const Node &n, Grads &g) {
      Tensor x = sa.unpack(n), y = sb.unpack(n);
      Needs need = Needs::of(n);
      Grads r(2);
      if (need[0]) // out[i, j] = x[i] y[j]
        r[0] = bd.cast(bd.matmul(g[0], bd.cast(y, g[0].dtype())), x.dtype());
      if (need[1])
        r[1] = bd.cast(bd.matmul(bd.cast(x, g[0].dtype()), g[0]), y.dtype());
      return r;
    };
  });
  return out;
}

Tensor addmv(const Tensor &self_, const Tensor &mat_, const Tensor &vec_, const Scalar &beta,
             const Scalar &alpha) {
  const Tensor self = autocast::lowerOnCuda(self_); // on torch's CUDA list, not its CPU one
  const Tensor mat = autocast::lowerOnCuda(mat_);
  const Tensor vec = autocast::lowerOnCuda(vec_);
  return addProduct("AddmvBackward0", self, mat, vec, beta, alpha,
                    kiln::ops::addmv(self, mat, vec, beta, alpha));
}

Tensor baddbmm(const Tensor &self_, const Tensor &batch1_, const Tensor &batch2_,
               const Scalar &beta, const Scalar &alpha) {
  const Tensor self = autocast::lower(self_);
  const Tensor batch1 = autocast::lower(batch1_);
  const Tensor batch2 = autocast::lower(batch2_);
  return addProduct("BaddbmmBackward0", self, batch1, batch2, beta, alpha,
                    kiln::ops::baddbmm(self, batch1, batch2, beta, alpha));
}

Tensor bilinear(const Tensor &input1, const Tensor &input2, const Tensor &weight,
                const std::optional<Tensor> &bias) {
  const Tensor *pb = bias ? &*bias : nullptr;
  Tensor out = kiln::ops::bilinear(input1, input2, weight, bias); // checks, and the no-grad value
  if (!anyRequiresGrad({&input1, &input2, &weight, pb}))
    return out;
  // y[n, o] = sum_ij x1[n, i] W[o, i, j] x2[n, j], as differentiable products (in the operands'
  // dtype: bilinear is on no autocast list, so its matmul must not be cast)
  autocast::Suspend sameDtype;
  const int64_t o = weight.size(0), i = weight.size(1), j = weight.size(2);
  Tensor x1 = autograd::reshape(input1, {-1, i}), x2 = autograd::reshape(input2, {-1, j});
  Tensor w = autograd::reshape(autograd::permute(weight, {1, 0, 2}), {i, o * j});
  Tensor t = autograd::reshape(matmul(x1, w), {-1, o, j});
  Tensor y = sum(mul(t, autograd::unsqueeze(x2, 1)), Shape{-1});
  if (bias)
    y = add(y, *bias);
  return autograd::reshape(y, out.sizes());
}

} // namespace kiln::autograd::ops

namespace kiln::autograd::ops {

Tensor linalgSolve(const Tensor &a, const Tensor &b, bool inverse) {
  Tensor out = kiln::ops::linalgSolve(a, b, inverse);
  record("LinalgSolveBackward0", {&a, &b}, out, [&](const NodePtr &self) {
    return [sa = SavedTensor(a), rhs = infoOf<B>(b),
            so = SavedTensor(out, self)](B &bd, const Node &n, Grads &g) {
      return rules::linalgSolve(bd, g[0], sa.unpack(n), rhs, so.unpack(n), Needs::of(n));
    };
  });
  return out;
}

Tensor linalgSolveTriangular(const Tensor &a, const Tensor &b, bool upper, bool unitriangular) {
  Tensor out = kiln::ops::linalgSolveTriangular(a, b, upper, unitriangular);
  record("LinalgSolveTriangularBackward0", {&a, &b}, out, [&](const NodePtr &self) {
    return [sa = SavedTensor(a), rhs = infoOf<B>(b), so = SavedTensor(out, self), upper,
            unitriangular](B &bd, const Node &n, Grads &g) {
      return rules::linalgSolveTriangular(bd, g[0], sa.unpack(n), rhs, so.unpack(n), upper,
                                          unitriangular, Needs::of(n));
    };
  });
  return out;
}

Tensor linalgCholesky(const Tensor &a) {
  return unaryFromOutput(
      "LinalgCholeskyBackward0", a, kiln::ops::linalgCholesky(a),
      [](B &b, const Tensor &g, const Tensor &l) { return rules::linalgCholesky(b, g, l); });
}

Tensor linalgLogabsdet(const Tensor &a) {
  return unaryFromInput(
      "LinalgSlogdetBackward0", a, kiln::ops::linalgLogabsdet(a),
      [](B &b, const Tensor &g, const Tensor &x) { return rules::linalgLogabsdet(b, g, x); });
}

Tensor linalgEighPacked(const Tensor &a, bool upper) {
  return unaryFromOutput("LinalgEighBackward0", a, kiln::ops::linalgEighPacked(a, upper),
                         [](B &b, const Tensor &g, const Tensor &packed) {
                           return rules::linalgEighPacked(b, g, packed);
                         });
}

} // namespace kiln::autograd::ops

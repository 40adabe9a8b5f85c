// Differentiable matrix products.
#include "autograd/derivatives.h"
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

Tensor matmul(const Tensor &a, const Tensor &b) {
  return product("MatmulBackward0", a, b, kiln::ops::matmul(a, b));
}
Tensor mm(const Tensor &a, const Tensor &b) {
  return product("MmBackward0", a, b, kiln::ops::mm(a, b));
}
Tensor bmm(const Tensor &a, const Tensor &b) {
  return product("BmmBackward0", a, b, kiln::ops::bmm(a, b));
}

Tensor linear(const Tensor &input, const Tensor &weight, const std::optional<Tensor> &bias) {
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

Tensor addmm(const Tensor &self, const Tensor &mat1, const Tensor &mat2, const Scalar &beta,
             const Scalar &alpha) {
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

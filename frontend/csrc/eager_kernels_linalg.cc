// The eager kernels of the op table's matrix-product and convolution rows without a node kind
// (ir/ops.def KILN_EAGER_SPELLING: mm, bmm, mv, dot, outer, addmm/addmv/baddbmm, bilinear,
// conv1d/2d/3d, conv_transpose1d/2d/3d). Each entry reads its arguments by their position in the
// row's schema; the binding generator has already checked their types and applied the defaults.
#include "frontend/csrc/eager_kernels.h"

#include "frontend/csrc/py_convert.h"
#include "runtime/ops/conv.h"
#include "runtime/ops/linalg.h"

namespace kiln::frontend {

namespace {

using ProductFn = Tensor (*)(const Tensor &, const Tensor &);
using AddProductFn = Tensor (*)(const Tensor &, const Tensor &, const Tensor &, const Scalar &,
                                const Scalar &);

template <ProductFn F> Tensor product(const BoundArgs &a) { return F(a.tensor(0), a.tensor(1)); }

/// addmm / addmv / baddbmm(input, a, b, *, beta=1, alpha=1).
template <AddProductFn F> Tensor addProduct(const BoundArgs &a) {
  return F(a.tensor(0), a.tensor(1), a.tensor(2), a.scalar(3), a.scalar(4));
}

/// convNd(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1); the second row
/// of each takes padding as 'same' or 'valid'.
template <int64_t Nd> Tensor convolution(const BoundArgs &a) {
  ops::ConvOptions opts;
  opts.stride = a.intList(3);
  if (PyUnicode_Check(a.get(4)))
    opts.paddingMode = a.str(4);
  else
    opts.padding = a.intList(4);
  opts.dilation = a.intList(5);
  opts.groups = a.toInt(6);
  return ops::convolution(Nd, a.tensor(0), a.tensor(1), a.optTensor(2), opts);
}

/// conv_transposeNd(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
/// dilation=1).
template <int64_t Nd> Tensor convTranspose(const BoundArgs &a) {
  kiln::ops::ConvTransposeOptions opts;
  opts.stride = a.intList(3);
  opts.padding = a.intList(4);
  opts.outputPadding = a.intList(5);
  opts.groups = a.toInt(6);
  opts.dilation = a.intList(7);
  return ops::convTranspose(Nd, a.tensor(0), a.tensor(1), a.optTensor(2), opts);
}

/// A row whose Tensor arguments take tensors only.
constexpr EagerKernel products(std::string_view name, EagerFn fn) {
  return {std::nullopt, name, fn, nullptr, nullptr, -1, true};
}

// clang-format off
const EagerKernel kLinalgKernels[] = {
    products("mm", product<&ops::mm>),
    products("bmm", product<&ops::bmm>),
    products("mv", product<&ops::mv>),
    products("dot", [](const BoundArgs &a) { return ops::dot(a.tensor(0), a.tensor(1)); }),
    products("vdot", [](const BoundArgs &a) {
       return ops::dot(a.tensor(0), a.tensor(1), "vdot");
     }),
    products("outer", product<&ops::outer>),
    products("addmm", addProduct<&ops::addmm>),
    products("addmv", addProduct<&ops::addmv>),
    products("baddbmm", addProduct<&ops::baddbmm>),
    products("bilinear", [](const BoundArgs &a) {
       return ops::bilinear(a.tensor(0), a.tensor(1), a.tensor(2), a.optTensor(3));
     }),
    products("conv1d", convolution<1>),
    products("conv2d", convolution<2>),
    products("conv3d", convolution<3>),
    products("conv_transpose1d", convTranspose<1>),
    products("conv_transpose2d", convTranspose<2>),
    products("conv_transpose3d", convTranspose<3>),
};
// clang-format on

} // namespace

std::span<const EagerKernel> linalgEagerKernels() { return kLinalgKernels; }

} // namespace kiln::frontend

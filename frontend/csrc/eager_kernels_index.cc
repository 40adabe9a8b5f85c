// The eager kernels of the op table's indexing rows without a node kind (ir/ops.def
// KILN_EAGER_SPELLING: masked_select, nonzero, argwhere, take, index_put, scatter_reduce). Each
// entry reads its arguments by their position in the row's schema; the binding generator has
// already checked their types and applied the defaults.
#include "frontend/csrc/eager_kernels.h"

#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"
#include "runtime/ops/index.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

/// index_put's indices: a tuple/list of tensors or None (None keeps that dim whole).
std::vector<Tensor> indexList(const BoundArgs &a, int i) {
  py::handle indices = a.get(i);
  KILN_CHECK_KIND(Type, PySequence_Check(indices.ptr()) && !py::isinstance<Tensor>(indices),
                  "{}(): argument 'indices' must be tuple of Tensors, not {}", a.opName(),
                  typeName(indices));
  std::vector<Tensor> out;
  for (py::handle h : py::reinterpret_borrow<py::sequence>(indices)) {
    KILN_CHECK_KIND(Type, h.is_none() || py::isinstance<Tensor>(h),
                    "{}(): indices must be Tensors or None, got {}", a.opName(), typeName(h));
    out.push_back(h.is_none() ? Tensor() : h.cast<Tensor>());
  }
  return out;
}

/// index_put's values: a tensor (its dtype must match), or a number cast to self's dtype.
Tensor values(const Tensor &self, const BoundArgs &a, int i) {
  py::handle v = a.get(i);
  if (isNumber(v))
    return Tensor::scalarTensor(toScalar(v, a.opName()), self.dtype());
  return v.cast<Tensor>();
}

Tensor scatterReduce(const BoundArgs &a) {
  Tensor self = a.tensor(0), src = a.tensor(3);
  const std::string reduce = a.str(4);
  if (reduce != "prod")
    return ops::scatterReduce(self, a.toInt(1), a.tensor(2), src, reduce, a.toBool(5));
  requireUntracked("scatter_reduce", {&self, &src});
  Tensor out = self.clone();
  return kiln::ops::scatterReduce_(out, a.toInt(1), a.tensor(2), src, reduce, a.toBool(5));
}

// clang-format off
const EagerKernel kIndexKernels[] = {
    {std::nullopt, "masked_select", [](const BoundArgs &a) {
       return ops::maskedSelect(a.tensor(0), a.tensor(1));
     }, nullptr, nullptr, -1, true},
    {std::nullopt, "nonzero", nullptr, nullptr, [](const BoundArgs &a) -> py::object {
       if (a.toBool(1))
         return tensorTuple(ops::nonzeroTuple(a.tensor(0)));
       return wrap(ops::nonzero(a.tensor(0)));
     }},
    {std::nullopt, "argwhere", [](const BoundArgs &a) { return ops::nonzero(a.tensor(0)); }},
    {std::nullopt, "take", [](const BoundArgs &a) { return ops::take(a.tensor(0), a.tensor(1)); },
     nullptr, nullptr, -1, true},
    {std::nullopt, "index_put",
     [](const BoundArgs &a) {
       Tensor self = a.tensor(0);
       return ops::indexPut(self, indexList(a, 1), values(self, a, 2), a.toBool(3));
     },
     [](Tensor &self, const BoundArgs &a) {
       ops::indexPut_(self, indexList(a, 1), values(self, a, 2), a.toBool(3));
     }},
    {std::nullopt, "scatter_reduce", scatterReduce,
     [](Tensor &self, const BoundArgs &a) {
       Tensor src = a.tensor(3);
       requireUntracked("scatter_reduce_", {&self, &src});
       ops::scatterReduce_(self, a.toInt(1), a.tensor(2), src, a.str(4), a.toBool(5));
     }},
};
// clang-format on

} // namespace

std::span<const EagerKernel> indexEagerKernels() { return kIndexKernels; }

} // namespace kiln::frontend

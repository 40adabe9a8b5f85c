// The private helper of kiln.linalg.vector_norm (its `ord` may be inf or a float). Reductions,
// statistics, scans and sorting are op-table rows: those with a node kind (sum, mean, max, norm,
// softmax, cumsum, argsort, ...) bound by bind_op_table.cc through eager_kernels.cc, the others
// (var/std, nansum, aminmax, sort/topk, median, unique, ...) through eager_kernels_reduce.cc.
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/ops/reduce.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

void bindReduce(py::module_ &m) {
  m.def(
      "_linalg_vector_norm",
      [](const Tensor &a, py::handle ord, py::object dim, bool keepdim,
         std::optional<DType> dtype) {
        return ops::vectorNorm(a, toScalar(ord, "linalg.vector_norm").toDouble(),
                               toDims(dim, "linalg.vector_norm"), keepdim, dtype);
      },
      py::arg("x"), py::arg("ord") = 2, py::arg("dim") = py::none(), py::arg("keepdim") = false,
      py::kw_only(), py::arg("dtype") = py::none());
}

} // namespace kiln::frontend

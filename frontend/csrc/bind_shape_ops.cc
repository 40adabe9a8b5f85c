// The kernels behind the Python F.pad and F.embedding (runtime/ops/shape_ops.h), and numel.
// The views, joins, splits, repeats, flips and diagonals are table rows (eager_kernels_shape.cc).
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"
#include "runtime/ops/shape_ops.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

void bindPadAndEmbedding(py::module_ &m) {
  m.def(
      "pad",
      [](const Tensor &self, py::handle pad, const std::string &mode, std::optional<double> value) {
        return ops::pad(self, toIntList(pad, "pad"), mode, value);
      },
      py::arg("input"), py::arg("pad"), py::arg("mode") = "constant",
      py::arg("value") = py::none());
  m.def("_embedding", &ops::embedding, py::arg("input"), py::arg("weight"),
        py::arg("padding_idx") = py::none());
  m.def("numel", &Tensor::numel, py::arg("input"));
}

} // namespace

void bindShapeOps(py::module_ &m) { bindPadAndEmbedding(m); }

} // namespace kiln::frontend

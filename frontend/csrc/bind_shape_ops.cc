// The shape ops no op-table row can spell: broadcast_tensors and meshgrid take their tensors as
// varargs, pad and _embedding serve the Python F.pad and F.embedding (runtime/ops/shape_ops.h).
// The views, joins, splits, repeats, flips and diagonals are table rows (eager_kernels_shape.cc).
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/py_convert.h"
#include "runtime/error.h"
#include "runtime/ops/shape_ops.h"

#include <pybind11/stl.h>

namespace kiln::frontend {

namespace {

/// A sequence of kiln tensors (list or tuple); TypeError naming op otherwise.
std::vector<Tensor> toTensorList(py::handle seq, const char *op) {
  KILN_CHECK_KIND(Type, PySequence_Check(seq.ptr()) && !py::isinstance<Tensor>(seq),
                  "{}(): argument 'tensors' must be a tuple or list of Tensors, not {}", op,
                  std::string(py::str(py::type::of(seq).attr("__name__"))));
  std::vector<Tensor> out;
  size_t i = 0;
  for (py::handle h : py::reinterpret_borrow<py::sequence>(seq)) {
    KILN_CHECK_KIND(Type, py::isinstance<Tensor>(h),
                    "{}(): expected a sequence of Tensors, but element {} is a {}", op, i,
                    std::string(py::str(py::type::of(h).attr("__name__"))));
    out.push_back(h.cast<Tensor>());
    ++i;
  }
  return out;
}

/// Tensors passed either as f(a, b, c) or as f([a, b, c]).
std::vector<Tensor> tensorArgs(const py::args &args, const char *op) {
  if (args.size() == 1 && !py::isinstance<Tensor>(args[0]))
    return toTensorList(args[0], op);
  return toTensorList(args, op);
}

void bindVarargsAndPad(py::module_ &m) {
  m.def("broadcast_tensors", [](py::args args) {
    return tensorTuple(ops::broadcastTensors(tensorArgs(args, "broadcast_tensors")));
  });
  m.def(
      "meshgrid",
      [](py::args args, py::object indexing) {
        std::string mode = indexing.is_none() ? "ij" : indexing.cast<std::string>();
        return tensorTuple(ops::meshgrid(tensorArgs(args, "meshgrid"), mode));
      },
      py::kw_only(), py::arg("indexing") = py::none());
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

void bindShapeOps(py::module_ &m) { bindVarargsAndPad(m); }

} // namespace kiln::frontend

// kiln._C._distributed: the MPI process group (distributed/process_group.h) for
// frontend/kiln/distributed, which holds torch's Python API.
#include "distributed/process_group.h"
#include "frontend/csrc/bindings.h"

#include "frontend/csrc/py_convert.h"

#include <pybind11/stl.h>

namespace kiln::frontend {
namespace {

using distributed::ProcessGroup;
using distributed::ReduceOp;
using distributed::Work;
using distributed::WorkPtr;

ProcessGroup &group() { return ProcessGroup::current(); }

} // namespace

void bindDistributed(py::module_ &parent) {
  py::module_ m = parent.def_submodule("_distributed", "MPI process group of kiln.distributed");
  py::enum_<ReduceOp>(m, "ReduceOp")
      .value("SUM", ReduceOp::Sum)
      .value("AVG", ReduceOp::Avg)
      .value("PRODUCT", ReduceOp::Product)
      .value("MAX", ReduceOp::Max)
      .value("MIN", ReduceOp::Min);
  py::class_<Work, WorkPtr>(m, "Work")
      .def("is_completed", &Work::isCompleted)
      .def(
          "wait",
          [](Work &w) {
            py::gil_scoped_release release; // other Python threads run while MPI progresses
            w.wait();
            return true;
          },
          "Blocks until the operation finished; raises when the group's timeout passes.");
  m.def(
      "init",
      [](double seconds) {
        ProcessGroup &g = ProcessGroup::world(seconds);
        return py::make_tuple(g.rank(), g.size());
      },
      py::arg("timeout_seconds"));
  m.def("is_initialized", &ProcessGroup::initialized);
  m.def("finalize", [] { group().finalize(); });
  auto withTimeout = [] { return &group(); };
  m.def("all_reduce",
        [withTimeout](const Tensor &t, ReduceOp op) { return withTimeout()->allReduce(t, op); });
  m.def("broadcast",
        [withTimeout](const Tensor &t, int src) { return withTimeout()->broadcast(t, src); });
  m.def("all_gather", [withTimeout](const Tensor &out, const Tensor &in) {
    return withTimeout()->allGather(out, in);
  });
  m.def("reduce_scatter", [withTimeout](const Tensor &out, const Tensor &in, ReduceOp op) {
    return withTimeout()->reduceScatter(out, in, op);
  });
  m.def("reduce", [withTimeout](const Tensor &t, int dst, ReduceOp op) {
    return withTimeout()->reduce(t, dst, op);
  });
  m.def("send", [withTimeout](const Tensor &t, int dst, int tag) {
    return withTimeout()->send(t, dst, tag);
  });
  m.def("recv", [withTimeout](const Tensor &t, int src, int tag) {
    return withTimeout()->recv(t, src, tag);
  });
  m.def("barrier", [withTimeout] { return withTimeout()->barrier(); });
}

} // namespace kiln::frontend

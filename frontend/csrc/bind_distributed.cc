// kiln._C._distributed: the MPI process group (distributed/process_group.h) and the NCCL group
// of CUDA tensors (distributed/nccl_group.h, functions `nccl_*`) for frontend/kiln/distributed,
// which holds torch's Python API and picks the group by the tensor's device.
#include "distributed/nccl_group.h"
#include "distributed/nccl_library.h"
#include "distributed/process_group.h"
#include "frontend/csrc/bindings.h"

#include "frontend/csrc/py_convert.h"

#include <pybind11/stl.h>

namespace kiln::frontend {
namespace {

using distributed::NcclGroup;
using distributed::ProcessGroup;
using distributed::ReduceOp;
using distributed::Work;
using distributed::WorkPtr;

ProcessGroup &group() { return ProcessGroup::current(); }

/// Lets the libnccl search see this interpreter's site-packages (the nvidia-nccl wheels).
void addSysPathRoots() {
  for (py::handle entry : py::module_::import("sys").attr("path"))
    if (std::string dir = py::str(entry); !dir.empty())
      distributed::nccl::addSearchRoot(dir);
}

void bindNccl(py::module_ &m) {
  // NCCL calls can block the host (the communicator's setup, a first connection to a peer):
  // other Python threads run meanwhile. Arguments are converted before the GIL is released.
  using Release = py::call_guard<py::gil_scoped_release>;
  m.def(
      "nccl_unavailable_reason",
      [] {
        addSysPathRoots();
        return NcclGroup::unavailableReason();
      },
      "What the NCCL backend misses here (a CUDA device, libnccl); empty when it can run.");
  m.def(
      "nccl_init",
      [](int device) {
        addSysPathRoots();
        py::gil_scoped_release release;
        return NcclGroup::init(ProcessGroup::current(), device).device();
      },
      py::arg("device") = -1);
  m.def("nccl_is_initialized", &NcclGroup::initialized);
  m.def("nccl_destroy", &NcclGroup::destroy, Release());
  m.def("nccl_device", [] { return NcclGroup::current().device(); });
  m.def("nccl_version", [] { return NcclGroup::current().version(); });
  m.def(
      "nccl_library",
      [] {
        addSysPathRoots();
        const distributed::nccl::Library &l = distributed::nccl::library();
        return py::make_tuple(l.path, l.versionString());
      },
      "Loads libnccl (no device needed) and returns (its path, its version); raises what is "
      "missing.");
  m.def(
      "nccl_all_reduce",
      [](const Tensor &t, ReduceOp op) { return NcclGroup::current().allReduce(t, op); },
      Release());
  m.def(
      "nccl_broadcast",
      [](const Tensor &t, int src) { return NcclGroup::current().broadcast(t, src); }, Release());
  m.def(
      "nccl_all_gather",
      [](const Tensor &out, const Tensor &in) { return NcclGroup::current().allGather(out, in); },
      Release());
  m.def(
      "nccl_reduce_scatter",
      [](const Tensor &out, const Tensor &in, ReduceOp op) {
        return NcclGroup::current().reduceScatter(out, in, op);
      },
      Release());
  m.def(
      "nccl_reduce",
      [](const Tensor &t, int dst, ReduceOp op) { return NcclGroup::current().reduce(t, dst, op); },
      Release());
  m.def(
      "nccl_send",
      [](const Tensor &t, int dst, int /*tag: NCCL has none*/) {
        return NcclGroup::current().send(t, dst);
      },
      Release());
  m.def(
      "nccl_recv",
      [](const Tensor &t, int src, int /*tag*/) { return NcclGroup::current().recv(t, src); },
      Release());
}

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
  bindNccl(m);
}

} // namespace kiln::frontend

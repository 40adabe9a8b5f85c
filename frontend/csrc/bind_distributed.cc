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
  // A group from new_group (a ProcessGroup object), or None for the default (world) group.
  py::class_<ProcessGroup, std::shared_ptr<ProcessGroup>>(m, "ProcessGroup")
      .def_property_readonly("rank", &ProcessGroup::rank)
      .def_property_readonly("size", &ProcessGroup::size);
  m.def(
      "new_group",
      [](const std::vector<int> &ranks, double seconds) {
        ProcessGroup &world = group();
        double before = world.timeoutSeconds();
        if (seconds > 0) // else the world's own
          world.setTimeout(seconds);
        std::shared_ptr<ProcessGroup> g;
        try {
          py::gil_scoped_release release;
          g = world.split(ranks);
        } catch (...) {
          world.setTimeout(before);
          throw;
        }
        world.setTimeout(before);
        return g;
      },
      py::arg("ranks"), py::arg("timeout_seconds"),
      "torch's new_group over the world's `ranks` (timeout_seconds <= 0: the world's timeout); "
      "None on a rank outside them.");
  auto pick = [](ProcessGroup *pg) -> ProcessGroup & { return pg ? *pg : group(); };
  auto groupArg = py::arg("group") = py::none();
  m.def(
      "all_reduce",
      [pick](const Tensor &t, ReduceOp op, ProcessGroup *pg) { return pick(pg).allReduce(t, op); },
      py::arg("tensor"), py::arg("op"), groupArg);
  m.def(
      "broadcast",
      [pick](const Tensor &t, int src, ProcessGroup *pg) { return pick(pg).broadcast(t, src); },
      py::arg("tensor"), py::arg("src"), groupArg);
  m.def(
      "all_gather",
      [pick](const Tensor &out, const Tensor &in, ProcessGroup *pg) {
        return pick(pg).allGather(out, in);
      },
      py::arg("out"), py::arg("in"), groupArg);
  m.def(
      "reduce_scatter",
      [pick](const Tensor &out, const Tensor &in, ReduceOp op, ProcessGroup *pg) {
        return pick(pg).reduceScatter(out, in, op);
      },
      py::arg("out"), py::arg("in"), py::arg("op"), groupArg);
  m.def(
      "reduce",
      [pick](const Tensor &t, int dst, ReduceOp op, ProcessGroup *pg) {
        return pick(pg).reduce(t, dst, op);
      },
      py::arg("tensor"), py::arg("dst"), py::arg("op"), groupArg);
  m.def(
      "send",
      [pick](const Tensor &t, int dst, int tag, ProcessGroup *pg) {
        return pick(pg).send(t, dst, tag);
      },
      py::arg("tensor"), py::arg("dst"), py::arg("tag"), groupArg);
  m.def(
      "recv",
      [pick](const Tensor &t, int src, int tag, ProcessGroup *pg) {
        return pick(pg).recv(t, src, tag);
      },
      py::arg("tensor"), py::arg("src"), py::arg("tag"), groupArg);
  m.def("barrier", [pick](ProcessGroup *pg) { return pick(pg).barrier(); }, groupArg);
  bindNccl(m);
}

} // namespace kiln::frontend

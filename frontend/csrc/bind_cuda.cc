// `kiln._C._cuda`: what kiln.cuda needs from the CUDA driver (device queries, synchronize) and
// from NVRTC (whether it loads, its version). Both are opened with dlopen on first use
// (codegen/cuda/driver.h, nvrtc.h), so on a machine without a GPU these report "unavailable"
// with a reason instead of failing to import.

#include "codegen/cuda/driver.h"
#include "codegen/cuda/nvrtc.h"
#include "frontend/csrc/bindings.h"
#include "runtime/error.h"

#include <pybind11/stl.h>

#include <optional>
#include <utility>

namespace py = pybind11;

namespace kiln::frontend {

namespace {

using codegen::cuda::Driver;
using codegen::cuda::Nvrtc;

/// The driver, or RuntimeError("kiln: CUDA is not available: <reason>").
const Driver &requireDriver() {
  std::string reason;
  const Driver *d = Driver::get(&reason);
  KILN_CHECK(d, "kiln: CUDA is not available: {}", reason);
  return *d;
}

/// Lets the NVRTC search see this interpreter's site-packages (the nvidia-cuda-nvrtc wheel).
void addSysPathRoots() {
  for (py::handle entry : py::module_::import("sys").attr("path"))
    if (std::string dir = py::str(entry); !dir.empty())
      Nvrtc::addSearchRoot(dir);
}

} // namespace

void bindCuda(py::module_ &m) {
  py::module_ c = m.def_submodule("_cuda", "CUDA driver and NVRTC, loaded on first use");
  c.def("is_available", [] { return Driver::isAvailable(); });
  c.def("unavailable_reason", [] { return Driver::unavailableReason(); });
  c.def("device_count", [] {
    const Driver *d = Driver::get();
    return d ? d->deviceCount() : 0;
  });
  c.def("driver_version", [] { return requireDriver().version(); });
  c.def(
      "device_properties",
      [](int index) {
        codegen::cuda::DeviceInfo info = requireDriver().device(index);
        py::dict d;
        d["name"] = info.name;
        d["major"] = info.major;
        d["minor"] = info.minor;
        d["multi_processor_count"] = info.multiprocessors;
        d["total_memory"] = info.totalMemory;
        d["max_threads_per_block"] = info.maxThreadsPerBlock;
        return d;
      },
      py::arg("device"));
  c.def(
      "synchronize", [](int index) { requireDriver().synchronize(index); }, py::arg("device"),
      py::call_guard<py::gil_scoped_release>());
  c.def(
      "nvrtc_version",
      []() -> std::optional<std::pair<int, int>> {
        addSysPathRoots();
        const Nvrtc *n = Nvrtc::tryGet();
        return n ? std::optional(n->version()) : std::nullopt;
      },
      "NVRTC's (major, minor), or None when no libnvrtc loads");
  c.def("nvrtc_unavailable_reason", [] {
    addSysPathRoots();
    std::string reason;
    return Nvrtc::tryGet(&reason) ? std::string() : reason;
  });
}

} // namespace kiln::frontend

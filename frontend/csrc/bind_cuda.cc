// `kiln._C._cuda`: what kiln.cuda needs from the CUDA backend (cuda/backend.h: the driver's
// devices, or the host emulator with KILN_CUDA_EMULATOR=1; events on a device's default stream)
// and from NVRTC (whether it loads, its version). Both are opened with dlopen on first use, so on a
// machine without a GPU these report "unavailable" with a reason instead of failing to import.

#include "codegen/cuda/cublas.h"
#include "codegen/cuda/driver.h"
#include "codegen/cuda/nvrtc.h"
#include "cuda/backend.h"
#include "cuda/eager.h"
#include "cuda/memory.h"
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

/// The backend, or RuntimeError("kiln: CUDA is not available: <reason>").
cuda::Backend &requireBackend() {
  std::string reason;
  cuda::Backend *b = cuda::Backend::get(&reason);
  KILN_CHECK(b, "kiln: CUDA is not available: {}", reason);
  return *b;
}

/// Lets the NVRTC and cuBLAS searches see this interpreter's site-packages (the nvidia-cuda-nvrtc
/// wheel).
void addSysPathRoots() {
  for (py::handle entry : py::module_::import("sys").attr("path"))
    if (std::string dir = py::str(entry); !dir.empty()) {
      Nvrtc::addSearchRoot(dir);
      codegen::cuda::Cublas::addSearchRoot(dir);
    }
}

} // namespace

void bindCuda(py::module_ &m) {
  py::module_ c = m.def_submodule("_cuda", "CUDA driver and NVRTC, loaded on first use");
  addSysPathRoots();
  cuda::installCudaTensors();
  c.def("is_available", [] { return cuda::Backend::get() != nullptr; });
  c.def("is_emulated", [] {
    cuda::Backend *b = cuda::Backend::get();
    return b && b->emulated();
  });
  c.def("unavailable_reason", [] { return cuda::Backend::unavailableReason(); });
  c.def("device_count", [] {
    cuda::Backend *b = cuda::Backend::get();
    return b ? b->deviceCount() : 0;
  });
  c.def("driver_version", [] {
    std::string reason;
    const Driver *d = Driver::get(&reason);
    KILN_CHECK(d, "kiln: CUDA is not available: {}", reason);
    return d->version();
  });
  c.def(
      "memory_allocated", [](int index) { return requireBackend().memory(index).allocated; },
      py::arg("device"));
  c.def(
      "memory_reserved", [](int index) { return requireBackend().memory(index).reserved; },
      py::arg("device"));
  c.def("empty_cache", [](int index) { requireBackend().emptyCache(index); }, py::arg("device"));
  c.def("eager_programs_compiled", [] { return cuda::eagerProgramsCompiled(); });
  c.def(
      "device_properties",
      [](int index) {
        codegen::cuda::DeviceInfo info = requireBackend().device(index);
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
      "synchronize", [](int index) { requireBackend().synchronize(index); }, py::arg("device"),
      py::call_guard<py::gil_scoped_release>());
  // The engine of kiln.cuda.Event, made at its first record (frontend/kiln/cuda.py keeps torch's
  // lazy creation and argument handling).
  py::class_<cuda::Event>(c, "_Event")
      .def_property_readonly("device", &cuda::Event::device)
      .def_property_readonly("enable_timing", &cuda::Event::timing)
      .def("record", &cuda::Event::record)
      .def("synchronize", &cuda::Event::synchronize, py::call_guard<py::gil_scoped_release>())
      .def("query", &cuda::Event::query)
      .def("elapsed_time", &cuda::Event::elapsedMillis, py::arg("end"));
  c.def(
      "event_create",
      [](int index, bool timing) { return requireBackend().createEvent(index, timing); },
      py::arg("device"), py::arg("enable_timing"));
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

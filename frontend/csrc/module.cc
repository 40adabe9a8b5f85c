// The `kiln._C` extension module: tensor bindings and eager ops.
#include "frontend/csrc/bindings.h"
#include "runtime/blas.h"
#include "runtime/error.h"
#include "runtime/storage.h"
#include "runtime/thread_pool.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "kiln's C++ runtime: tensors and eager CPU kernels";
  // torch.linalg.LinAlgError (a RuntimeError) that is also NumPy's np.linalg.LinAlgError, so
  // compiled NumPy code's `except np.linalg.LinAlgError` catches it; made here so C++ raises it.
  static PyObject *linalgError = [] {
    py::tuple bases = py::make_tuple(py::handle(PyExc_RuntimeError),
                                     py::module_::import("numpy.linalg").attr("LinAlgError"));
    return PyErr_NewException("kiln.linalg.LinAlgError", bases.ptr(), nullptr);
  }();
  m.attr("LinAlgError") = py::handle(linalgError);
  // Shapes that do not broadcast or multiply: torch raises RuntimeError, NumPy ValueError; this
  // is both, so either's `except` catches it.
  static PyObject *shapeError = [] {
    py::tuple bases = py::make_tuple(py::handle(PyExc_RuntimeError), py::handle(PyExc_ValueError));
    return PyErr_NewException("kiln.ShapeError", bases.ptr(), nullptr);
  }();
  m.attr("ShapeError") = py::handle(shapeError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const kiln::Error &e) {
      switch (e.kind()) {
      case kiln::ErrorKind::Type:
        PyErr_SetString(PyExc_TypeError, e.what());
        return;
      case kiln::ErrorKind::Value:
        PyErr_SetString(PyExc_ValueError, e.what());
        return;
      case kiln::ErrorKind::Index:
        PyErr_SetString(PyExc_IndexError, e.what());
        return;
      case kiln::ErrorKind::NotImplemented:
        PyErr_SetString(PyExc_NotImplementedError, e.what());
        return;
      case kiln::ErrorKind::Runtime:
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return;
      case kiln::ErrorKind::LinAlg:
        PyErr_SetString(linalgError, e.what());
        return;
      case kiln::ErrorKind::Shape:
        PyErr_SetString(shapeError, e.what());
        return;
      }
    }
  });
  m.def("get_num_threads", &kiln::numThreads);
  m.def("set_num_threads", &kiln::setNumThreads, py::arg("n"));
  m.def("_blas", &kiln::blas::name); // "mkl" or "openblas": what float GEMMs run on
  m.def("_host_memory", [] {
    kiln::HostMemoryStats s = kiln::hostMemoryStats();
    return std::make_pair(s.allocated, s.peak);
  });
  m.def("_reset_host_peak", &kiln::resetHostPeak);
  using namespace kiln::frontend;
  bindDTypes(m);
  bindTensor(m);
  bindAutograd(m);
  bindInterop(m);
  bindReduce(m);
  bindShapeOps(m);
  bindIndexing(m);
  bindLinalg(m);
  bindNN(m);
  bindFactory(m);
  bindOpTable(m);
  bindCapture(m);
  bindIR(m);
  bindCompiler(m);
  bindCuda(m);
  bindDistributed(m);
}

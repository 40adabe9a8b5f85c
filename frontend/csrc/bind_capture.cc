// kiln._C._capture: the frame hook's controls and per-code caches (eval_frame.c, code_cache.cc)
// and the guard trees (guards.h) used by kiln.compile.
#include "frontend/csrc/bindings.h"
#include "frontend/csrc/code_cache.h"
#include "frontend/csrc/eval_frame.h"
#include "frontend/csrc/guards.h"

namespace kiln::frontend {

namespace py = pybind11;

void bindCapture(py::module_ &parent) {
  py::module_ m = parent.def_submodule(
      "_capture", "PEP 523 frame hook, per-code caches and guard trees behind kiln.compile");

  m.def(
      "is_supported", [] { return kilnEvalFrameSupported() != 0; },
      "True when this interpreter can run the frame hook (CPython 3.11).");
  m.def("eval_frame_state", &kilnEvalFrameState,
        "The interpreter's eval-frame function: 'kiln', 'default', 'other' or 'unsupported'.");
  m.def(
      "set_callback",
      [](py::object callback) {
        if (!callback.is_none() && !PyCallable_Check(callback.ptr()))
          throw py::type_error("set_callback(): expected a callable or None");
        PyObject *previous = kilnSetCallback(callback.ptr());
        if (previous == nullptr)
          throw py::error_already_set();
        return py::reinterpret_steal<py::object>(previous);
      },
      py::arg("callback"),
      "Sets this thread's frame callback cb(func, args, code) -> callable | None and returns the "
      "previous one. None turns capture off on this thread.");
  m.def("get_callback", [] {
    PyObject *cb = kilnGetCallback();
    return cb ? py::reinterpret_borrow<py::object>(cb) : py::none();
  });
  m.def("skip_enter", &kilnSkipEnter, "Disables the hook on this thread until skip_exit().");
  m.def("skip_exit", [] {
    if (kilnSkipExit() < 0)
      throw std::runtime_error("skip_exit() without a matching skip_enter()");
  });
  m.def("skip_depth", &kilnSkipDepth);
  m.def(
      "is_enabled", [] { return kilnHookEnabled() != 0; },
      "True when this thread's frames are intercepted now (a callback and no skip depth).");

  m.def("add_entry", &addCacheEntry, py::arg("code"), py::arg("guards"), py::arg("fn"),
        "Adds (guards, fn) at the front of code's cache.");
  m.def("entries", &cacheEntries, py::arg("code"),
        "code's cache as [(GuardManager, fn)], most recently used first.");
  m.def(
      "mark_skip", [](py::handle code) { markCode(code, KILN_CODE_SKIP); }, py::arg("code"),
      "Never intercept frames of code again (until reset()).");
  m.def(
      "is_skipped", [](py::handle code) { return (codeFlags(code) & KILN_CODE_SKIP) != 0; },
      py::arg("code"));
  m.def(
      "mark_no_capture", [](py::handle code) { markCode(code, KILN_CODE_NO_CAPTURE); },
      py::arg("code"), "Keep using code's entries, but run misses as written.");
  m.def(
      "is_no_capture",
      [](py::handle code) { return (codeFlags(code) & KILN_CODE_NO_CAPTURE) != 0; },
      py::arg("code"));
  m.def("reset", &resetCodeStates, "Clears the caches and marks of every code object.");

  bindGuards(m);
}

} // namespace kiln::frontend

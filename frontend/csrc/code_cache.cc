// Per-code-object capture state and the lookup the frame hook runs (see code_cache.h).
#include "frontend/csrc/code_cache.h"
#include "frontend/csrc/eval_frame.h"
#include "frontend/csrc/guards.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace kiln::frontend {

namespace {

struct CacheEntry {
  py::object guards;
  /// The C++ object inside `guards` (kept alive by it).
  const GuardManager *manager;
  py::object fn;
};

struct CodeState {
  std::vector<CacheEntry> entries;
  int flags = 0;
};

/// Every live CodeState, so that reset() reaches code objects it has no reference to.
std::unordered_set<CodeState *> &registry() {
  static auto *states = new std::unordered_set<CodeState *>();
  return *states;
}

/// Called by CPython when a code object with state is freed (the GIL is held).
void freeCodeState(void *p) {
  auto *state = static_cast<CodeState *>(p);
  registry().erase(state);
  delete state;
}

Py_ssize_t extraIndex() {
  static Py_ssize_t index = _PyEval_RequestCodeExtraIndex(freeCodeState);
  return index;
}

void requireCode(py::handle code) {
  if (!PyCode_Check(code.ptr()))
    throw py::type_error(std::string("expected a code object, got ") +
                         Py_TYPE(code.ptr())->tp_name);
}

/// `code`'s state, or null when it has none (and `create` is false).
CodeState *stateOf(PyObject *code, bool create) {
  Py_ssize_t index = extraIndex();
  if (index < 0) {
    if (create)
      throw std::runtime_error("kiln: no code-object extra slot is available");
    return nullptr;
  }
  void *extra = nullptr;
  if (_PyCode_GetExtra(code, index, &extra) < 0) {
    PyErr_Clear();
    extra = nullptr;
  }
  if (extra != nullptr || !create)
    return static_cast<CodeState *>(extra);
  auto *state = new CodeState();
  if (_PyCode_SetExtra(code, index, state) < 0) {
    delete state;
    throw py::error_already_set();
  }
  registry().insert(state);
  return state;
}

} // namespace

void addCacheEntry(py::handle code, py::object guards, py::object fn) {
  requireCode(code);
  if (!py::isinstance<GuardManager>(guards))
    throw py::type_error("add_entry(): guards must be a GuardManager");
  const GuardManager *manager = guards.cast<const GuardManager *>();
  if (!PyCallable_Check(fn.ptr()))
    throw py::type_error("add_entry(): fn must be callable");
  CodeState *state = stateOf(code.ptr(), true);
  state->entries.insert(state->entries.begin(),
                        CacheEntry{std::move(guards), manager, std::move(fn)});
}

py::list cacheEntries(py::handle code) {
  requireCode(code);
  py::list out;
  if (CodeState *state = stateOf(code.ptr(), false))
    for (const CacheEntry &e : state->entries)
      out.append(py::make_tuple(e.guards, e.fn));
  return out;
}

void markCode(py::handle code, int flags) {
  requireCode(code);
  stateOf(code.ptr(), true)->flags |= flags;
}

int codeFlags(py::handle code) {
  requireCode(code);
  CodeState *state = stateOf(code.ptr(), false);
  return state ? state->flags : 0;
}

void resetCodeStates() {
  // Dropping an entry may run arbitrary __del__ code (which may add entries): take everything
  // out first, release it after the loop.
  std::vector<CacheEntry> dropped;
  for (CodeState *state : registry()) {
    for (CacheEntry &e : state->entries)
      dropped.push_back(std::move(e));
    state->entries.clear();
    state->flags = 0;
  }
  dropped.clear();
}

extern "C" PyObject *kilnCodeLookup(PyObject *code, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *func, int *flags) {
  CodeState *state = stateOf(code, false);
  *flags = state ? state->flags : 0;
  if (state == nullptr || (state->flags & KILN_CODE_SKIP))
    return nullptr;
  // A guard may run Python code that changes this cache (add_entry, reset): each candidate is
  // held while its guards run, and indices are re-checked after every call.
  for (size_t i = 0; i < state->entries.size(); ++i) {
    CacheEntry entry = state->entries[i];
    if (!entry.manager->check(args, nargs, func))
      continue;
    auto &entries = state->entries;
    for (size_t j = 0; j < entries.size(); ++j) {
      if (entries[j].guards.ptr() == entry.guards.ptr() && entries[j].fn.ptr() == entry.fn.ptr()) {
        std::rotate(entries.begin(), entries.begin() + j, entries.begin() + j + 1);
        break;
      }
    }
    *flags = state->flags;
    return entry.fn.release().ptr();
  }
  *flags = state->flags;
  return nullptr;
}

} // namespace kiln::frontend

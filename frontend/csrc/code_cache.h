#pragma once
/// Per-code-object capture state: the cache of (guards -> compiled callable) entries, most
/// recently used first, and the skip / no-capture marks. Stored on the code object itself
/// (_PyCode_SetExtra) and freed with it; a registry of every state lets reset() clear them all.
/// The frame hook reads it through kilnCodeLookup (eval_frame.h).

#include <pybind11/pybind11.h>

namespace kiln::frontend {

namespace py = pybind11;

/// Adds an entry at the front of `code`'s cache. `guards` must be a GuardManager.
void addCacheEntry(py::handle code, py::object guards, py::object fn);
/// `code`'s entries as [(GuardManager, fn)], most recently used first.
py::list cacheEntries(py::handle code);
/// Adds KILN_CODE_* flags to `code`'s state.
void markCode(py::handle code, int flags);
/// `code`'s KILN_CODE_* flags (0 for a code object without state).
int codeFlags(py::handle code);
/// Clears the entries and flags of every code object that has state.
void resetCodeStates();

} // namespace kiln::frontend

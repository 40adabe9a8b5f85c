#pragma once
/// The C interface between the PEP 523 frame-evaluation hook (eval_frame.c, C11: CPython's
/// internal frame headers do not compile as C++) and the C++ side of `kiln._C._capture`.
///
/// [Note: frame capture]
/// While a thread has a callback (`kilnSetCallback`), the interpreter's eval-frame function is
/// kiln's hook. For each new frame of a plain function (not a generator or coroutine, not module
/// or class code, not skipped) the hook asks the per-code cache (code_cache.cc) for an entry whose
/// guards pass on the frame's arguments and calls that entry instead of the frame. On a miss it
/// calls the thread's callback with the hook disabled on that thread; the callback returns a
/// replacement callable or None (run the frame as written). The hook is installed only while at
/// least one thread has a callback, because CPython stops inlining Python-to-Python calls while
/// any eval-frame function is set.

#include <Python.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Per-code flags reported by kilnCodeLookup.
enum {
  /// Never intercept frames of this code.
  KILN_CODE_SKIP = 1,
  /// Use the cached entries, but run the frame as written on a miss (recompile limit reached).
  KILN_CODE_NO_CAPTURE = 2,
};

// Implemented in eval_frame.c.

/// 1 when this build can install the hook (CPython 3.11), else 0.
int kilnEvalFrameSupported(void);
/// Sets this thread's callback (Py_None or NULL clears it) and returns the previous one as a new
/// reference (Py_None when there was none). Installs or removes the interpreter's hook when the
/// number of threads with a callback goes 0 -> 1 or 1 -> 0. NULL with RuntimeError when the
/// interpreter is not supported.
PyObject *kilnSetCallback(PyObject *callback);
/// The interpreter's eval-frame function: "kiln" (this hook), "default" (none installed, so
/// CPython inlines Python-to-Python calls), "other" (another tool's hook) or "unsupported".
const char *kilnEvalFrameState(void);
/// This thread's callback (borrowed) or NULL.
PyObject *kilnGetCallback(void);
/// Disables the hook on this thread until the matching kilnSkipExit (nests).
void kilnSkipEnter(void);
/// Ends one kilnSkipEnter; returns -1 (no exception set) when none is active.
int kilnSkipExit(void);
/// The current disable depth of this thread.
int kilnSkipDepth(void);
/// 1 when frames of this thread are intercepted now (a callback and no disable depth).
int kilnHookEnabled(void);

// Implemented in C++ (code_cache.cc); called by the hook with the hook disabled.

/// Looks up `code`'s cache: returns a new reference to the callable of the first entry whose
/// guards pass on (args, nargs, func), moving that entry to the front, or NULL. Sets `*flags`
/// to the code's KILN_CODE_* bits. Never leaves a Python exception set.
PyObject *kilnCodeLookup(PyObject *code, PyObject *const *args, Py_ssize_t nargs, PyObject *func,
                         int *flags);

#ifdef __cplusplus
} // extern "C"
#endif

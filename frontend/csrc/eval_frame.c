// The PEP 523 frame-evaluation hook of kiln.compile (see [Note: frame capture] in eval_frame.h).
// C11 on purpose: CPython 3.11's internal frame headers only compile as C.
#include <patchlevel.h>

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
#define KILN_HAVE_PEP523 1
#define Py_BUILD_CORE 1
#else
#define KILN_HAVE_PEP523 0
#endif

#include "frontend/csrc/eval_frame.h"

#if KILN_HAVE_PEP523
#include <internal/pycore_frame.h>
#include <internal/pycore_interp.h>
#endif

/// This thread's callback (a strong reference) or NULL.
static _Thread_local PyObject *tlsCallback = NULL;
/// > 0 while this thread runs with the hook disabled (inside the callback, a guard, skip_enter).
static _Thread_local int tlsDepth = 0;
/// The number of threads whose callback is set; the hook is installed while it is positive.
/// Only changed with the GIL held.
static int numCallbackThreads = 0;

int kilnEvalFrameSupported(void) { return KILN_HAVE_PEP523; }

PyObject *kilnGetCallback(void) { return tlsCallback; }

void kilnSkipEnter(void) { ++tlsDepth; }

int kilnSkipExit(void) {
  if (tlsDepth <= 0)
    return -1;
  --tlsDepth;
  return 0;
}

int kilnSkipDepth(void) { return tlsDepth; }

int kilnHookEnabled(void) { return tlsCallback != NULL && tlsDepth == 0; }

#if KILN_HAVE_PEP523

/// Code flags of frames the hook never intercepts: their frames outlive the call (generators,
/// coroutines) and are resumed by the interpreter directly.
static const int kGeneratorFlags =
    CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;

/// The number of argument slots at the start of `localsplus`: positional and keyword-only
/// parameters, then the *args tuple and the **kwargs dict when the code has them.
static Py_ssize_t frameArgCount(const PyCodeObject *code) {
  Py_ssize_t n = code->co_argcount + code->co_kwonlyargcount;
  if (code->co_flags & CO_VARARGS)
    ++n;
  if (code->co_flags & CO_VARKEYWORDS)
    ++n;
  return n;
}

/// Calls this thread's callback as cb(func, args_tuple, code) with the hook disabled and returns
/// its result (a new reference, NULL with an exception set).
static PyObject *callCallback(PyObject *func, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *code) {
  PyObject *tuple = PyTuple_New(nargs);
  if (tuple == NULL)
    return NULL;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(tuple, i, args[i]);
  }
  // The callback may replace itself (set_callback) while it runs: hold it.
  PyObject *callback = tlsCallback;
  Py_INCREF(callback);
  ++tlsDepth;
  PyObject *result = PyObject_CallFunctionObjArgs(callback, func, tuple, code, NULL);
  --tlsDepth;
  Py_DECREF(callback);
  Py_DECREF(tuple);
  return result;
}

/// Calls entry(func, *args): entries need the function object itself for its closure cells
/// and globals (several functions can share one code object).
static PyObject *callEntry(PyObject *entry, PyObject *func, PyObject *const *args,
                           Py_ssize_t nargs) {
  PyObject *small[16];
  PyObject **buf = small;
  if (nargs + 1 > (Py_ssize_t)(sizeof(small) / sizeof(small[0]))) {
    buf = PyMem_Malloc((size_t)(nargs + 1) * sizeof(PyObject *));
    if (buf == NULL)
      return PyErr_NoMemory();
  }
  buf[0] = func;
  for (Py_ssize_t i = 0; i < nargs; ++i)
    buf[i + 1] = args[i];
  PyObject *result = PyObject_Vectorcall(entry, buf, (size_t)(nargs + 1), NULL);
  if (buf != small)
    PyMem_Free(buf);
  return result;
}

/// The hook. A frame that is not run by _PyEval_EvalFrameDefault is still cleared and popped by
/// the caller (_PyEval_Vector in 3.11), so returning another call's result is enough.
static PyObject *kilnEvalFrame(PyThreadState *tstate, _PyInterpreterFrame *frame, int throwflag) {
  if (throwflag || tlsCallback == NULL || tlsDepth > 0 || frame->f_func == NULL)
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  PyCodeObject *code = frame->f_code;
  // Module, class and exec bodies (not CO_OPTIMIZED) run with a locals mapping: never replaced.
  if ((code->co_flags & kGeneratorFlags) || !(code->co_flags & CO_OPTIMIZED))
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);

  PyObject *const *args = frame->localsplus;
  Py_ssize_t nargs = frameArgCount(code);
  PyObject *func = (PyObject *)frame->f_func;
  int flags = 0;
  ++tlsDepth; // a guard may run Python code (__eq__): not intercepted
  PyObject *entry = kilnCodeLookup((PyObject *)code, args, nargs, func, &flags);
  --tlsDepth;
  if (entry != NULL) {
    PyObject *result = callEntry(entry, func, args, nargs);
    Py_DECREF(entry);
    return result;
  }
  if (flags & (KILN_CODE_SKIP | KILN_CODE_NO_CAPTURE))
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);

  PyObject *replacement = callCallback(func, args, nargs, (PyObject *)code);
  if (replacement == NULL)
    return NULL;
  if (replacement == Py_None) {
    Py_DECREF(replacement);
    return _PyEval_EvalFrameDefault(tstate, frame, throwflag);
  }
  PyObject *result = callEntry(replacement, func, args, nargs);
  Py_DECREF(replacement);
  return result;
}

/// The eval-frame function that was installed before kiln's (NULL: the default); restored when
/// the last callback is cleared.
static _PyFrameEvalFunction previousEvalFrame = NULL;

static void installHook(int install) {
  PyInterpreterState *interp = PyThreadState_Get()->interp;
  if (install) {
    previousEvalFrame = _PyInterpreterState_GetEvalFrameFunc(interp);
    _PyInterpreterState_SetEvalFrameFunc(interp, kilnEvalFrame);
  } else {
    _PyInterpreterState_SetEvalFrameFunc(interp, previousEvalFrame ? previousEvalFrame
                                                                   : _PyEval_EvalFrameDefault);
    previousEvalFrame = NULL;
  }
}

#endif // KILN_HAVE_PEP523

const char *kilnEvalFrameState(void) {
#if KILN_HAVE_PEP523
  _PyFrameEvalFunction current = PyThreadState_Get()->interp->eval_frame;
  if (current == NULL)
    return "default";
  return current == kilnEvalFrame ? "kiln" : "other";
#else
  return "unsupported";
#endif
}

PyObject *kilnSetCallback(PyObject *callback) {
  if (callback == Py_None)
    callback = NULL;
#if KILN_HAVE_PEP523
  PyObject *previous = tlsCallback;
  Py_XINCREF(callback);
  tlsCallback = callback;
  if (previous == NULL && callback != NULL && numCallbackThreads++ == 0)
    installHook(1);
  else if (previous != NULL && callback == NULL && --numCallbackThreads == 0)
    installHook(0);
  if (previous == NULL)
    Py_RETURN_NONE;
  return previous;
#else
  if (callback == NULL)
    Py_RETURN_NONE;
  PyErr_Format(PyExc_RuntimeError, "kiln.compile needs CPython 3.11; this is %d.%d",
               PY_MAJOR_VERSION, PY_MINOR_VERSION);
  return NULL;
#endif
}

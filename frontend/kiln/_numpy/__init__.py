"""NumPy programs under `kiln.compile`: NumPy's functions, methods and operators over kiln ops.

The capture (`kiln/_capture/calls_numpy.py`) turns each `numpy.ndarray` a compiled function
reads into a kiln tensor sharing its memory and tracks it as an array; a call of a NumPy
function, an ndarray method or an operator on arrays inlines the implementation found here,
written in ordinary kiln ops (so every NumPy call decomposes into entries of kiln's one op
table, which the compiler fuses like any other graph). Results stay arrays and leave the
compiled code as `numpy.ndarray`s sharing the result's memory (0-d results as NumPy scalars).

NumPy's semantics come from NumPy itself where they are rules rather than kernels: result
dtypes are asked of the installed NumPy at capture time (`_dtypes.py`), so NEP 50 promotion,
float64/int64 defaults, NumPy scalars and Python scalars behave as NumPy's own.
"""

from __future__ import annotations

import numpy as np

import kiln
from kiln._numpy import (
    _calculus,
    _creation,
    _dtypes,  # noqa: F401 - the capture reads kiln._numpy._dtypes
    _extra,
    _histogram,
    _linalg,
    _ndarray,
    _reductions,
    _shape,
    _signal,
    _ufuncs,
)

FUNCTIONS: dict = {}
for _table in (_ufuncs.FUNCTIONS, _reductions.FUNCTIONS, _shape.FUNCTIONS, _creation.FUNCTIONS,
               _linalg.FUNCTIONS, _ndarray.FUNCTIONS, _extra.FUNCTIONS, _histogram.FUNCTIONS,
               _signal.FUNCTIONS, _calculus.FUNCTIONS):
    FUNCTIONS.update(_table)

METHODS = _ndarray.METHODS
OPERATORS = _ndarray.OPERATORS
ATTRIBUTES = _ndarray.ATTRIBUTES
# Called with constants only, these build graph nodes rather than NumPy values.
BUILDS_ARRAYS = _creation.CREATION | {np.array, np.asarray, np.ascontiguousarray}


def lookup(fn):
    """The kiln implementation of NumPy callable `fn`, or None."""
    try:
        return FUNCTIONS.get(fn)
    except TypeError:  # unhashable
        return None


def is_numpy_callable(fn) -> bool:
    """A function, ufunc or type of the numpy package (its calls are NumPy's semantics)."""
    module = getattr(fn, "__module__", None) or ""
    if isinstance(fn, np.ufunc) or isinstance(getattr(fn, "__self__", None), np.ufunc):
        return True  # a ufunc, or one of its methods (np.add.outer, np.maximum.reduce)
    return module == "numpy" or module.startswith("numpy.")


# A compiled function's ndarray argument as a kiln tensor over the same memory (a copy only for
# arrays kiln cannot address: read-only, negative or unaligned strides). C++: it runs on every
# call.
to_tensor = kiln._C._ndarray_argument


def to_tensors(*arrays):
    """`to_tensor` of each argument, where arrays whose memory overlaps (views of one buffer)
    become views of one kiln storage, so the compiled program sees that they alias (a write
    through one is read through the other, as NumPy's are)."""
    return kiln._C._from_numpy_arrays(arrays)


# A compiled function's array result: an ndarray over the tensor's memory; a 0-d result is a
# NumPy scalar, as NumPy's ufuncs and reductions return (C++: it runs on every call).
to_ndarray = kiln._C._ndarray_result


def wrap_numpy(fn):
    """`fn`, NumPy code, taking and returning kiln tensors (torch.compiler.wrap_numpy): the
    code sees its tensor arguments as ndarrays, and its ndarray (and NumPy scalar) results come
    back as tensors. Under kiln.compile the NumPy calls become kiln ops on the tensors
    themselves, with no conversion, so the code compiles for their device; uncompiled, the
    arguments convert through `.numpy()` (CPU tensors only) and the results back."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args, kwargs = _mapped(as_array, (args, kwargs), kiln.Tensor)
        return _mapped(as_tensor, fn(*args, **kwargs), (np.ndarray, np.generic))

    # A code object of its own, named after `fn`: captures of two wrapped functions are two
    # entries (not one code's recompiles), reported under the user's name.
    wrapper.__code__ = wrapper.__code__.replace(co_name=getattr(fn, "__name__", "wrapper"))
    return wrapper


def as_array(t):
    """A tensor as NumPy code sees it (captured: the same tensor, flagged an array)."""
    return t.detach().numpy()


def as_tensor(a):
    """An array result as a tensor (captured: the same tensor, no longer flagged)."""
    return kiln.from_numpy(np.ascontiguousarray(a) if isinstance(a, np.ndarray) else
                           np.asarray(a))


def _mapped(fn, value, types):
    if isinstance(value, types):
        return fn(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_mapped(fn, v, types) for v in value)
    if isinstance(value, dict):
        return {k: _mapped(fn, v, types) for k, v in value.items()}
    return value

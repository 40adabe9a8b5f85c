"""torch's argument errors for ops written in Python.

An op of kiln.nn.functional written in Python (batch_norm, embedding, ...) hands its arguments
to private kernels whose own errors name those kernels (``_embedding(): incompatible function
arguments ...``) or a Python operator (``'>' not supported between instances of 'str' and
'int'``). ``@torch_schema("batch_norm(Tensor input, ...) -> Tensor")`` gives it torch's words:
when the function fails with a TypeError, AttributeError or ValueError, the call is checked
against the schema by the eager bindings' argument binder (``kiln._C._call_error``) and a call
that does not fit raises ``batch_norm(): argument 'running_mean' (position 2) must be Tensor, not
str``; one that fits re-raises the original error. A call that succeeds pays nothing.
"""

from __future__ import annotations

import functools
import os
import sys

from kiln import _C

__all__ = ["torch_schema", "user_stacklevel"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` (called by the caller of this function) that names
    the first frame outside the kiln package: the user's line, however many kiln functions and
    wrappers (torch_schema's) lie between."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def torch_schema(schema: str):
    def wrap(fn):
        @functools.wraps(fn)
        def checked(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (TypeError, AttributeError, ValueError):
                error = _C._call_error(schema, args, kwargs)
                if error is None:
                    raise
            raise TypeError(error)

        return checked

    return wrap

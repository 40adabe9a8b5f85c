"""Functional softmax forms (kiln.nn.functional): softmax, log_softmax, softmin.

torch's F forms accept ``dim=None`` (a deprecated legacy rule picks the dim, with a warning),
``_stacklevel`` and ``dtype``; the work is the C++ kernels behind ``kiln.softmax``.
"""

import warnings

from kiln import _C

__all__ = ["softmax", "log_softmax", "softmin"]


def _get_softmax_dim(name: str, ndim: int, stacklevel: int) -> int:
    warnings.warn(
        f"Implicit dimension choice for {name} has been deprecated. "
        "Change the call to include dim=X as an argument.",
        stacklevel=stacklevel,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """exp(x) / sum(exp(x)) along ``dim``, max-shifted so it cannot overflow."""
    if dim is None:
        dim = _get_softmax_dim("softmax", input.dim(), _stacklevel)
    return _C.softmax(input, dim, dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """log(softmax(x)) along ``dim``, computed as x - max - log(sum(exp(x - max)))."""
    if dim is None:
        dim = _get_softmax_dim("log_softmax", input.dim(), _stacklevel)
    return _C.log_softmax(input, dim, dtype)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """softmax(-x) along ``dim``."""
    if dim is None:
        dim = _get_softmax_dim("softmin", input.dim(), _stacklevel)
    if dtype is not None:
        input = input.to(dtype)
    return _C.softmax(-input, dim)

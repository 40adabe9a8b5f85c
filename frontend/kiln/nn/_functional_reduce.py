"""Functional softmax forms (kiln.nn.functional): softmax, log_softmax, softmin.

torch's F forms accept ``dim=None`` (a deprecated legacy rule picks the dim, with a warning),
``_stacklevel`` and ``dtype``. softmax and log_softmax are generated from the op table;
softmin, which has no row, is written here.
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


# Bound from their ops.def rows (softmax/log_softmax with F's schema, dim=None included).
softmax = _C._nn.softmax
log_softmax = _C._nn.log_softmax


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """softmax(-x) along ``dim``."""
    if dim is None:
        dim = _get_softmax_dim("softmin", input.dim(), _stacklevel)
    if dtype is not None:
        input = input.to(dtype)
    return _C.softmax(-input, dim)

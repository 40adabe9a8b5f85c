"""skip_init (torch.nn.utils.init.skip_init): build a module without initializing its
parameters and buffers.

torch builds the module on the "meta" device and then allocates empty storage. kiln has no meta
device, so the module is built on its final device with kiln.nn.init's fill functions turned
into no-ops for the duration of the constructor: every kiln layer initializes through them, so
the construction allocates the tensors (``kiln.empty``) but does not fill them. The contract is
torch's: the values are unspecified.
"""

from __future__ import annotations

import contextlib
import inspect
import threading

from kiln.nn import init as _init
from kiln.nn.modules.module import Module

__all__ = ["skip_init"]

_INITIALIZERS = (
    "_default_layer_init_",
    "constant_",
    "dirac_",
    "eye_",
    "kaiming_normal_",
    "kaiming_uniform_",
    "normal_",
    "ones_",
    "orthogonal_",
    "trunc_normal_",
    "uniform_",
    "xavier_normal_",
    "xavier_uniform_",
    "zeros_",
)
_lock = threading.RLock()


def _leave_unfilled(tensor, *args, **kwargs):
    return tensor


@contextlib.contextmanager
def _initializers_disabled():
    # The lock serializes constructions that patch the shared kiln.nn.init module.
    with _lock:
        saved = {name: getattr(_init, name) for name in _INITIALIZERS if hasattr(_init, name)}
        try:
            for name in saved:
                setattr(_init, name, _leave_unfilled)
            yield
        finally:
            for name, fn in saved.items():
                setattr(_init, name, fn)


def skip_init(module_cls, *args, **kwargs):
    """``module_cls(*args, **kwargs)`` with parameters and buffers left uninitialized (as
    ``kiln.empty``). The class must accept a ``device`` argument, as torch requires."""
    if not (inspect.isclass(module_cls) and issubclass(module_cls, Module)):
        raise RuntimeError(f"Expected a Module; got {module_cls}")
    if "device" not in inspect.signature(module_cls).parameters:
        raise RuntimeError("Module must support a 'device' arg to skip initialization")
    kwargs["device"] = kwargs.pop("device", "cpu")
    with _initializers_disabled():
        return module_cls(*args, **kwargs)

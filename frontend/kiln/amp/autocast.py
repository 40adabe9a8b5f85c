"""kiln.autocast / kiln.amp.autocast: torch's mixed-precision regions.

Inside an enabled region of a device, the matrix products, convolutions and attention run in
the region's dtype (bfloat16 by default on the CPU, float16 on CUDA) and the losses and long
products in float32; on CUDA softmax, log_softmax and the norms widen to float32 too. The
lists and the casts are C++ (kiln._C._autograd, autograd/autocast.h), applied where each op
starts, so casts are recorded by autograd (gradients come back in each input's own dtype) and
the backward pass never re-casts. Regions nest, ``enabled=False`` turns a region off inside
another, and the state is per thread, as torch's. kiln.compile captures regions: the casts an
op would make become cast nodes of the graph.
"""

from __future__ import annotations

import contextlib
import functools
import warnings

from kiln import _C

__all__ = [
    "autocast",
    "get_autocast_cpu_dtype",
    "get_autocast_dtype",
    "get_autocast_gpu_dtype",
    "is_autocast_available",
    "is_autocast_cpu_enabled",
    "is_autocast_enabled",
    "set_autocast_dtype",
    "set_autocast_enabled",
]

_SUPPORTED = {"cpu": ("bfloat16", "float16"), "cuda": ("float16", "bfloat16")}


def is_autocast_available(device_type: str) -> bool:
    return device_type in _SUPPORTED


def _device(device_type) -> str:
    if not isinstance(device_type, str):
        raise ValueError(
            f"Expected `device_type` of type `str`, got: `{type(device_type).__name__}`")
    if device_type not in _SUPPORTED:
        raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
    return device_type


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether a region is enabled for `device_type` (torch's no-argument form asks CUDA)."""
    return bool(_C._autograd._autocast_region(_device(device_type or "cuda"))[0])


def get_autocast_dtype(device_type: str):
    return _C._autograd._autocast_region(_device(device_type))[1]


def set_autocast_enabled(device_type, enabled=None) -> None:
    if enabled is None:  # torch's old form: set_autocast_enabled(enabled) for CUDA
        device_type, enabled = "cuda", device_type
    device_type = _device(device_type)
    _C._autograd._set_autocast_region(device_type, bool(enabled),
                                      get_autocast_dtype(device_type))


def set_autocast_dtype(device_type: str, dtype) -> None:
    device_type = _device(device_type)
    enabled = _C._autograd._autocast_region(device_type)[0]
    _C._autograd._set_autocast_region(device_type, enabled, dtype)


class _State:
    """What compiled code is guarded on: every region's state as one int (0: none enabled)."""

    @property
    def key(self) -> int:
        return _C._autograd._autocast_key()

    def regions(self) -> dict:
        """{device type: the dtype of its enabled region} (empty: none enabled)."""
        out = {}
        for device in _SUPPORTED:
            enabled, dtype = _C._autograd._autocast_region(device)
            if enabled:
                out[device] = dtype
        return out


_state = _State()


def set_regions(regions: dict) -> None:
    """Sets every device's region to `regions` (device -> dtype of an enabled one; a device
    left out is disabled, keeping its dtype)."""
    for device in _SUPPORTED:
        dtype = regions.get(device, _C._autograd._autocast_region(device)[1])
        _C._autograd._set_autocast_region(device, device in regions, dtype)


@contextlib.contextmanager
def regions_kept():
    """Puts every device's region back as it was when the block ends (capture evaluates code
    that opens blocks; compiled code runs ops in regions its blocks had open)."""
    saved = {d: _C._autograd._autocast_region(d) for d in _SUPPORTED}
    try:
        yield
    finally:
        for device, (enabled, dtype) in saved.items():
            _C._autograd._set_autocast_region(device, enabled, dtype)


def is_autocast_cpu_enabled() -> bool:
    return is_autocast_enabled("cpu")


def get_autocast_cpu_dtype():
    return get_autocast_dtype("cpu")


def get_autocast_gpu_dtype():
    return get_autocast_dtype("cuda")


class autocast:  # noqa: N801 - torch's name
    """A mixed-precision region of `device_type` ("cpu" or "cuda"), as a context manager or a
    decorator. A dtype the device does not support warns and disables the region, as torch."""

    def __init__(self, device_type="cpu", dtype=None, enabled=True, cache_enabled=None):
        self.device = _device(device_type)
        self.fast_dtype = get_autocast_dtype(self.device) if dtype is None else dtype
        self._enabled = bool(enabled)
        self._cache_enabled = cache_enabled  # casts are not cached: accepted, changes nothing
        if self._enabled and str(self.fast_dtype).split(".")[-1] not in _SUPPORTED[self.device]:
            names = " and ".join(f"torch.{n}" for n in _SUPPORTED[self.device])
            warnings.warn(
                f"In {self.device.upper()} autocast, but the target dtype is not supported. "
                f"Disabling autocast.\n{self.device.upper()} Autocast only supports dtype of "
                f"{names} currently.", stacklevel=2)
            self._enabled = False
        self._saved = []

    def __enter__(self):
        self._saved.append(_C._autograd._autocast_region(self.device))
        dtype = self.fast_dtype if self._enabled else self._saved[-1][1]
        _C._autograd._set_autocast_region(self.device, self._enabled, dtype)
        return self

    def __exit__(self, *exc):
        enabled, dtype = self._saved.pop()
        _C._autograd._set_autocast_region(self.device, enabled, dtype)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return fn(*args, **kwargs)

        return wrapped


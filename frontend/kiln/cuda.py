"""kiln.cuda: the CUDA devices kiln can see, with torch.cuda's names.

kiln generates CUDA C from its loop IR, compiles it with NVRTC and will run it through the CUDA
driver API; both libraries are opened with dlopen on first use (``codegen/cuda``), so importing
kiln never needs them. On a machine without the NVIDIA driver or a GPU, ``is_available()`` is
False, ``device_count()`` is 0, and everything that needs a device raises
``RuntimeError("kiln: CUDA is not available: <reason>")``.
"""

from __future__ import annotations

from kiln import _C

__all__ = [
    "current_device",
    "device_count",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "is_available",
    "synchronize",
]


def is_available() -> bool:
    """Whether a CUDA driver and at least one device can be used."""
    return _C._cuda.is_available()


def device_count() -> int:
    """The number of CUDA devices (0 when CUDA is not available)."""
    return _C._cuda.device_count()


def _unavailable_error() -> RuntimeError:
    return RuntimeError(f"kiln: CUDA is not available: {_C._cuda.unavailable_reason()}")


def _require() -> None:
    if not _C._cuda.is_available():
        raise _unavailable_error()


def _index(device) -> int:
    """The device index of None (the current device), an int, 'cuda:1' or a kiln.device."""
    _require()
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    from kiln._tensor import device as device_type

    d = device_type(device)
    if d.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {device}")
    return current_device() if d.index is None else d.index


def current_device() -> int:
    """The index of the current device (kiln uses device 0)."""
    _require()
    return 0


def get_device_properties(device=None) -> dict:
    """name, major, minor, multi_processor_count, total_memory, max_threads_per_block."""
    return _C._cuda.device_properties(_index(device))


def get_device_name(device=None) -> str:
    """The device's name, e.g. 'NVIDIA H100 80GB HBM3'."""
    return get_device_properties(device)["name"]


def get_device_capability(device=None) -> tuple[int, int]:
    """The device's compute capability (major, minor)."""
    props = get_device_properties(device)
    return props["major"], props["minor"]


def synchronize(device=None) -> None:
    """Waits until all work on the device has finished."""
    _C._cuda.synchronize(_index(device))

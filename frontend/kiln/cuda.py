"""kiln.cuda: the CUDA devices kiln can see, with torch.cuda's names.

Tensors move with ``.to("cuda")`` / ``.cuda()`` / ``.cpu()`` or are made there with
``device="cuda"``; every op on them is a one-node graph of kiln's IR, generated as CUDA C,
compiled once per signature by NVRTC and run through the CUDA driver API (``cuda/``). Both
libraries are opened with dlopen on first use, so importing kiln never needs them. On a machine
without the NVIDIA driver or a GPU, ``is_available()`` is False, ``device_count()`` is 0, and
everything that needs a device raises ``RuntimeError("kiln: CUDA is not available: <reason>")``.

``KILN_CUDA_EMULATOR=1`` (set before kiln is imported) replaces the GPUs with one device emulated
on the host: the same generated CUDA C, compiled by the host compiler, in host memory. Tests use
it to run the whole CUDA path on machines without a GPU; it is slow and not for real work.
"""

from __future__ import annotations

from kiln import _C

__all__ = [
    "current_device",
    "empty_cache",
    "is_emulated",
    "memory_allocated",
    "memory_reserved",
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
        index = device
    else:
        from kiln._tensor import device as device_type

        d = device_type(device)
        if d.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {device}")
        index = current_device() if d.index is None else d.index
    if not 0 <= index < device_count():
        raise RuntimeError(f"kiln: CUDA device {index} does not exist ({device_count()} available)")
    return index


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


def is_emulated() -> bool:
    """Whether the CUDA device is the host emulator (``KILN_CUDA_EMULATOR=1``)."""
    return _C._cuda.is_emulated()


def memory_allocated(device=None) -> int:
    """Bytes of device memory held by live tensors and programs on the device."""
    return _C._cuda.memory_allocated(_index(device))


def memory_reserved(device=None) -> int:
    """Bytes the caching allocator holds from the device: live, plus cached for reuse."""
    return _C._cuda.memory_reserved(_index(device))


def empty_cache(device=None) -> None:
    """Returns the cached, unused blocks of the device's memory to the device."""
    _C._cuda.empty_cache(_index(device))


def _eager_programs_compiled() -> int:
    """How many eager op signatures have been compiled in this process (tests of the cache)."""
    return _C._cuda.eager_programs_compiled()

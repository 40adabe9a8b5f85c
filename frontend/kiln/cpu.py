"""kiln.cpu: torch.cpu's device functions, and the host memory kiln allocates.

torch.cpu has no memory statistics; kiln counts the host memory it allocates for tensors and
compiled programs (memory borrowed from NumPy or DLPack is not counted), as torch.cuda does for
its device: `memory_allocated`, `max_memory_allocated` and `reset_peak_memory_stats`.
"""

from __future__ import annotations

from kiln import _C

__all__ = ["current_device", "device_count", "is_available", "max_memory_allocated",
           "memory_allocated", "reset_peak_memory_stats", "synchronize"]  # fmt: skip


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> str:
    return "cpu"


def synchronize(device=None) -> None:
    """CPU kernels finish before they return: nothing to wait for."""


def memory_allocated(device=None) -> int:
    """Bytes of host memory in kiln's live tensors and compiled programs' buffers."""
    return _C._host_memory()[0]


def max_memory_allocated(device=None) -> int:
    """The most `memory_allocated` has been since the process started or the last
    `reset_peak_memory_stats`."""
    return _C._host_memory()[1]


def reset_peak_memory_stats(device=None) -> None:
    _C._reset_host_peak()

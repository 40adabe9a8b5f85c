"""kiln.nn.attention: torch.nn.attention's backend selection for scaled_dot_product_attention.

kiln picks its attention kernels itself (the compiler fuses or decomposes the computation), so
there are no backends to switch: ``sdpa_kernel`` checks its argument as torch does and records
the selection for ``_cur_sdpa_kernel_backends``, but results do not depend on it. Inside code
compiled by ``kiln.compile`` the block is captured as one that changes nothing.
"""

from __future__ import annotations

import enum
import functools

__all__ = ["SDPBackend", "WARN_FOR_UNFUSED_KERNELS", "sdpa_kernel"]

WARN_FOR_UNFUSED_KERNELS = False


class SDPBackend(enum.IntEnum):
    ERROR = -1
    MATH = 0
    FLASH_ATTENTION = 1
    EFFICIENT_ATTENTION = 2
    CUDNN_ATTENTION = 3
    OVERRIDEABLE = 4


_ALL = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.MATH, SDPBackend.OVERRIDEABLE]
_selected: list = list(_ALL)


def _cur_sdpa_kernel_backends(with_priority: bool = False) -> list:
    return list(_selected)


class sdpa_kernel:  # noqa: N801 - torch's name (a context manager function there)
    """Selects the attention backends for the block (recorded only; see the module doc)."""

    _kiln_noop_context_in_capture = True

    def __init__(self, backends, set_priority: bool = False) -> None:
        if not isinstance(backends, (list, SDPBackend)):
            raise AssertionError(
                "Backend must be an instance of SDPBackend or a list of SDPBackend instances, "
                f"got {type(backends).__name__}")
        if isinstance(backends, SDPBackend):
            backends = [backends]
        self.backends = list(dict.fromkeys(backends))
        self.set_priority = set_priority
        self._previous: list = []

    def __enter__(self) -> dict:
        global _selected
        self._previous.append(_selected)
        _selected = list(self.backends)
        return {}

    def __exit__(self, *exc) -> bool:
        global _selected
        _selected = self._previous.pop()
        return False

    def __call__(self, fn):
        backends, set_priority = self.backends, self.set_priority

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with sdpa_kernel(backends, set_priority):  # per call, so kiln.compile takes it
                return fn(*args, **kwargs)

        return wrapped

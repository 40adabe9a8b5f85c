"""autocast: accepted where it changes nothing; reduced precision raises (not implemented)."""

from __future__ import annotations

import functools

import kiln


def is_autocast_available(device_type: str) -> bool:
    return False


class autocast:  # noqa: N801 - torch's name
    def __init__(self, device_type="cpu", dtype=None, enabled=True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(
                f"Expected `device_type` of type `str`, got: `{type(device_type).__name__}`"
            )
        self.device_type, self.dtype, self.enabled = device_type, dtype, enabled
        reduced = dtype not in (None, kiln.float32)
        if enabled and (reduced or dtype is None):
            raise NotImplementedError(
                f"kiln.amp.autocast({device_type!r}, dtype={dtype}): mixed-precision autocast "
                "is not implemented yet; run in float32 (enabled=False or "
                "contextlib.nullcontext()), or cast the model with model.to(kiln.bfloat16)"
            )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapped

"""kiln.amp: torch.amp's names for mixed precision.

``autocast`` regions run matrix products, convolutions and attention in bfloat16 or float16
and losses in float32 (autocast.py says which ops); ``GradScaler`` is torch's loss scaler
(dynamic scale, inf/NaN detection, skipped steps, its state_dict), and works disabled, as
training scripts construct it with ``enabled=(dtype == "float16")``.
"""

from kiln.amp.autocast import (
    autocast,
    get_autocast_dtype,
    is_autocast_available,
    is_autocast_enabled,
    set_autocast_dtype,
    set_autocast_enabled,
)
from kiln.amp.grad_scaler import GradScaler

__all__ = [
    "GradScaler",
    "autocast",
    "get_autocast_dtype",
    "is_autocast_available",
    "is_autocast_enabled",
    "set_autocast_dtype",
    "set_autocast_enabled",
]

"""kiln.amp: torch.amp's names for mixed precision.

``GradScaler`` is torch's loss scaler (dynamic scale, inf/NaN detection, skipped steps, its
state_dict), and works disabled, as training scripts construct it with
``enabled=(dtype == "float16")``. ``autocast`` runs its block unchanged when it is disabled or
asks for float32; reduced-precision autocast (bfloat16/float16 regions) is not implemented yet
and raises, rather than silently computing in float32.
"""

from kiln.amp.autocast import autocast, is_autocast_available
from kiln.amp.grad_scaler import GradScaler

__all__ = ["GradScaler", "autocast", "is_autocast_available"]

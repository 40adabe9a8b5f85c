"""torch.cuda.amp: the deprecated CUDA spellings of kiln.amp (`autocast(dtype=float16)` is
`kiln.autocast("cuda", dtype=...)`; `GradScaler` is kiln.amp.GradScaler for "cuda")."""

from __future__ import annotations

import kiln
from kiln.amp import GradScaler as _GradScaler

__all__ = ["GradScaler", "autocast"]


class autocast(kiln.autocast):  # noqa: N801 - torch's name
    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True):
        super().__init__("cuda", dtype=dtype or kiln.float16, enabled=enabled,
                         cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):  # fmt: skip
        super().__init__("cuda", init_scale, growth_factor, backoff_factor, growth_interval,
                         enabled)

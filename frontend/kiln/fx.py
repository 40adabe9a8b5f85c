"""torch.fx's names that model files use at import time. kiln captures Python bytecode, not
FX graphs: `wrap` (which marks a function as a leaf for FX tracing) has nothing to mark and
returns its argument."""

from __future__ import annotations

__all__ = ["wrap"]


def wrap(fn_or_name):
    return fn_or_name

"""_ops_elementwise: Python-level ops of this area (see kiln/_ops.py)."""

__all__ = []

"""_ops_linalg: Python-level ops of this area (see kiln/_ops.py)."""

__all__ = []

"""kiln.utils: torch.utils's data loading (``kiln.utils.data``)."""

from kiln.utils import data

__all__ = ["data"]

"""kiln.nn.parallel: data-parallel training across processes (DistributedDataParallel)."""

from kiln.nn.parallel.distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]

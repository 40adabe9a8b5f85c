"""kiln.distributed.fsdp: torch's FullyShardedDataParallel on kiln.distributed (Open MPI)."""

from kiln.distributed.fsdp.fully_sharded import (
    BackwardPrefetch,
    CPUOffload,
    FullStateDictConfig,
    FullyShardedDataParallel,
    LocalStateDictConfig,
    ShardingStrategy,
    StateDictType,
)

__all__ = ["BackwardPrefetch", "CPUOffload", "FullStateDictConfig", "FullyShardedDataParallel",
           "LocalStateDictConfig", "ShardingStrategy", "StateDictType"]  # fmt: skip

"""Process groups from ``new_group``: a subset of the world's ranks with an MPI communicator of
its own (distributed/process_group.h ``split``), and how a collective's ``group=`` argument and
its global ``src``/``dst`` ranks become that communicator and its ranks."""

from __future__ import annotations

import functools

from kiln import _C

_D = _C._distributed


class ProcessGroup:
    """torch's ProcessGroup handle: ``ranks`` are world ranks in group-rank order; the C++ group
    exists on the members only (None on the others, and for the world group)."""

    def __init__(self, ranks: list[int], handle, world_rank: int, is_world: bool = False):
        self.ranks = ranks
        self._handle = handle
        self._world_rank = world_rank
        self._is_world = is_world
        self._destroyed = False

    def rank(self) -> int:
        return self.ranks.index(self._world_rank) if self._world_rank in self.ranks else -1

    def size(self) -> int:
        return len(self.ranks)

    def __repr__(self) -> str:
        kind = "world" if self._is_world else f"ranks {self.ranks}"
        return f"ProcessGroup({kind})"


class _NotMember:
    """What a collective on a group this rank is not in does: nothing, as torch's."""


NOT_MEMBER = _NotMember()


def resolve(group):
    """The C++ group for `group` (None: the default), or NOT_MEMBER."""
    if group is None or getattr(group, "_is_world", False):
        return None
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"kiln.distributed: group must be a group from new_group, got "
                        f"{type(group).__name__}")  # fmt: skip
    if group._destroyed:
        raise RuntimeError(f"kiln.distributed: the group of ranks {group.ranks} was destroyed")
    if group._handle is None:
        return NOT_MEMBER
    return group


def destroy(group) -> None:
    """destroy_process_group(group): its collectives are errors from now on (its communicator
    goes with the process)."""
    group._handle = None
    group._destroyed = True


def source_rank(group) -> int:
    """The world rank whose tensors a wrapper broadcasts to the others: the group's first."""
    return 0 if resolve(group) is None else group.ranks[0]


def local_rank(name: str, group, global_rank, group_rank):
    """The rank within `group` of a collective's src/dst: `group_rank` as given, else the
    group position of the world rank `global_rank`."""
    if group_rank is not None or group is None:
        return global_rank if group_rank is None else group_rank
    if global_rank not in group.ranks:
        raise ValueError(f"kiln.distributed.{name}: the global rank {global_rank} is not part of "
                         f"the group {group.ranks}")  # fmt: skip
    return group.ranks.index(global_rank)


def bound(name: str, fn, group, tensors):
    """`fn` (the _C collective for `tensors`) on `group`'s communicator."""
    if group is None:
        return fn
    if any(t.device.type == "cuda" for t in tensors):
        raise RuntimeError(f"kiln.distributed.{name}: groups from new_group run on MPI, for CPU "
                           "tensors; CUDA tensors use the default group")  # fmt: skip
    return functools.partial(fn, group=group._handle)

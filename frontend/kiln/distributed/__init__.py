"""kiln.distributed: torch.distributed's process-group API on Open MPI (CPU tensors) and NCCL
(CUDA tensors).

Launch the processes with ``kilnrun --nproc-per-node N script.py`` (or ``mpirun -np N python
script.py``); each calls ``init_process_group(...)`` and then the collectives below. Collectives
are in place as torch's are; ``async_op=True`` returns a work handle whose ``wait()`` finishes
it. Every operation has a deadline (``timeout=`` of init_process_group, 30 minutes by default, as
torch's): a rank that died, skipped a collective or passed a tensor of another size or dtype
makes the others raise a RuntimeError naming the operation and the rank, instead of hanging.

Backends: ``"mpi"`` runs collectives on CPU tensors over Open MPI. ``"nccl"`` (or
``"cpu:mpi,cuda:nccl"``) also sets up NCCL for CUDA tensors: each collective goes to NCCL when its
tensors are on CUDA and to MPI when they are on the CPU. ``backend=None`` is MPI plus NCCL when
every rank has a CUDA device and libnccl (``pip install nvidia-nccl-cu13``, or ``KILN_NCCL_LIB``
naming the library), set up by the first collective on CUDA tensors, as torch's. Each rank's device
is ``device_id=``, else LOCAL_RANK (or Open MPI's local rank) modulo the device count. NCCL
collectives are queued on the stream kiln's CUDA ops run on, so they need no synchronization around
them; ``wait()`` blocks until the device has finished one, and on timeout aborts the NCCL
communicator (CUDA collectives cannot run again in that process). NCCL has no tags: a ``send``
matches the peer's next ``recv`` from this rank. Without a CUDA device or libnccl,
``init_process_group("nccl")`` raises a RuntimeError saying which is missing. The C++ side is
distributed/process_group.h and distributed/nccl_group.h.
"""

from __future__ import annotations

import atexit
import datetime
import os
import sys
import types

import kiln
from kiln import _C

from . import _groups, _nccl
from ._groups import ProcessGroup

_D = _C._distributed
ReduceOp = _D.ReduceOp

__all__ = [
    "ReduceOp",
    "all_gather",
    "all_gather_into_tensor",
    "all_reduce",
    "barrier",
    "broadcast",
    "destroy_process_group",
    "get_backend",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "irecv",
    "is_available",
    "is_initialized",
    "isend",
    "new_group",
    "ProcessGroup",
    "recv",
    "reduce",
    "reduce_scatter_tensor",
    "send",
]

_DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)

# torch's dist.group.WORLD / GroupMember.WORLD: the default group (None means it everywhere)
group = GroupMember = types.SimpleNamespace(WORLD=None, NON_GROUP_MEMBER=-100)


def is_available() -> bool:
    return True


def is_initialized() -> bool:
    return _D.is_initialized()


def _env_int(*names):
    for name in names:
        if os.environ.get(name, "").strip():
            return int(os.environ[name])
    return None


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):  # fmt: skip
    """Joins the MPI job this process was launched in (torch's signature), and sets up NCCL for
    CUDA tensors when `backend` asks for it (module docstring). The rank and world size come from
    MPI; given ones (or torch's RANK / WORLD_SIZE variables) must agree."""
    wanted = _nccl.parse_backend(backend)
    device = _nccl.device_index(device_id) if wanted else -1
    if is_initialized():
        raise ValueError("trying to initialize the default process group twice!")
    if wanted == "nccl":
        _nccl.require_available()  # before MPI starts: the error is the first thing that happens
    if timeout is None:
        timeout = _DEFAULT_TIMEOUT
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
    got_rank, got_size = _D.init(float(seconds))
    _WORLD["rank"], _WORLD["size"] = got_rank, got_size
    # MPI must be finalized before exit (mpirun reports a process that did not as failed);
    # torch scripts often never call destroy_process_group.
    atexit.register(_finalize_at_exit)
    _watch_uncaught_exceptions()
    want_rank = rank if rank >= 0 else _env_int("RANK")
    want_size = world_size if world_size > 0 else _env_int("WORLD_SIZE")
    if want_size is not None and want_size != got_size:
        raise RuntimeError(
            f"kiln.distributed: world_size={want_size} was asked, but the MPI job has {got_size} "
            "processes (launch with kilnrun --nproc-per-node N or mpirun -np N)"
        )
    if want_rank is not None and want_rank != got_rank:
        raise RuntimeError(
            f"kiln.distributed: rank={want_rank} was asked, but MPI gave this process rank "
            f"{got_rank}"
        )
    _nccl.setup(wanted, backend, device, got_size)


def destroy_process_group(group=None) -> None:
    """Ends the default group (and MPI with it), or only `group`, a group from new_group."""
    if group is not None and not getattr(group, "_is_world", False):
        _groups.destroy(group)
        return
    _nccl.teardown()  # NCCL's communicator first: MPI carried its setup
    _D.finalize()
    _WORLD.clear()


def _finalize_at_exit():
    # After an uncaught exception MPI is not finalized: MPI_Finalize would wait for the other
    # ranks, which wait in a collective for this one. Exiting without it makes mpirun end the
    # whole job at once, naming this rank.
    if is_initialized() and not _WORLD.get("failed"):
        destroy_process_group()


def _watch_uncaught_exceptions():
    previous = sys.excepthook

    def hook(kind, value, traceback):
        _WORLD["failed"] = True
        # The error in one line first: mpirun ends the job as soon as this rank exits and may
        # drop the end of its stderr, which is where the traceback says what went wrong.
        sys.stderr.write(f"rank {_WORLD.get('rank', '?')}: {kind.__name__}: {value}\n")
        sys.stderr.flush()
        previous(kind, value, traceback)

    sys.excepthook = hook


def get_backend(group=None) -> str:
    _require_init()
    return _nccl.STATE.get("backend", "mpi")


def get_rank(group=None) -> int:
    """This process's rank in `group` (the world by default); -1 outside the group."""
    _require_init()
    if _groups.resolve(group) is None:
        return _WORLD["rank"]
    return group.rank()


def get_world_size(group=None) -> int:
    _require_init()
    if _groups.resolve(group) is None:
        return _WORLD["size"]
    return group.size() if group.rank() >= 0 else -1


_WORLD: dict = {}  # rank and size of the initialized group


def _require_init():
    if not is_initialized():
        raise ValueError(
            "Default process group has not been initialized, please make sure to call "
            "init_process_group."
        )


def _check_tensor(name, tensor):
    if not isinstance(tensor, kiln.Tensor):
        raise TypeError(
            f"kiln.distributed.{name}: expected a kiln.Tensor, got {type(tensor).__name__}"
        )


_group = _nccl.group_fn  # (name, *tensors): the _C function of NCCL or MPI that takes them


def _finish(work, async_op):
    if async_op:
        return work
    work.wait()
    return None


def _collective(name, group, *tensors):
    """The _C function running collective `name` on these tensors in `group`, or None when this
    rank is not in the group (the collective then does nothing here, as torch's)."""
    pg = _groups.resolve(group)
    if pg is _groups.NOT_MEMBER:
        return None
    return _groups.bound(name, _group(name, *tensors), pg, tensors)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    _check_tensor("all_reduce", tensor)
    if (fn := _collective("all_reduce", group, tensor)) is None:
        return None
    return _finish(fn(tensor, op), async_op)


def broadcast(tensor, src=0, group=None, async_op=False, group_src=None):
    _check_tensor("broadcast", tensor)
    if (fn := _collective("broadcast", group, tensor)) is None:
        return None
    return _finish(fn(tensor, _groups.local_rank("broadcast", group, src, group_src)), async_op)


def reduce(tensor, dst=0, op=ReduceOp.SUM, group=None, async_op=False, group_dst=None):
    _check_tensor("reduce", tensor)
    if (fn := _collective("reduce", group, tensor)) is None:
        return None
    return _finish(fn(tensor, _groups.local_rank("reduce", group, dst, group_dst), op), async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    _check_tensor("all_gather_into_tensor", output_tensor)
    _check_tensor("all_gather_into_tensor", input_tensor)
    fn = _collective("all_gather_into_tensor", group, output_tensor, input_tensor)
    if fn is None:
        return None
    return _finish(fn(output_tensor, input_tensor), async_op)


class _Then:
    """A work handle that runs `then` once its work has finished."""

    def __init__(self, work, then):
        self._work, self._then, self._done = work, then, False

    def is_completed(self):
        if not self._done and self._work.is_completed():
            self._then()
            self._done = True
        return self._done

    def wait(self):
        if not self._done:
            self._work.wait()
            self._then()
            self._done = True
        return True


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """Each rank's `tensor` into tensor_list[rank] (its rank in the group)."""
    _check_tensor("all_gather", tensor)
    size = get_world_size(group)
    if (fn := _collective("all_gather", group, tensor)) is None:
        return None
    if len(tensor_list) != size:
        raise RuntimeError(
            f"kiln.distributed.all_gather: tensor_list has {len(tensor_list)} tensors for a "
            f"group of {size}"
        )
    flat = kiln.empty((size,) + tuple(tensor.shape), dtype=tensor.dtype,
                      device=tensor.device)  # fmt: skip
    work = fn(flat, tensor.contiguous())

    def scatter():
        for i, t in enumerate(tensor_list):
            t.copy_(flat[i])

    return _finish(_Then(work, scatter), async_op)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op=False):  # noqa: A002
    _check_tensor("reduce_scatter_tensor", output)
    _check_tensor("reduce_scatter_tensor", input)
    if (fn := _collective("reduce_scatter_tensor", group, output, input)) is None:
        return None
    return _finish(fn(output, input, op), async_op)


def isend(tensor, dst=None, group=None, tag=0, group_dst=None):
    _check_tensor("isend", tensor)
    if (fn := _collective("isend", group, tensor)) is None:
        return None
    return fn(tensor, _groups.local_rank("isend", group, dst, group_dst), tag)


def irecv(tensor, src=None, group=None, tag=0, group_src=None):
    _check_tensor("irecv", tensor)
    if src is None and group_src is None:
        raise RuntimeError("kiln.distributed.irecv: src is required (no receive from any rank)")
    if (fn := _collective("irecv", group, tensor)) is None:
        return None
    return fn(tensor, _groups.local_rank("irecv", group, src, group_src), tag)


def send(tensor, dst=None, group=None, tag=0, group_dst=None):
    if (work := isend(tensor, dst, group, tag, group_dst)) is not None:
        work.wait()


def recv(tensor, src=None, group=None, tag=0, group_src=None):
    if (work := irecv(tensor, src, group, tag, group_src)) is None:
        return -1  # not a member of the group, as torch's
    work.wait()
    return src if group_src is None else group_src


def barrier(group=None, async_op=False, device_ids=None):
    pg = _groups.resolve(group)
    if pg is _groups.NOT_MEMBER:
        return None
    return _finish(_D.barrier(group=None if pg is None else pg._handle), async_op)


def new_group(ranks=None, timeout=None, backend=None, pg_options=None,
              use_local_synchronization=False, group_desc=None, device_id=None):  # fmt: skip
    """torch's new_group: a group of the listed world ranks (all of them when None), ranked in
    ascending order of their world ranks. Every rank of the world calls it with the same list;
    the ranks outside get a group whose collectives do nothing for them. Its collectives run on
    MPI (CPU tensors)."""
    _require_init()
    world = list(range(get_world_size()))
    ranks = world if ranks is None else sorted(int(r) for r in ranks)
    # without a timeout, the default group's (init_process_group's) applies
    seconds = -1.0 if timeout is None else timeout
    seconds = seconds.total_seconds() if isinstance(seconds, datetime.timedelta) else seconds
    handle = _D.new_group(ranks, float(seconds))
    return _groups.ProcessGroup(ranks, handle, get_rank())

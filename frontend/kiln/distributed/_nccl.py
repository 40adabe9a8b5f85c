"""The NCCL side of kiln.distributed: which backends ``init_process_group`` was asked for, the
NCCL group's setup over the MPI world (distributed/nccl_group.h), and which group a collective's
tensors go to (CUDA tensors to NCCL, CPU tensors to MPI)."""

from __future__ import annotations

import kiln
from kiln import _C

_D = _C._distributed

# What init_process_group set up: "backend" (get_backend's answer) and, when NCCL was not set
# up, "why_not" (said when a CUDA tensor reaches a collective).
STATE: dict = {}

_CHOICES = "'mpi' (or 'gloo'), 'nccl', 'cpu:mpi,cuda:nccl' or None"


def parse_backend(backend):
    """What `backend` asks of CUDA tensors: "nccl", None (MPI only) or "auto" (backend=None:
    NCCL when this machine can run it). "gloo", torch's CPU backend, means MPI here, so torch
    scripts that ask for it run unchanged. Raises torch's ValueError for any other backend."""
    if backend is None:
        return "auto"
    text = str(backend).lower().replace(" ", "")
    text = text.replace("gloo", "mpi")
    if text in ("mpi", "cpu:mpi"):
        return None
    if text in ("nccl", "cuda:nccl"):
        return "nccl"
    pairs = dict(part.split(":", 1) for part in text.split(",") if ":" in part)
    if (
        len(pairs) == len(text.split(","))
        and set(pairs) <= {"cpu", "cuda"}
        and pairs.get("cpu", "mpi") == "mpi"
        and pairs.get("cuda", "nccl") == "nccl"
    ):
        return "nccl" if "cuda" in pairs else None
    raise ValueError(
        f"kiln.distributed: backend {backend!r} is not available; kiln runs collectives on Open "
        f"MPI for CPU tensors and on NCCL for CUDA tensors: backend= takes {_CHOICES}"
    )


def require_available():
    """Raises RuntimeError naming what is missing (a CUDA device, libnccl) before anything
    starts, so a machine that cannot run NCCL fails at once and on every rank."""
    reason = _D.nccl_unavailable_reason()
    if reason:
        raise RuntimeError(f"kiln.distributed: init_process_group(backend='nccl'): {reason}")


def device_index(device_id):
    """init_process_group's device_id as a CUDA device index; -1 lets the local rank choose."""
    if device_id is None:
        return -1
    if isinstance(device_id, int):
        return device_id
    kind, _, number = str(device_id).partition(":")  # "cuda:1", kiln.device or torch.device
    if kind != "cuda" or not (number.isdigit() or not number):
        raise ValueError(
            f"kiln.distributed: device_id={device_id!r} is not a CUDA device (an int, 'cuda:N' "
            "or kiln.device)"
        )
    return int(number) if number else -1


def setup(wanted, backend, device, world_size):
    """Creates the NCCL group on `device` (device_index's answer) when `wanted` (parse_backend's)
    asks for it; after MPI's init, on every rank."""
    STATE.clear()
    STATE["backend"] = "mpi"
    if wanted is None:
        STATE["why_not"] = f"init_process_group was given backend={backend!r}"
        return
    if wanted == "auto":
        # As torch's default: NCCL is set up by the first collective on CUDA tensors (which
        # every rank calls), so a CPU-only script never touches a GPU or NCCL.
        why_not = _D.nccl_unavailable_reason()
        if why_not:
            STATE["why_not"] = why_not
            return
        STATE["lazy"] = (device, world_size)
        STATE["backend"] = "cpu:mpi,cuda:nccl"
        return
    _D.nccl_init(device)
    STATE["backend"] = str(backend).lower()


def _start_lazily():
    """backend=None's NCCL setup, at the first CUDA collective. The ranks decide together: the
    setup is collective, so a rank that cannot run it means no NCCL group anywhere, not a hang."""
    device, world_size = STATE.pop("lazy")
    why_not = _D.nccl_unavailable_reason()
    able = kiln.tensor([0 if why_not else 1], dtype=kiln.int64)
    if world_size > 1:
        _D.all_reduce(able, _D.ReduceOp.MIN).wait()
    if not able.item():
        STATE["why_not"] = why_not or "another rank cannot run NCCL"
        STATE["backend"] = "mpi"
        return
    _D.nccl_init(device)


def teardown():
    _D.nccl_destroy()
    STATE.clear()


# The _C function of each collective whose name differs.
_FUNCTIONS = {
    "all_gather_into_tensor": "all_gather",
    "reduce_scatter_tensor": "reduce_scatter",
    "isend": "send",
    "irecv": "recv",
}


def group_fn(name, *tensors):
    """The `_C._distributed` function of collective `name` for these tensors: NCCL's for CUDA
    tensors, MPI's for CPU ones."""
    fn = _FUNCTIONS.get(name, name)
    if not any(t.device.type == "cuda" for t in tensors) or not _D.is_initialized():
        return getattr(_D, fn)  # MPI's, which also says when no group was initialized
    if not _D.nccl_is_initialized() and "lazy" in STATE:
        _start_lazily()
    if not _D.nccl_is_initialized():
        why = STATE.get("why_not", "")
        raise RuntimeError(
            f"kiln.distributed.{name}: CUDA tensors need the NCCL backend "
            "(init_process_group(backend='nccl') or 'cpu:mpi,cuda:nccl')"
            + (f"; it was not set up: {why}" if why else "")
        )
    return getattr(_D, "nccl_" + fn)

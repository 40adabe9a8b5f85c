"""Run under kilnrun: kiln.distributed's NCCL backend on CUDA tensors. Modes:

- `collectives`: every collective on rank-dependent float32 and bfloat16 CUDA tensors, plus the
  argument errors; rank r saves what it got to OUT/rank{r}.npz for test_nccl.py to check
  against NumPy.
- `fake`: the same without the ops that need CUDA kernels, over the fake libcuda and libnccl of
  tests/cpp (a world of one), with the fake's log of NCCL calls.
- `async_error`: the fake libnccl reports an asynchronous error: the collective raises, and the
  communicator is aborted.
- `skip` (2 ranks): rank 1 runs a CPU all_reduce where rank 0 runs a CUDA one, so rank 0's NCCL
  all_reduce does not complete and times out.
"""

import ctypes
import os
import sys
import time

import numpy as np

import kiln
import kiln.distributed as dist

out_dir, mode = sys.argv[1], sys.argv[2]
dist.init_process_group("nccl", timeout=5 if mode == "skip" else None)
r, n = dist.get_rank(), dist.get_world_size()
local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
dev = f"cuda:{local % kiln.cuda.device_count()}"  # the group's choice without device_id
got = {"backend": np.array(dist.get_backend()), "device": np.array(dev)}


def data(r, shape=(5,)):
    return (np.arange(np.prod(shape)).reshape(shape) % 7 + r + 1).astype(np.float32)


def cuda(a, dtype="float32"):
    """`a` as a CUDA tensor of `dtype`, cast on the host (a device cast is a kernel)."""
    return kiln.tensor(np.asarray(a)).to(getattr(kiln, dtype)).to(dev)


def host(t):
    return t.cpu().float().numpy() if t.dtype == kiln.bfloat16 else t.cpu().numpy()


def fake_calls():
    lib = ctypes.CDLL(os.environ["KILN_NCCL_LIB"])
    lib.fake_nccl_calls.restype = ctypes.c_char_p
    return lib.fake_nccl_calls().decode()


if mode == "async_error":
    t = cuda(data(r))
    dist.all_reduce(t)  # fine until the library reports the error
    os.environ["KILN_FAKE_NCCL_ASYNC_ERROR"] = "1"
    errors = []
    for _ in range(2):
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            errors.append(str(e))
    dist.destroy_process_group()
    np.savez(f"{out_dir}/async_error.npz", errors=np.array(errors), calls=np.array(fake_calls()))
    sys.exit(0)

if mode == "skip":
    dist.all_reduce(cuda(data(r, (4,))))  # NCCL connects the ranks at their first collectives
    try:
        if r == 0:
            dist.all_reduce(cuda(data(r, (4,))))
        else:
            # the same count and dtype pass the comparison over MPI; then rank 1 stays away
            # from NCCL for longer than the timeout, so rank 0's error is the one that ends the job
            dist.all_reduce(kiln.tensor(data(r, (4,))), async_op=True)
            time.sleep(30)
        print(f"rank {r} finished", flush=True)
    except RuntimeError as e:
        print(f"rank {r} raised: {e}", flush=True)
        os._exit(1)  # at once, without MPI_Finalize (it waits for rank 1): mpirun stops rank 1
    sys.exit(0)

for dt in ("float32", "bfloat16"):
    for op in ("SUM", "AVG", "MAX", "MIN", "PRODUCT"):
        t = cuda(data(r), dt)
        work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=True)
        work.wait()
        assert work.is_completed()
        got[f"all_reduce_{dt}_{op}"] = host(t)
    t = cuda(data(r, (2, 3)), dt)
    dist.broadcast(t, src=n - 1)
    got[f"broadcast_{dt}"] = host(t)
    flat = cuda(np.zeros(n * 4), dt)
    dist.all_gather_into_tensor(flat, cuda(data(r, (4,)), dt))
    got[f"all_gather_into_tensor_{dt}"] = host(flat)
    out = cuda(np.zeros(3), dt)
    dist.reduce_scatter_tensor(out, cuda(data(r, (n * 3,)), dt))
    got[f"reduce_scatter_{dt}"] = host(out)
    t = cuda(data(r), dt)
    dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
    if r == 0:
        got[f"reduce_{dt}"] = host(t)
t = cuda(data(r).astype(np.int64), "int64")
dist.all_reduce(t)
got["all_reduce_int64_SUM"] = host(t)
t = cuda(np.array([r == 0, True, False]), "bool")
dist.all_reduce(t, op=dist.ReduceOp.MAX)
got["all_reduce_bool_MAX"] = host(t)
c = kiln.tensor(data(r))  # a CPU tensor in the same job goes to MPI
dist.all_reduce(c)
got["all_reduce_cpu"] = c.numpy()
if mode != "fake":  # these need CUDA kernels (a copy, a cast), which the fake cannot run
    parts = [kiln.zeros(2, 3, device=dev) for _ in range(n)]
    dist.all_gather(parts, cuda(data(r, (2, 3))))
    got["all_gather"] = np.stack([host(p) for p in parts])
if n == 2:
    ring = cuda(np.zeros(5))
    if r == 0:
        dist.send(cuda(data(r)), dst=1)
        dist.recv(ring, src=1)
    else:
        dist.recv(ring, src=0)
        dist.send(cuda(data(r)), dst=0)
    got["ring"] = host(ring)

errors = []
for attempt in (
    lambda: dist.all_reduce(cuda(data(r, (2, 3))).t()),
    lambda: dist.all_gather_into_tensor(cuda(np.zeros(n * 4 + 1)), cuda(data(r, (4,)))),
    lambda: dist.all_gather_into_tensor(cuda(np.zeros(n * 4)), kiln.tensor(data(r, (4,)))),
    lambda: dist.all_reduce(cuda(data(r), "int16")),
    lambda: dist.all_reduce(cuda(data(r), "int64"), op=dist.ReduceOp.AVG),
    lambda: dist.all_reduce(cuda(np.array([True]), "bool")),
    lambda: dist.send(cuda(data(r)), dst=r),
    lambda: dist.all_reduce(cuda(data(r, (4 + r,)))),  # the ranks disagree when n > 1
):
    try:
        attempt()
        errors.append("")
    except RuntimeError as e:
        errors.append(str(e))
got["errors"] = np.array(errors)
dist.barrier()
dist.destroy_process_group()
if mode == "fake":
    got["calls"] = np.array(fake_calls())
np.savez(f"{out_dir}/rank{r}.npz", **got)

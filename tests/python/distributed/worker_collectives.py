"""Run under kilnrun: every collective on rank-dependent inputs; rank r saves what it got to
OUT/rank{r}.npz for test_distributed.py to check against NumPy."""

import sys

import numpy as np

import kiln
import kiln.distributed as dist

out_dir = sys.argv[1]
dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
got = {}


def data(r, dtype, shape=(5,)):
    return (np.arange(np.prod(shape)).reshape(shape) % 7 + r + 1).astype(dtype)


for dt in ("float32", "float64", "float16", "bfloat16", "int64"):
    np_dt = "float32" if dt == "bfloat16" else dt
    for op in ("SUM", "AVG", "MAX", "MIN", "PRODUCT"):
        if op == "AVG" and dt == "int64":
            continue
        t = kiln.tensor(data(r, np_dt)).to(getattr(kiln, dt))
        work = dist.all_reduce(t, op=getattr(dist.ReduceOp, op), async_op=True)
        work.wait()
        got[f"all_reduce_{dt}_{op}"] = t.float().numpy() if dt == "bfloat16" else t.numpy()
t = kiln.tensor(data(r, "float32", (2, 3)))
dist.broadcast(t, src=n - 1)
got["broadcast"] = t.numpy()
parts = [kiln.zeros(2, 3) for _ in range(n)]
dist.all_gather(parts, kiln.tensor(data(r, "float32", (2, 3))))
got["all_gather"] = np.stack([p.numpy() for p in parts])
flat = kiln.zeros(n * 4, dtype=kiln.int64)
dist.all_gather_into_tensor(flat, kiln.tensor(data(r, "int64", (4,))))
got["all_gather_into_tensor"] = flat.numpy()
out = kiln.zeros(3)
dist.reduce_scatter_tensor(out, kiln.tensor(data(r, "float32", (n * 3,))))
got["reduce_scatter"] = out.numpy()
t = kiln.tensor(data(r, "float64"))
dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
if r == 0:
    got["reduce"] = t.numpy()
ring = kiln.zeros(5)
if r % 2 == 0:
    dist.send(kiln.tensor(data(r, "float32")), dst=(r + 1) % n)
    dist.recv(ring, src=(r - 1) % n)
else:
    dist.recv(ring, src=(r - 1) % n)
    dist.send(kiln.tensor(data(r, "float32")), dst=(r + 1) % n)
got["ring"] = ring.numpy()
# every collective of every dtype started at once (async_op=True), then waited for in reverse
works, results = [], {}
for dt in ("float32", "float64", "float16", "bfloat16", "int64"):
    np_dt = "float32" if dt == "bfloat16" else dt
    kdt = getattr(kiln, dt)
    b = kiln.tensor(data(r, np_dt, (2, 3))).to(kdt)
    works.append(dist.broadcast(b, src=0, async_op=True))
    g = kiln.zeros(n * 4, dtype=kdt)
    works.append(dist.all_gather_into_tensor(g, kiln.tensor(data(r, np_dt, (4,))).to(kdt),
                                             async_op=True))  # fmt: skip
    s = kiln.zeros(3, dtype=kdt)
    works.append(dist.reduce_scatter_tensor(s, kiln.tensor(data(r, np_dt, (n * 3,))).to(kdt),
                                            async_op=True))  # fmt: skip
    d = kiln.tensor(data(r, np_dt)).to(kdt)
    works.append(dist.reduce(d, dst=n - 1, op=dist.ReduceOp.SUM, async_op=True))
    results[dt] = (b, g, s, d)
for work in reversed(works):
    work.wait()
for dt, tensors in results.items():
    for name, t in zip(("broadcast", "all_gather_into_tensor", "reduce_scatter", "reduce"),
                       tensors, strict=True):  # fmt: skip
        if name != "reduce" or r == n - 1:
            got[f"async_{name}_{dt}"] = t.float().numpy()
dist.barrier()
np.savez(f"{out_dir}/rank{r}.npz", **got)

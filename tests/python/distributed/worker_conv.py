"""Run under kilnrun: the conv-BatchNorm net of bench/train_models.py, its BatchNorms converted
to SyncBatchNorm, trained for 10 SGD steps on each rank's half of the batch with DDP or FSDP,
eager or compiled. Rank 0 saves the losses, the final state and the running statistics."""

import sys

import numpy as np

import kiln
import kiln.distributed as dist
from kiln._capture.backend_compiled import CpuBackend
from kiln.distributed.fsdp import FullyShardedDataParallel as FSDP

out_dir, bench_dir, wrapper, mode = sys.argv[1:5]
sys.path.insert(0, bench_dir)
from train_models import conv_net  # noqa: E402

dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
kiln.manual_seed(200 + r)  # different initial weights: the wrappers take rank 0's
model = kiln.nn.SyncBatchNorm.convert_sync_batchnorm(conv_net(kiln))
wrapped = (kiln.nn.parallel.DistributedDataParallel(model) if wrapper == "ddp"
           else FSDP(model, sync_module_states=True))  # fmt: skip
backend = CpuBackend()
run = kiln.compile(wrapped, backend=backend) if mode == "compiled" else wrapped
opt = kiln.optim.SGD(wrapped.parameters(), lr=0.05, momentum=0.9)
rng = np.random.default_rng(3)
x = rng.standard_normal((8, 3, 12, 12)).astype(np.float32)
y = rng.integers(0, 10, 8)
rows = slice(r * 8 // n, (r + 1) * 8 // n)
losses = []
for _ in range(10):
    loss = kiln.nn.functional.cross_entropy(run(kiln.tensor(x[rows])), kiln.tensor(y[rows]))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    both = loss.detach().reshape(1).clone()
    dist.all_reduce(both, op=dist.ReduceOp.AVG)
    losses.append(both.item())
named = wrapped.module if wrapper == "ddp" else wrapped  # FSDP's names are the model's own
state = {k: v.detach().numpy() for k, v in named.state_dict().items()}
if r == 0:
    reports = backend.reports
    np.savez(f"{out_dir}/conv.npz", losses=np.array(losses),
             parts=sum(len(r.parts) for r in reports),
             backward_parts=sum(r.backward_parts for r in reports),
             eager_targets=np.array(sorted({t for r in reports for _, t, _ in r.fallbacks})),
             **{f"w_{k}": v for k, v in state.items()})

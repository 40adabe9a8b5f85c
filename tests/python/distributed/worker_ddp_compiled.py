"""Run under kilnrun: kiln.compile of a DistributedDataParallel nanoGPT-style model, trained as
worker_ddp.py trains the eager one. Rank 0 saves the losses, the final weights, the compiled
report and the order in which compiled backward parts ran and gradient all-reduces started."""

import sys

import numpy as np

import kiln
import kiln.distributed as dist
from kiln import _C
from kiln._capture.backend_compiled import CpuBackend

sys.path.insert(0, sys.argv[2])
from train_models import gpt_classes  # noqa: E402

out_dir = sys.argv[1]
dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
kiln.manual_seed(100 + r)  # different initial weights: DDP broadcasts rank 0's
model = gpt_classes(kiln, vocab=32, block=8, n_embd=16, n_head=2, n_layer=2)()
ddp = kiln.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
backend = CpuBackend(fallback=False)
compiled = kiln.compile(ddp, backend=backend)
opt = kiln.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)

# The order of events in a backward: "b" when a compiled part's backward runs, "a" when DDP
# starts a bucket's all-reduce.
events = []
record, all_reduce = _C._autograd._record_function, dist.all_reduce


def recording(name, fn, *args, **kwargs):
    def run(*grads):
        events.append("b")
        return fn(*grads)

    return record(name, run, *args, **kwargs)


def all_reduce_logged(tensor, *args, **kwargs):
    events.append("a")
    return all_reduce(tensor, *args, **kwargs)


_C._autograd._record_function = recording
dist.all_reduce = all_reduce_logged

rng = np.random.default_rng(0)
idx = rng.integers(0, 32, (4, 8))
tgt = rng.integers(0, 32, (4, 8))
rows = slice(r * 4 // n, (r + 1) * 4 // n)
losses = []
for _ in range(10):
    events.clear()
    _, loss = compiled(kiln.tensor(idx[rows]), kiln.tensor(tgt[rows]))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    step_events = "".join(events)
    kiln.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    both = loss.detach().reshape(1).clone()
    all_reduce(both, op=dist.ReduceOp.AVG)
    losses.append(both.item())
(report,) = backend.reports
if r == 0:
    weights = {f"w_{k}": v.detach().numpy() for k, v in model.state_dict().items()}
    np.savez(f"{out_dir}/ddp_compiled.npz", losses=np.array(losses), events=step_events,
             parts=len(report.parts), backward_parts=report.backward_parts,
             eager_nodes=report.eager_nodes, splits=report.bucket_splits,
             buckets=len(ddp._buckets), **weights)  # fmt: skip

"""Run under kilnrun: nanoGPT-style and MLP training with DistributedDataParallel on each rank's
half of the batch (bucketed, async all-reduce; a no_sync accumulation step; an unused
parameter with find_unused_parameters=True). Rank 0 saves losses and final weights."""

import sys

import numpy as np

import kiln
import kiln.distributed as dist

sys.path.insert(0, sys.argv[2])
from train_models import gpt_classes  # noqa: E402

out_dir = sys.argv[1]
dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
kiln.manual_seed(100 + r)  # different initial weights: DDP broadcasts rank 0's
model = gpt_classes(kiln, vocab=32, block=8, n_embd=16, n_head=2, n_layer=2)()
ddp = kiln.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.002)
opt = kiln.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
rng = np.random.default_rng(0)
idx = rng.integers(0, 32, (4, 8))
tgt = rng.integers(0, 32, (4, 8))
data = kiln.utils.data.TensorDataset(kiln.tensor(idx), kiln.tensor(tgt))
sampler = kiln.utils.data.DistributedSampler(data, shuffle=False)  # rows r, r + n, ...
loader = kiln.utils.data.DataLoader(data, batch_size=4 // n, sampler=sampler)
losses = []
for epoch in range(10):
    sampler.set_epoch(epoch)
    (xb, yb), *rest = list(loader)
    assert not rest  # one batch per rank per epoch
    _, loss = ddp(xb, yb)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    kiln.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    both = loss.detach().reshape(1).clone()
    dist.all_reduce(both, op=dist.ReduceOp.AVG)
    losses.append(both.item())
state = {k: v.detach().numpy() for k, v in model.state_dict().items()}

# no_sync: two half-batches accumulated locally, then one synchronized step
mlp = kiln.nn.Sequential(kiln.nn.Linear(6, 8), kiln.nn.Tanh(), kiln.nn.Linear(8, 2))
unused = kiln.nn.Linear(3, 3)  # never called: find_unused_parameters marks it ready
holder = kiln.nn.ModuleDict({"mlp": mlp, "unused": unused})


class Net(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.holder = holder

    def forward(self, x):
        return self.holder["mlp"](x)


kiln.manual_seed(7)  # the same MLP on every rank and in the test's single-process run
for p in holder.parameters():
    with kiln.no_grad():
        p.copy_(kiln.randn(p.shape) * 0.5)
ddp2 = kiln.nn.parallel.DistributedDataParallel(Net(), find_unused_parameters=True)
x = kiln.tensor(np.random.default_rng(1).standard_normal((8, 6)).astype(np.float32))
mine = x[r * 8 // n : (r + 1) * 8 // n]
with ddp2.no_sync():
    ddp2(mine[:2]).pow(2).sum().backward()
ddp2(mine[2:]).pow(2).sum().backward()
mlp_grads = [p.grad.numpy() for p in mlp.parameters()]

# gradient_as_bucket_view: the same gradients, as views of one bucket's memory
twin = kiln.nn.Sequential(kiln.nn.Linear(6, 8), kiln.nn.Tanh(), kiln.nn.Linear(8, 2))
with kiln.no_grad():
    for a, b in zip(twin.parameters(), mlp.parameters(), strict=True):
        a.copy_(b)
ddp3 = kiln.nn.parallel.DistributedDataParallel(twin, gradient_as_bucket_view=True)
with ddp3.no_sync():
    ddp3(mine[:2]).pow(2).sum().backward()
ddp3(mine[2:]).pow(2).sum().backward()
view_grads = [p.grad.numpy() for p in twin.parameters()]
view_storages = len({p.grad._storage_ptr() for p in twin.parameters()})

# kiln.compile(ddp): the wrapped model's forward and backward compile; the reduction is DDP's
from kiln._capture.backend_compiled import CpuBackend  # noqa: E402

backend = CpuBackend(fallback=False)
compiled = kiln.compile(ddp2, backend=backend)
for p in mlp.parameters():
    p.grad = None
compiled(mine).pow(2).sum().backward()
compiled_grads = [p.grad.numpy() for p in mlp.parameters()]
(report,) = backend.reports
assert report.eager_nodes == 0 and report.fallbacks == [], report.fallbacks
if r == 0:
    weights = {f"w_{k}": v for k, v in state.items()}
    grads = {f"mlp_grad{i}": g for i, g in enumerate(mlp_grads)}
    grads.update({f"compiled_grad{i}": g for i, g in enumerate(compiled_grads)})
    grads.update({f"view_grad{i}": g for i, g in enumerate(view_grads)})
    grads["view_storages"] = view_storages
    np.savez(f"{out_dir}/ddp.npz", losses=np.array(losses), **weights, **grads)

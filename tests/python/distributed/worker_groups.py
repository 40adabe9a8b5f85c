"""Run under kilnrun with 4 ranks: collectives on groups from new_group. Each rank saves what it
got; test_distributed.py checks it against NumPy."""

import sys

import numpy as np

import kiln
import kiln.distributed as dist

out_dir = sys.argv[1]
dist.init_process_group("mpi")
r = dist.get_rank()
got = {}
evens, odds = dist.new_group([0, 2]), dist.new_group([3, 1])  # every rank makes both
mine = evens if r % 2 == 0 else odds
other = odds if r % 2 == 0 else evens
got["rank"] = [dist.get_rank(mine), dist.get_rank(other), dist.get_world_size(mine),
               dist.get_world_size(other), dist.get_rank(dist.group.WORLD)]  # fmt: skip

x = kiln.tensor([float(r + 1), 10.0 * (r + 1)])
dist.all_reduce(x, group=mine)
got["all_reduce"] = x.numpy()
assert dist.all_reduce(kiln.ones(2), group=other) is None  # not a member: nothing happens

y = kiln.full((3,), float(r))
dist.broadcast(y, src=mine.ranks[-1], group=mine)  # a global rank
got["broadcast"] = y.numpy()
z = kiln.full((3,), float(r))
dist.broadcast(z, group_src=0, group=mine)  # a group rank
got["broadcast_group_src"] = z.numpy()

pieces = [kiln.empty(2) for _ in range(2)]
dist.all_gather(pieces, kiln.tensor([float(r), float(r * r)]), group=mine)
got["all_gather"] = np.stack([p.numpy() for p in pieces])

out = kiln.empty(2)
dist.reduce_scatter_tensor(out, kiln.arange(4, dtype=kiln.float32) + r, group=mine)
got["reduce_scatter"] = out.numpy()

peer = [q for q in mine.ranks if q != r][0]
box = kiln.zeros(2)
if r < peer:
    dist.send(kiln.tensor([float(r), 7.0]), dst=peer, group=mine)
else:
    dist.recv(box, src=peer, group=mine)
got["recv"] = box.numpy()
dist.barrier(group=mine)

three = dist.new_group([1, 2, 3])
t = kiln.tensor([float(r)])
dist.all_reduce(t, op=dist.ReduceOp.MAX, group=three)
got["three"] = t.numpy()
got["three_rank"] = dist.get_rank(three)

# DDP over each pair: the pair's first rank's weights, gradients averaged within the pair
kiln.manual_seed(r)
model = kiln.nn.Linear(3, 1, bias=False)
ddp = kiln.nn.parallel.DistributedDataParallel(model, process_group=mine)
ddp(kiln.tensor([[float(r + 1), 2.0, 3.0]])).sum().backward()
got["ddp_weight"] = model.weight.detach().numpy()
got["ddp_grad"] = model.weight.grad.numpy()
kiln.manual_seed(mine.ranks[0])
got["ddp_expected_weight"] = kiln.nn.Linear(3, 1, bias=False).weight.detach().numpy()

# the same under kiln.compile with bucket_cap_mb=0 (every parameter its own bucket and part)
kiln.manual_seed(r)
model0 = kiln.nn.Sequential(kiln.nn.Linear(3, 1, bias=False))
compiled0 = kiln.compile(kiln.nn.parallel.DistributedDataParallel(model0, process_group=mine,
                                                                  bucket_cap_mb=0))  # fmt: skip
compiled0(kiln.tensor([[float(r + 1), 2.0, 3.0]])).sum().backward()
got["ddp_cap0_grad"] = model0[0].weight.grad.numpy()

# FSDP over each pair: half of the parameters per rank; the full state is the pair's model
from kiln.distributed.fsdp import FullyShardedDataParallel as FSDP  # noqa: E402

kiln.manual_seed(mine.ranks[0])
plain = kiln.nn.Linear(4, 2)
full = {k: v.detach().clone() for k, v in plain.state_dict().items()}
fsdp = FSDP(plain, process_group=mine)
fsdp(kiln.ones(1, 4)).sum().backward()
got["fsdp_shard"] = fsdp._flat_param.numel()
grad_sum = fsdp._flat_param.grad.sum().reshape(1).clone()
dist.all_reduce(grad_sum, group=mine)
got["fsdp_grad_sum"] = grad_sum.item()
state = fsdp.state_dict()
got["fsdp_state_same"] = all(bool((state[k] == v).all()) for k, v in full.items())

errors = []
for bad in ([0, 4], [1, 1]):
    try:
        dist.new_group(bad)
    except (RuntimeError, ValueError) as e:
        errors.append(str(e))
try:
    dist.broadcast(kiln.zeros(1), src=1 if r % 2 == 0 else 0, group=mine)
except ValueError as e:
    errors.append(str(e))
dist.destroy_process_group(three)  # only that group ends
try:
    dist.all_reduce(kiln.ones(1), group=three)
except RuntimeError as e:
    errors.append(str(e))
got["world_alive"] = dist.is_initialized() and dist.get_world_size() == 4
got["recv_off_group"] = dist.recv(kiln.zeros(1), src=0, group=other)
got["errors"] = np.array(errors)
np.savez(f"{out_dir}/groups{r}.npz", **got)

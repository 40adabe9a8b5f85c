"""Run under kilnrun: nanoGPT-style training with FullyShardedDataParallel (each transformer
block a unit of its own, the rest the root unit) on each rank's half of the batch, eager and
under kiln.compile; no_sync accumulation; the full state dict and its reload. Rank 0 saves
losses, final weights and gradients."""

import functools
import sys

import numpy as np

import kiln
import kiln.distributed as dist
from kiln._capture.backend_compiled import CpuBackend
from kiln.distributed.fsdp import FullStateDictConfig, ShardingStrategy, StateDictType
from kiln.distributed.fsdp import FullyShardedDataParallel as FSDP
from kiln.distributed.fsdp.wrap import transformer_auto_wrap_policy

out_dir, bench_dir, compiled = sys.argv[1], sys.argv[2], sys.argv[3] == "compiled"
strategy = getattr(ShardingStrategy, sys.argv[4])
sys.path.insert(0, bench_dir)
from train_models import gpt_classes  # noqa: E402

dist.init_process_group("mpi")
r, n = dist.get_rank(), dist.get_world_size()
kiln.manual_seed(100 + r)  # different initial weights: sync_module_states broadcasts rank 0's
GPT = gpt_classes(kiln, vocab=32, block=8, n_embd=16, n_head=2, n_layer=2)
model = GPT()
block_cls = type(model.transformer.h[0])
policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={block_cls})
fsdp = FSDP(model, auto_wrap_policy=policy, sync_module_states=True, sharding_strategy=strategy)
units = [m for m in fsdp.modules() if isinstance(m, FSDP)]
assert len(units) == 3, len(units)  # the two blocks and the root
shard_numel = sum(p.numel() for p in fsdp.parameters())
full_numel = sum(v.numel() for v in fsdp.state_dict().values())
opt = kiln.optim.SGD(fsdp.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
backend = CpuBackend()
run = kiln.compile(fsdp, backend=backend) if compiled else fsdp
rng = np.random.default_rng(0)
idx, tgt = rng.integers(0, 32, (4, 8)), rng.integers(0, 32, (4, 8))
mine = slice(r * 4 // n, (r + 1) * 4 // n)
losses = []
for _ in range(10):
    _, loss = run(kiln.tensor(idx[mine]), kiln.tensor(tgt[mine]))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    fsdp.clip_grad_norm_(1.0)
    opt.step()
    both = loss.detach().reshape(1).clone()
    dist.all_reduce(both, op=dist.ReduceOp.AVG)
    losses.append(both.item())
state = fsdp.state_dict()

# between a forward and its backward, FULL_SHARD holds no gathered parameters (SHARD_GRAD_OP
# keeps them all); after the backward neither holds more than the shards
assert all(u.sharding_strategy is strategy for u in units)
loss = run(kiln.tensor(idx[mine]), kiln.tensor(tgt[mine]))[1]
held_between = sum(u._full._storage_nbytes() for u in units)
full_bytes = sum(u._full.numel() * u._full.element_size() for u in units)
loss.backward()
held_after = sum(u._full._storage_nbytes() for u in units)
try:
    float(model.transformer.h[0].attn.c_attn.weight.sum())  # a released view
    reading = "read"
except RuntimeError as e:
    reading = str(e)

# no_sync: two quarter-batches accumulated locally, then one synchronized backward
opt.zero_grad(set_to_none=True)
half = slice(mine.start, mine.start + 1)
with fsdp.no_sync():
    run(kiln.tensor(idx[half]), kiln.tensor(tgt[half]))[1].backward()
run(kiln.tensor(idx[half.stop:mine.stop]), kiln.tensor(tgt[half.stop:mine.stop]))[1].backward()
grad_norm = float(fsdp.clip_grad_norm_(1e9))

# a reload of the full state dict gives the same outputs
fresh = FSDP(GPT(), auto_wrap_policy=policy, sharding_strategy=strategy)
fresh.load_state_dict(state)
with kiln.no_grad():
    args = (kiln.tensor(idx), kiln.tensor(tgt))
    same = float((fresh(*args)[0] - fsdp(*args)[0]).abs().max())
# two forwards before one backward; a full state dict taken between a forward and its backward
opt.zero_grad(set_to_none=True)
loss = run(kiln.tensor(idx[mine]), kiln.tensor(tgt[mine]))[1]
loss = loss + run(kiln.tensor(idx[mine]), kiln.tensor(tgt[mine]))[1]
mid = fsdp.state_dict()
loss.backward()
two_forwards = float(fsdp.clip_grad_norm_(1e9))
mid_same = all(bool((mid[k] == v).all()) for k, v in state.items())

# state dict types: rank0_only gives the full one to rank 0 only; a local one holds this rank's
# shards and reloads them (into a fresh model) with no communication
with FSDP.state_dict_type(fsdp, StateDictType.FULL_STATE_DICT,
                          FullStateDictConfig(rank0_only=True)):  # fmt: skip
    rank0_keys = len(fsdp.state_dict())
rank1_keys = kiln.tensor([float(rank0_keys if r == 1 else 0)])
dist.all_reduce(rank1_keys)  # what rank 1 got
with FSDP.state_dict_type(fsdp, StateDictType.LOCAL_STATE_DICT):
    local = fsdp.state_dict()
    fresh_local = FSDP(GPT(), auto_wrap_policy=policy, sharding_strategy=strategy)
    with FSDP.state_dict_type(fresh_local, StateDictType.LOCAL_STATE_DICT):
        fresh_local.load_state_dict(local)
        try:
            fresh_local.load_state_dict({k: v[:-1] if k.endswith("_flat_param") else v
                                         for k, v in local.items()})
            wrong_world = ""
        except RuntimeError as e:
            wrong_world = str(e)
assert fsdp._state_dict_type is StateDictType.FULL_STATE_DICT  # restored after the block
local_keys = sorted(local)
with kiln.no_grad():
    local_same = float((fresh_local(*args)[0] - fsdp(*args)[0]).abs().max())

# a frozen unit between trainable ones: its weights, freed after its forward, are gathered
# again for the gradient of its input
kiln.manual_seed(9)
net = kiln.nn.Sequential(kiln.nn.Linear(4, 4), kiln.nn.Linear(4, 4), kiln.nn.Linear(4, 2))
net[1].requires_grad_(False)
reference = kiln.nn.Sequential(*[kiln.nn.Linear(4, 4), kiln.nn.Linear(4, 4), kiln.nn.Linear(4, 2)])
reference.load_state_dict(net.state_dict())
middle = net[1]
frozen_fsdp = FSDP(net, sharding_strategy=strategy,
                   auto_wrap_policy=lambda module, recurse, nonwrapped_numel: recurse
                   or module is middle)  # fmt: skip
xs = kiln.ones(3, 4)
frozen_fsdp(xs).pow(2).sum().backward()
frozen_norm = float(frozen_fsdp.clip_grad_norm_(1e9))
reference[1].requires_grad_(False)
reference(xs).pow(2).sum().backward()
frozen_reference = float(kiln.nn.utils.clip_grad_norm_(reference.parameters(), 1e9))

# units that cannot be flattened are refused with the reason
refusals = []
frozen = kiln.nn.Sequential(kiln.nn.Linear(3, 3), kiln.nn.Linear(3, 3))
frozen[0].weight.requires_grad_(False)
tied = kiln.nn.Sequential(kiln.nn.Linear(3, 3, bias=False), kiln.nn.Linear(3, 3, bias=False))
tied[1].weight = tied[0].weight
for bad, policy_ in ((frozen, None),
                     (tied, functools.partial(transformer_auto_wrap_policy,
                                              transformer_layer_cls={kiln.nn.Linear}))):
    try:
        FSDP(bad, auto_wrap_policy=policy_)
    except ValueError as e:
        refusals.append(str(e))
if r == 0:
    np.savez(f"{out_dir}/fsdp.npz", losses=np.array(losses), shard_numel=shard_numel,
             full_numel=full_numel, grad_norm=grad_norm, same=same,
             two_forwards=two_forwards, mid_same=mid_same, refusals=np.array(refusals),
             held_between=held_between, held_after=held_after, full_bytes=full_bytes,
             reading=reading, parts=sum(len(r.parts) for r in backend.reports),
             backward_parts=sum(r.backward_parts for r in backend.reports),
             eager_nodes=sum(r.eager_nodes for r in backend.reports), rank0_keys=rank0_keys,
             rank1_keys=rank1_keys.item(),
             local_keys=np.array(local_keys),
             local_same=local_same, wrong_world=wrong_world, frozen_norm=frozen_norm,
             frozen_reference=frozen_reference,
             **{f"w_{k}": v.numpy() for k, v in state.items()})
dist.destroy_process_group()

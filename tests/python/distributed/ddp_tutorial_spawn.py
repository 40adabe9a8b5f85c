"""PyTorch's "Getting Started with Distributed Data Parallel" basic demo on the CPU, with `torch`
swapped for `kiln`: torch.multiprocessing.spawn, init_process_group("gloo", rank=..., world_size=
...), one DDP step. Each rank saves its weights to OUT_DIR; `python ddp_tutorial_spawn.py OUT_DIR
fail` makes rank 1 raise instead."""
# ruff: noqa: UP008, I001 - kept in the shape of the tutorial
import os
import sys

import kiln as torch
import kiln.distributed as dist
import kiln.multiprocessing as mp
import kiln.nn as nn
import kiln.optim as optim
from kiln.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ['MASTER_ADDR'] = 'localhost'
    os.environ['MASTER_PORT'] = '12355'
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


class ToyModel(nn.Module):
    def __init__(self):
        super(ToyModel, self).__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def demo_basic(rank, world_size, out_dir):
    print(f"Running basic DDP example on rank {rank}.")
    setup(rank, world_size)
    if rank == 1 and sys.argv[2:] == ["fail"]:
        raise ValueError("rank 1 failed on purpose")
    torch.manual_seed(0)
    model = ToyModel()
    ddp_model = DDP(model)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.ones(20, 10) * (rank + 1))
    labels = torch.zeros(20, 5)
    loss_fn(outputs, labels).backward()
    optimizer.step()
    torch.save(model.state_dict(), os.path.join(out_dir, f"rank{rank}.pt"))
    cleanup()
    print(f"Finished running basic DDP example on rank {rank}.")


def run_demo(demo_fn, world_size, out_dir):
    mp.spawn(demo_fn, args=(world_size, out_dir), nprocs=world_size, join=True)


if __name__ == "__main__":
    run_demo(demo_basic, 2, sys.argv[1])

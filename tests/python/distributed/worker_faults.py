"""Run under kilnrun with a fault: `skip` (rank 1 skips an all_reduce), `die` (rank 1 exits
mid-step) or `mismatch` (the ranks pass different sizes). Every rank prints what happened."""

import os
import sys

import kiln
import kiln.distributed as dist

fault = sys.argv[1]
dist.init_process_group("mpi", timeout=3)
r = dist.get_rank()
try:
    if fault == "skip":
        if r != 1:
            dist.all_reduce(kiln.ones(4))
    elif fault == "die":
        if r == 1:
            os._exit(3)
        for _ in range(100):
            dist.all_reduce(kiln.ones(4))
    elif fault == "mismatch":
        dist.all_reduce(kiln.ones(4 + r))
    print(f"rank {r} finished", flush=True)
except RuntimeError as e:
    print(f"rank {r} raised: {e}", flush=True)
    sys.exit(1)

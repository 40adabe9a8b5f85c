"""Run under kilnrun with a fault: `skip` (rank 1 skips an all_reduce), `die` (rank 1 exits
mid-step), `mismatch` (the ranks pass different sizes), `groups` (the ranks pass different rank
lists to new_group), `skip_group` (rank 1 never calls new_group) or `raise` (rank 1 raises an
uncaught exception while the others train). Every rank prints what
happened."""

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
    elif fault == "raise":  # an uncaught exception, as a bug in a training script
        if r == 1:
            raise ValueError("rank 1 broke")
        for _ in range(100):
            dist.all_reduce(kiln.ones(4))
    elif fault == "groups":
        dist.new_group([0, 1] if r == 0 else [1])
    elif fault == "skip_group":
        if r != 1:
            dist.new_group([0])
    print(f"rank {r} finished", flush=True)
except RuntimeError as e:
    print(f"rank {r} raised: {e}", flush=True)
    sys.exit(1)

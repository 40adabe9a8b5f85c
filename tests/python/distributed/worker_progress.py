"""Run under kilnrun: an async all_reduce of 16 MB, then half a second with no call into MPI
(the rank computes). It must have completed meanwhile: kiln's progress thread moves MPI's
non-blocking collectives along, which is what lets DDP's bucket all-reduces overlap a backward."""

import time

import kiln
import kiln.distributed as dist

dist.init_process_group("mpi")
x = kiln.ones(4 << 20)
dist.barrier()
work = dist.all_reduce(x, async_op=True)
time.sleep(0.5)
done = work.is_completed()
work.wait()
print(f"rank {dist.get_rank()} completed while computing: {done}; sum {x.sum().item()}")

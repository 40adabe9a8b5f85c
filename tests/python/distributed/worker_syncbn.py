"""Run under kilnrun with 2 ranks: SyncBatchNorm's training forward and backward on each rank's
half of a batch whose channels have a large mean and a small spread, in float32, float16 and
bfloat16, with and without affine parameters, momentum 0.1 and None. Rank r saves its outputs,
input gradients, parameter gradients and running statistics for the test to compare with torch's
batch norm of the whole batch."""

import sys

import numpy as np

import kiln
import kiln.distributed as dist

out_dir = sys.argv[1]
dist.init_process_group("mpi")
r = dist.get_rank()
rng = np.random.default_rng(5)
x = (30.0 + 0.1 * rng.standard_normal((8, 3, 5, 5))).astype(np.float32)
dy = rng.standard_normal((8, 3, 5, 5)).astype(np.float32)
rows = slice(4 * r, 4 * r + 4)
got = {}
for dtype in ("float32", "float16", "bfloat16"):
    for affine in (True, False):
        for momentum in (0.1, None):
            bn = kiln.nn.SyncBatchNorm(3, affine=affine, momentum=momentum)
            if affine:
                with kiln.no_grad():
                    bn.weight.copy_(kiln.tensor([1.0, 2.0, 0.5]))
                    bn.bias.copy_(kiln.tensor([0.0, -1.0, 3.0]))
            xi = kiln.tensor(x[rows]).to(getattr(kiln, dtype)).requires_grad_(True)
            y = bn(xi)
            y.backward(kiln.tensor(dy[rows]).to(xi.dtype))
            key = f"{dtype}_{affine}_{momentum}"
            assert y.dtype == xi.dtype and xi.grad.dtype == xi.dtype, key
            got[f"y_{key}"] = y.detach().float().numpy()
            got[f"dx_{key}"] = xi.grad.float().numpy()
            got[f"mean_{key}"] = bn.running_mean.numpy()
            got[f"var_{key}"] = bn.running_var.numpy()
            if affine:
                got[f"dw_{key}"] = bn.weight.grad.numpy()
                got[f"db_{key}"] = bn.bias.grad.numpy()
np.savez(f"{out_dir}/syncbn{r}.npz", **got)

"""SyncBatchNorm's training step across processes: batch statistics over every rank's batch.

Forward: each rank sums its input and squares per channel; one all-reduce of (sums, sums of
squares, count) gives the mean and biased variance of the whole batch, which normalize the local
input. It returns the mean and the unbiased variance too: the module updates its running
statistics with them outside the function, where kiln.compile sees the in-place updates (an
update hidden in an opaque call would also run while the capture evaluates it). Backward: the
per-channel sums of the output gradient and of gradient times normalized input are all-reduced,
so each rank's input gradient is the one of the whole batch's normalization (the weight's and
bias's gradients stay local; DistributedDataParallel averages them, as torch's SyncBatchNorm
leaves them). On equal per-rank batches this trains as one process on the concatenated batch.
"""

from __future__ import annotations

import kiln
from kiln import distributed as dist
from kiln.autograd.function import Function


def _channel_sum(t):
    return t.transpose(0, 1).reshape(t.shape[1], -1).sum(1)


def _per_channel(v, ndim):
    return v.reshape((1, -1) + (1,) * (ndim - 2))


class SyncBatchNormFunction(Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps, group):
        c = x.shape[1]
        local = kiln.cat([_channel_sum(x), _channel_sum(x * x),
                          kiln.tensor([x.numel() / c], dtype=x.dtype)])  # fmt: skip
        dist.all_reduce(local, group=group)
        count = local[2 * c].item()
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input "
                             f"size {list(x.shape)} over all ranks")  # fmt: skip
        mean = local[:c] / count
        var = (local[c : 2 * c] / count - mean * mean).clamp(min=0)
        invstd = (var + eps).rsqrt()
        xhat = (x - _per_channel(mean, x.dim())) * _per_channel(invstd, x.dim())
        y = xhat
        if weight is not None:
            y = y * _per_channel(weight, x.dim())
        if bias is not None:
            y = y + _per_channel(bias, x.dim())
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.count, ctx.group = count, group
        unbiased = var * (count / (count - 1))
        ctx.mark_non_differentiable(mean, unbiased)
        return y, mean, unbiased

    @staticmethod
    def backward(ctx, dy, _mean, _var):
        xhat, invstd, weight = ctx.saved_tensors
        c, nd = xhat.shape[1], xhat.dim()
        sum_dy, sum_dy_xhat = _channel_sum(dy), _channel_sum(dy * xhat)
        both = kiln.cat([sum_dy, sum_dy_xhat])
        dist.all_reduce(both, group=ctx.group)
        mean_dy, mean_dy_xhat = both[:c] / ctx.count, both[c:] / ctx.count
        scale = invstd if weight is None else invstd * weight
        dx = _per_channel(scale, nd) * (dy - _per_channel(mean_dy, nd)
                                        - xhat * _per_channel(mean_dy_xhat, nd))  # fmt: skip
        dweight = sum_dy_xhat if weight is not None and ctx.needs_input_grad[1] else None
        dbias = sum_dy if ctx.needs_input_grad[2] else None
        return dx, dweight, dbias, None, None

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
        c, nd = x.shape[1], x.dim()
        # Reduced-precision input computes in float32 (its sums overflow float16). Each rank sums
        # its deviations from an estimate m of its mean, d = sum(x - m) and q = sum((x - m)^2),
        # which stay small and exact enough; the ranks then add sum(x) = n m + d and
        # sum(x^2) = q + 2 m d + n m^2 in float64, so a mean far from zero does not cancel the
        # variance away.
        xf = x.float() if x.dtype in (kiln.float16, kiln.bfloat16) else x
        n = xf.numel() // c
        m = _channel_sum(xf) / max(n, 1)
        dev = xf - _per_channel(m, nd)
        d, q = _channel_sum(dev).double(), _channel_sum(dev * dev).double()
        m = m.double()
        count_here = kiln.tensor([float(n)], dtype=kiln.float64, device=x.device)
        stats = kiln.cat([n * m + d, q + 2 * m * d + n * m * m, count_here])
        dist.all_reduce(stats, group=group)
        count = stats[2 * c].item()
        if count <= 1:
            raise ValueError(f"Expected more than 1 value per channel when training, got input "
                             f"size {list(x.shape)} over all ranks")  # fmt: skip
        mean64 = stats[:c] / count
        var64 = (stats[c : 2 * c] / count - mean64 * mean64).clamp(min=0)
        mean, var = mean64.to(xf.dtype), var64.to(xf.dtype)
        invstd = (var + eps).rsqrt()
        xhat = (xf - _per_channel(mean, nd)) * _per_channel(invstd, nd)
        y = xhat
        if weight is not None:
            y = y * _per_channel(weight.to(xf.dtype), nd)
        if bias is not None:
            y = y + _per_channel(bias.to(xf.dtype), nd)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.count, ctx.group, ctx.dtype = count, group, x.dtype
        ctx.bias_dtype = None if bias is None else bias.dtype
        unbiased = (var64 * (count / (count - 1))).to(xf.dtype)
        mean = mean64.to(xf.dtype)
        ctx.mark_non_differentiable(mean, unbiased)
        return y.to(x.dtype), mean, unbiased

    @staticmethod
    def backward(ctx, dy, _mean, _var):
        xhat, invstd, weight = ctx.saved_tensors
        c, nd = xhat.shape[1], xhat.dim()
        dy = dy.to(xhat.dtype)
        sum_dy, sum_dy_xhat = _channel_sum(dy), _channel_sum(dy * xhat)
        both = kiln.cat([sum_dy, sum_dy_xhat])
        dist.all_reduce(both, group=ctx.group)
        mean_dy, mean_dy_xhat = both[:c] / ctx.count, both[c:] / ctx.count
        scale = invstd if weight is None else invstd * weight.to(invstd.dtype)
        dx = _per_channel(scale, nd) * (dy - _per_channel(mean_dy, nd)
                                        - xhat * _per_channel(mean_dy_xhat, nd))  # fmt: skip
        dx = dx.to(ctx.dtype)
        dweight = dbias = None
        if weight is not None and ctx.needs_input_grad[1]:
            dweight = sum_dy_xhat.to(weight.dtype)
        if ctx.bias_dtype is not None and ctx.needs_input_grad[2]:
            dbias = sum_dy.to(ctx.bias_dtype)
        return dx, dweight, dbias, None, None

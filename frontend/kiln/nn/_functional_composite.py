"""Functional ops that are compositions of other kiln ops, written as torch writes them
(ATen's CompositeImplicitAutograd kernels): autograd differentiates them through their parts
and kiln.compile captures the parts as graph ops, so nothing here needs a kernel of its own."""

from __future__ import annotations

import math
import warnings

import kiln
from kiln._schema import torch_schema, user_stacklevel

__all__ = [
    "channel_shuffle",
    "cosine_embedding_loss",
    "cosine_similarity",
    "gaussian_nll_loss",
    "hinge_embedding_loss",
    "margin_ranking_loss",
    "pairwise_distance",
    "pixel_shuffle",
    "pixel_unshuffle",
    "poisson_nll_loss",
    "soft_margin_loss",
    "triplet_margin_loss",
]


def _legacy_reduction(size_average, reduce, reduction):
    """The reduction string the deprecated size_average/reduce flags stand for. Defined in this
    module, which a capture inlines, so the losses that call it compile (a call recorded as an
    opaque op would break the graph on the string it returns)."""
    if size_average is None and reduce is None:
        return reduction
    warnings.warn(
        "size_average and reduce args will be deprecated, please use reduction= instead.",
        stacklevel=user_stacklevel(),
    )
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def _reduce(loss, reduction):
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


# --- Distances -----------------------------------------------------------------------------------


@torch_schema(
    "cosine_similarity(Tensor x1, Tensor x2, int dim=1, float eps=1e-08) -> Tensor"
)
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) over `dim`, broadcasting x1 and x2
    (each divided by its own norm first, as torch does, so the result stays in [-1, 1])."""
    if not x1.is_floating_point():
        x1, x2 = x1.float(), x2.float()
    shape = kiln.broadcast_shapes(x1.shape, x2.shape)
    x1, x2 = x1.expand(shape), x2.expand(shape)
    n1 = x1.norm(dim=dim, keepdim=True).clamp_min(eps)
    n2 = x2.norm(dim=dim, keepdim=True).clamp_min(eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


@torch_schema(
    "pairwise_distance(Tensor x1, Tensor x2, float p=2.0, float eps=1e-06, "
    "bool keepdim=False) -> Tensor"
)
def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """||x1 - x2 + eps||_p over the last dim."""
    return (x1 - x2 + eps).norm(p=p, dim=-1, keepdim=keepdim)


# --- Layout --------------------------------------------------------------------------------------


def pixel_shuffle(input, upscale_factor):  # noqa: A002
    """(*, C r^2, H, W) -> (*, C, H r, W r)."""
    r = int(upscale_factor)
    *batch, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(
            f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square "
            f"of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}"
        )
    n = len(batch)
    x = input.reshape(*batch, c // (r * r), r, r, h, w)
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(*batch, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor):  # noqa: A002
    """(*, C, H r, W r) -> (*, C r^2, H, W)."""
    r = int(downscale_factor)
    *batch, c, h, w = input.shape
    if h % r or w % r:
        raise RuntimeError(
            f"pixel_unshuffle expects height and width to be divisible by downscale_factor, but "
            f"got height={h} and width={w} for downscale_factor={r}"
        )
    n = len(batch)
    x = input.reshape(*batch, c, h // r, r, w // r, r)
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*batch, c * r * r, h // r, w // r)


def channel_shuffle(input, groups):  # noqa: A002
    """(N, C, *) with C = g k -> the channels interleaved group by group."""
    n, c, *rest = input.shape
    if c % groups:
        raise RuntimeError(
            f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups."
        )
    x = input.reshape(n, groups, c // groups, *rest).transpose(1, 2)
    return x.reshape(n, c, *rest)


# --- Losses --------------------------------------------------------------------------------------


@torch_schema(
    "margin_ranking_loss(Tensor input1, Tensor input2, Tensor target, float margin=0.0, "
    "Any size_average=None, Any reduce=None, str reduction='mean') -> Tensor"
)
def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                        reduction="mean"):  # fmt: skip
    """max(0, -target (input1 - input2) + margin)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return _reduce((-target * (input1 - input2) + margin).clamp_min(0), reduction)


@torch_schema(
    "hinge_embedding_loss(Tensor input, Tensor target, float margin=1.0, "
    "Any size_average=None, Any reduce=None, str reduction='mean') -> Tensor"
)
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,  # noqa: A002
                         reduction="mean"):  # fmt: skip
    """input where target is 1, max(0, margin - input) where it is -1."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    zeros = kiln.zeros_like(input)
    margin_part = kiln.where(target != 1, (margin - input).clamp_min(0), zeros)
    self_part = kiln.where(target != -1, input, zeros)
    return _reduce(margin_part + self_part, reduction)


@torch_schema(
    "soft_margin_loss(Tensor input, Tensor target, Any size_average=None, "
    "Any reduce=None, str reduction='mean') -> Tensor"
)
def soft_margin_loss(input, target, size_average=None, reduce=None,  # noqa: A002
                     reduction="mean"):  # fmt: skip
    """log(1 + exp(-target input))."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return _reduce((-target * input).exp().log1p(), reduction)


@torch_schema(
    "cosine_embedding_loss(Tensor input1, Tensor input2, Tensor target, "
    "float margin=0.0, Any size_average=None, Any reduce=None, "
    "str reduction='mean') -> Tensor"
)
def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None,
                          reduction="mean"):  # fmt: skip
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it is -1 (the
    squared magnitudes take 1e-12, as torch's)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    dot = (input1 * input2).sum(-1)
    mag1 = (input1 * input1).sum(-1) + 1e-12
    mag2 = (input2 * input2).sum(-1) + 1e-12
    cos = dot / (mag1 * mag2).sqrt()
    zeros = kiln.zeros_like(cos)
    pos = kiln.where(target == 1, 1 - cos, zeros)
    neg = kiln.where(target == -1, (cos - margin).clamp_min(0), zeros)
    return _reduce(pos + neg, reduction)


@torch_schema(
    "triplet_margin_loss(Tensor anchor, Tensor positive, Tensor negative, "
    "float margin=1.0, float p=2.0, float eps=1e-06, bool swap=False, "
    "Any size_average=None, Any reduce=None, str reduction='mean') -> Tensor"
)
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False,
                        size_average=None, reduce=None, reduction="mean"):  # fmt: skip
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), d the pairwise distance
    (with `swap`, the smaller of d(anchor, negative) and d(positive, negative))."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = kiln.minimum(d_neg, pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + d_pos - d_neg).clamp_min(0), reduction)


@torch_schema(
    "gaussian_nll_loss(Tensor input, Tensor target, Any var, bool full=False, "
    "float eps=1e-06, str reduction='mean') -> Tensor"
)
def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):  # noqa: A002
    """0.5 (log(var) + (input - target)^2 / var) (+ 0.5 log(2 pi) when `full`); var is clamped
    to eps without a gradient through the clamp, as torch's."""
    if var.shape != input.shape:
        if input.shape[:-1] == var.shape:
            var = var.unsqueeze(-1)
        elif not (input.shape[:-1] == var.shape[:-1] and var.shape[-1] == 1):
            raise ValueError("var is of incorrect size")
    if (var < 0).any().item():
        raise ValueError("var has negative entry/entries")
    var = var.clone()
    with kiln.no_grad():
        var.clamp_(min=eps)
    loss = 0.5 * (var.log() + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


@torch_schema(
    "poisson_nll_loss(Tensor input, Tensor target, bool log_input=True, "
    "bool full=False, Any size_average=None, float eps=1e-08, Any reduce=None, "
    "str reduction='mean') -> Tensor"
)
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None,  # noqa: A002
                     eps=1e-8, reduce=None, reduction="mean"):  # fmt: skip
    """exp(input) - target input (log_input), else input - target log(input + eps); `full` adds
    Stirling's term for targets above 1."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        stirling = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + stirling.masked_fill(target <= 1, 0)
    return _reduce(loss, reduction)

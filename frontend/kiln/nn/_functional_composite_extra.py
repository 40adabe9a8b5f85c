"""More functional ops written as compositions of kiln ops: local response norm, power-average
pooling, the multi-class margin losses, the triplet loss with a custom distance, Gumbel-softmax
sampling and bags of embeddings; affine_grid and grid_sample (from _functional_composite_grid)
are exported from here too.

Like _functional_composite, autograd differentiates them through their parts and kiln.compile
captures the parts as graph ops (this module's name keeps the capture inlining it). Checks that
torch makes on tensor data (target ranges, bag offsets) are made by ops that raise on bad
indices, caught and re-raised with torch's words, so a capture records them without a graph
break."""

from __future__ import annotations

import math
import warnings

import kiln
from kiln._schema import torch_schema, user_stacklevel
from kiln.nn._functional_activation import logsigmoid, relu
from kiln.nn._functional_composite import _legacy_reduction, _reduce, pairwise_distance
from kiln.nn._functional_composite_grid import (
    _check_scalar_type,
    _type_name,
    affine_grid,
    grid_sample,
)
from kiln.nn._functional_conv import avg_pool2d, max_pool2d
from kiln.nn._functional_shape import _embedding_renorm_, embedding, pad

__all__ = [
    "affine_grid",
    "embedding_bag",
    "grid_sample",
    "gumbel_softmax",
    "local_response_norm",
    "lp_pool1d",
    "lp_pool2d",
    "lp_pool3d",
    "multi_margin_loss",
    "multilabel_margin_loss",
    "multilabel_soft_margin_loss",
    "triplet_margin_with_distance_loss",
]


def _check_reduction(reduction) -> None:
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _tuple(value, n: int) -> tuple:
    if isinstance(value, (list, tuple)):
        return tuple(value) if len(value) == n else tuple(value) * n
    return (value,) * n


# --- Normalization and pooling -------------------------------------------------------------------


@torch_schema(
    "local_response_norm(Tensor input, int size, float alpha=0.0001, float beta=0.75, "
    "float k=1.0) -> Tensor"
)
def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):  # noqa: A002
    """input / (k + alpha * mean of input^2 over `size` neighbouring channels)^beta.

    torch pools 4-D and larger inputs with avg_pool3d over (size, 1, 1); flattening the trailing
    dims into one makes that the same average as an avg_pool2d over (size, 1), which kiln.compile
    lowers."""
    dim = input.dim()
    if dim < 3:
        raise ValueError(
            f"Expected 3D or higher dimensionality                          input (got {dim} "
            "dimensions)"
        )
    if input.numel() == 0:
        return input
    n, c = input.shape[0], input.shape[1]
    div = input.mul(input).reshape(n, 1, c, -1)
    div = pad(div, (0, 0, size // 2, (size - 1) // 2))
    div = avg_pool2d(div, (size, 1), stride=1).reshape(input.shape)
    return input / div.mul(alpha).add(k).pow(beta)


def _lp_root(out, norm_type, window: int):
    # sign(out) * relu(|out|), as torch writes it: the gradient is 0 where the window sums to 0.
    return (kiln.sign(out) * relu(out.abs())).mul(window).pow(1.0 / norm_type)


def _is_inf(norm_type, sign: float) -> bool:
    return isinstance(norm_type, (int, float)) and norm_type == sign * math.inf


def _pooled_size(size: int, k: int, s: int, ceil_mode: bool) -> int:
    out = (size - k + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size:
        out -= 1
    return out


def _pool3d_separable(pool, x, kernel, stride, **options):
    """A 3-d window max or mean as a (kd, 1) pool over (D, H*W) and then a (kh, kw) pool over
    (H, W): both reductions factor over the axes, and the 2-d pools compile where
    avg_pool3d/max_pool3d do not."""
    (kd, kh, kw), (sd, sh, sw) = kernel, stride
    *lead, d, h, w = x.shape
    y = pool(x.reshape(-1, 1, d, h * w), (kd, 1), (sd, 1), 0, **options)
    d_out = y.shape[2]
    y = pool(y.reshape(-1, d_out, h, w), (kh, kw), (sh, sw), 0, **options)
    return y.reshape(*lead, d_out, y.shape[-2], y.shape[-1])


def _window_mean(x, kernel: tuple, stride: tuple, ceil_mode: bool):
    """avg_pool over the last len(kernel) dims with no padding: torch's avg_poolNd(x, kernel,
    stride, 0, ceil_mode). ceil_mode's partial windows are padded to full ones with zeros and
    their means rescaled to the elements they hold (torch's divisor); kiln's avg_pool has no
    ceil_mode derivative, and the 2-d pool is the one kiln.compile lowers."""
    nd = len(kernel)
    sizes = [int(n) for n in x.shape[x.dim() - nd :]]
    outs = [_pooled_size(n, k, s, ceil_mode) for n, k, s in zip(sizes, kernel, stride, strict=True)]
    extra = [
        max(0, (o - 1) * s + k - n) for o, k, s, n in zip(outs, kernel, stride, sizes, strict=True)
    ]
    if any(extra):
        x = pad(x, [v for e in reversed(extra) for v in (0, e)])
    if nd == 1:
        out = avg_pool2d(x.unsqueeze(-2), (1, kernel[0]), (1, stride[0])).squeeze(-2)
    elif nd == 2:
        out = avg_pool2d(x, kernel, stride)
    else:
        out = _pool3d_separable(avg_pool2d, x, kernel, stride)
    for d in range(nd):
        if extra[d]:
            start = kiln.arange(outs[d], dtype=out.dtype, device=out.device) * stride[d]
            count = (start + kernel[d]).clamp_max(sizes[d]) - start
            out = out * (kernel[d] / count).reshape([-1] + [1] * (nd - 1 - d))
    return out


def _window_max(x, kernel: tuple, stride: tuple, ceil_mode: bool):
    if len(kernel) == 1:
        pooled = max_pool2d(x.unsqueeze(-2), (1, kernel[0]), (1, stride[0]), 0, 1, ceil_mode)
        return pooled.squeeze(-2)
    if len(kernel) == 2:
        return max_pool2d(x, kernel, stride, 0, 1, ceil_mode)
    return _pool3d_separable(max_pool2d, x, kernel, stride, ceil_mode=ceil_mode)


def _lp_pool(input, norm_type, kernel: tuple, stride: tuple, ceil_mode: bool):  # noqa: A002
    if _is_inf(norm_type, 1):
        return _window_max(input.abs(), kernel, stride, ceil_mode)
    if _is_inf(norm_type, -1):
        return -_window_max(-input.abs(), kernel, stride, ceil_mode)
    out = _window_mean(input.pow(norm_type), kernel, stride, ceil_mode)
    return _lp_root(out, norm_type, math.prod(kernel))


@torch_schema(
    "lp_pool1d(Tensor input, float norm_type, Any kernel_size, Any stride=None, "
    "bool ceil_mode=False) -> Tensor"
)
def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):  # noqa: A002
    """(sum over each window of x^p)^(1/p) on (N, C, L) or (C, L) input; p = inf is the max of
    |x| (and -inf the min)."""
    if input.dim() not in (2, 3):
        raise RuntimeError(
            f"Expected 2 to 3 dimensions, but got {input.dim()}-dimensional tensor for argument "
            "#1 'self' (while checking arguments for avg_pool1d)"
        )
    kernel = _tuple(kernel_size, 1)
    strides = kernel if stride is None else _tuple(stride, 1)
    return _lp_pool(input, norm_type, kernel, strides, ceil_mode)


@torch_schema(
    "lp_pool2d(Tensor input, float norm_type, Any kernel_size, Any stride=None, "
    "bool ceil_mode=False) -> Tensor"
)
def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):  # noqa: A002
    """(sum over each window of x^p)^(1/p) on (N, C, H, W) or (C, H, W) input."""
    if input.dim() < 3:  # torch's kernel-size product indexes dim -3
        d = input.dim()
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-d}, {d - 1}], but got -3)"
        )
    if input.dim() > 4:
        raise RuntimeError(
            "Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, "
            f"but got:{list(input.shape)}"
        )
    kernel = _tuple(kernel_size, 2)
    strides = kernel if stride is None else _tuple(stride, 2)
    return _lp_pool(input, norm_type, kernel, strides, ceil_mode)


@torch_schema(
    "lp_pool3d(Tensor input, float norm_type, Any kernel_size, Any stride=None, "
    "bool ceil_mode=False) -> Tensor"
)
def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):  # noqa: A002
    """(sum over each window of x^p)^(1/p) on (N, C, D, H, W) or (C, D, H, W) input."""
    if input.dim() not in (4, 5):
        raise RuntimeError("non-empty 4D or 5D (batch mode) tensor expected for input")
    kernel = _tuple(kernel_size, 3)
    strides = kernel if stride is None else _tuple(stride, 3)
    return _lp_pool(input, norm_type, kernel, strides, ceil_mode)


# --- Losses --------------------------------------------------------------------------------------


def _check_margin_input(input) -> None:  # noqa: A002
    ndim = input.dim()
    if not ((ndim == 2 and input.shape[1] != 0) or (ndim == 1 and input.shape[0] != 0)
            or ndim == 0):  # fmt: skip
        raise RuntimeError(
            "Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
            f"{list(input.shape)}"
        )


@torch_schema(
    "multi_margin_loss(Tensor input, Tensor target, int p=1, float margin=1.0, "
    "Tensor? weight=None, Any size_average=None, Any reduce=None, "
    "str reduction='mean') -> Tensor"
)
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,  # noqa: A002
                      reduce=None, reduction="mean"):  # fmt: skip
    """sum over classes j != y of max(0, margin - x[y] + x[j])^p / C, times weight[y]."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if p != 1 and p != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.dim() != 1:
        raise ValueError("weight must be one-dimensional")
    _check_margin_input(input)
    nframe = input.shape[0] if input.dim() == 2 else 1
    classes = input.shape[-1] if input.dim() else 1
    if target.dim() > 1 or target.numel() != nframe:
        raise RuntimeError(
            "multi_margin_loss: target tensor should be 1-D with size equal to the number of "
            f"input samples (batch size). Expected target size [{nframe}], but got "
            f"{list(target.shape)}. Input has shape {list(input.shape)}."
        )
    if weight is not None and weight.numel() != classes:
        raise RuntimeError(
            f"inconsistent weight size, expected {classes} but got {list(weight.shape)}"
        )
    if not input.is_floating_point():
        raise NotImplementedError(
            f"\"multi_margin_loss_cpu_kernel\" not implemented for '{_type_name(input.dtype)}'"
        )
    _check_scalar_type(target, kiln.int64)
    if weight is not None:
        _check_scalar_type(weight, input.dtype)
    x = input.reshape(nframe, classes)
    t = target.reshape(nframe, 1)
    try:
        x_target = x.gather(1, t)
    except (IndexError, RuntimeError):
        raise RuntimeError("target out of range") from None
    z = relu(margin - x_target + x)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * weight.gather(0, t.reshape(-1)).unsqueeze(1)
    is_target = kiln.arange(classes, device=input.device) == t
    loss = kiln.where(is_target, kiln.zeros_like(z), z).sum(1) / classes
    if reduction == "none":
        return loss if target.dim() > 0 else loss.reshape(())
    return _reduce(loss, reduction)


@torch_schema(
    "multilabel_margin_loss(Tensor input, Tensor target, Any size_average=None, "
    "Any reduce=None, str reduction='mean') -> Tensor"
)
def multilabel_margin_loss(input, target, size_average=None, reduce=None,  # noqa: A002
                           reduction="mean"):  # fmt: skip
    """sum over target classes j and non-target classes i of max(0, 1 - (x[j] - x[i])) / C; the
    target classes are the leading entries of `target` up to its first -1."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    _check_margin_input(input)
    if input.dim() <= 1:
        nframe, classes = 1, (input.shape[0] if input.dim() else 1)
        fits = target.dim() <= 1 and target.numel() == classes
    else:
        nframe, classes = input.shape
        fits = target.dim() == 2 and tuple(target.shape) == (nframe, classes)
    if not fits:
        raise RuntimeError(
            f"inconsistent target size: {list(target.shape)} for input of size: {list(input.shape)}"
        )
    _check_scalar_type(target, kiln.int64)
    x = input.reshape(nframe, classes)
    y = target.reshape(nframe, classes)
    is_pad = y == -1
    listed = is_pad.long().cumsum(1) == 0  # the entries before the first -1
    try:
        y = kiln.where(is_pad, kiln.zeros_like(y), y)
        x_target = x.gather(1, y)  # (N, J)
    except (IndexError, RuntimeError):
        raise RuntimeError("argument #2 'target' is out of range") from None
    hits = (y.unsqueeze(2) == kiln.arange(classes, device=input.device)) & listed.unsqueeze(2)
    is_target = hits.sum(1) > 0  # (N, C)
    margins = relu(1 - x_target.unsqueeze(2) + x.unsqueeze(1))  # (N, J, C)
    counted = listed.unsqueeze(2) & ~is_target.unsqueeze(1)
    loss = kiln.where(counted, margins, kiln.zeros_like(margins)).sum((1, 2)) / classes
    if reduction == "none":
        return loss if target.dim() > 1 else loss.reshape(())
    return _reduce(loss, reduction)


@torch_schema(
    "multilabel_soft_margin_loss(Tensor input, Tensor target, Tensor? weight=None, "
    "Any size_average=None, Any reduce=None, str reduction='mean') -> Tensor"
)
def multilabel_soft_margin_loss(input, target, weight=None, size_average=None,  # noqa: A002
                                reduce=None, reduction="mean"):  # fmt: skip
    """Per-class binary cross-entropy of sigmoid(input), averaged over the classes."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.dim() - 1
    loss = loss.sum(dim=class_dim) / input.size(class_dim)
    if reduction == "none":
        return loss
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    raise ValueError(reduction + " is not valid")


def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None,
                                      margin=1.0, swap=False, reduction="mean"):  # fmt: skip
    """max(0, margin + d(anchor, positive) - d(anchor, negative)) for a distance d (the pairwise
    distance by default); `swap` uses min(d(anchor, negative), d(positive, negative))."""
    _check_reduction(reduction)
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    a_dim, p_dim, n_dim = anchor.ndim, positive.ndim, negative.ndim
    if not (a_dim == p_dim and p_dim == n_dim):
        raise RuntimeError(
            "The anchor, positive, and negative tensors are expected to have the same number "
            f"of dimensions, but got: anchor {a_dim}D, positive {p_dim}D, and negative "
            f"{n_dim}D inputs"
        )
    distance = pairwise_distance if distance_function is None else distance_function
    dist_pos = distance(anchor, positive)
    dist_neg = distance(anchor, negative)
    if swap:
        dist_neg = kiln.minimum(dist_neg, distance(positive, negative))
    return _reduce((margin + dist_pos - dist_neg).clamp_min(0), reduction)


# --- Sampling ------------------------------------------------------------------------------------


def gumbel_softmax(logits, tau=1, hard=False, eps=1e-10, dim=-1):
    """softmax((logits + g) / tau) with g ~ Gumbel(0, 1); `hard` returns the one-hot argmax
    with the soft sample's gradient (straight-through).

    g = -log(E) with E = -log(U) ~ Exponential(1), U ~ U[0, 1): torch draws E with exponential_,
    the same distribution; U = 0 gives g = -inf (that class is never drawn) rather than a NaN."""
    if eps != 1e-10:
        warnings.warn("`eps` parameter is deprecated and has no effect.",
                      stacklevel=user_stacklevel())  # fmt: skip
    gumbels = -(-kiln.rand_like(logits).log()).log()
    y_soft = ((logits + gumbels) / tau).softmax(dim)
    if not hard:
        return y_soft
    # y_hard - y_soft.detach() + y_soft, with the detached copy recomputed under no_grad (the
    # same values): kiln.compile captures no_grad blocks but has no lowering for detach.
    with kiln.no_grad():
        y_const = ((logits + gumbels) / tau).softmax(dim)
        index = y_const.max(dim, keepdim=True)[1]
        ones = kiln.ones_like(index, dtype=logits.dtype)
        y_hard = kiln.zeros_like(logits).scatter(dim, index, ones)
    return y_hard - y_const + y_soft


# --- Bags of embeddings --------------------------------------------------------------------------


def _check_bag_args(input, weight, offsets, per_sample_weights, mode, scale_grad_by_freq,  # noqa: A002
                    sparse, padding_idx):  # fmt: skip
    """torch's argument errors for embedding_bag, in torch's order; returns padding_idx made
    non-negative."""
    if per_sample_weights is not None and input.shape != per_sample_weights.shape:
        raise ValueError(
            f"embedding_bag: If per_sample_weights ({per_sample_weights.shape}) is not None, "
            f"then it must have the same shape as the input ({input.shape})"
        )
    if weight.dim() != 2:
        raise ValueError(
            f"weight has to be a 2D Tensor, but got Tensor of dimension {weight.dim()}"
        )
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError(
                "if input is 2D, then offsets has to be None, as input is treated is a "
                "mini-batch of fixed length sequences. However, found offsets of type "
                f"{type(offsets)}"
            )
    elif input.dim() == 1:
        if offsets is None:
            raise ValueError("offsets has to be a 1D Tensor but got None")
        if offsets.dim() != 1:
            raise ValueError("offsets has to be a 1D Tensor")
    else:
        raise ValueError(
            f"input has to be 1D or 2D Tensor, but got Tensor of dimension {input.dim()}"
        )
    if mode == "max":
        if scale_grad_by_freq:
            raise ValueError("max mode does not support scaling the gradient by the frequency")
        if sparse:
            raise ValueError("max mode does not support sparse weights")
    elif mode not in ("sum", "mean"):
        raise ValueError("mode has to be one of sum, mean or max")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(
            "embedding_bag: per_sample_weights was not None. per_sample_weights is only "
            f"supported for mode='sum' (got mode='{mode}'). Please open a feature request on "
            "GitHub."
        )
    for name, t in (("indices", input), ("offsets", offsets)):
        if t is not None and t.dtype not in (kiln.int64, kiln.int32):
            raise RuntimeError(
                f"Expected tensor for argument #1 '{name}' to have one of the following scalar "
                f"types: Long, Int; but got {t.type()} instead (while checking arguments for "
                "embedding_bag)"
            )
    if per_sample_weights is not None and per_sample_weights.dtype != weight.dtype:
        raise RuntimeError(
            "Expected tensor for argument #1 'weight' to have the same type as tensor for "
            f"argument #1 'per_sample_weights'; but type {weight.type()} does not equal "
            f"{per_sample_weights.type()} (while checking arguments for embedding_bag)"
        )
    rows = weight.shape[0]
    if padding_idx is None:
        return None
    if not -rows <= padding_idx < rows:
        raise RuntimeError(
            f"padding_idx must be within the number of embeddings, -{rows} through {rows - 1}, "
            f"but got {padding_idx}"
        )
    return padding_idx + rows if padding_idx < 0 else padding_idx


def _lookup(input, weight):  # noqa: A002
    try:
        return embedding(input, weight)
    except (IndexError, RuntimeError):
        flat, rows = input.reshape(-1), weight.shape[0]
        bad = ((flat < 0) | (flat >= rows)).nonzero()
        if bad.shape[0] == 0:
            raise
        i = bad[0, 0].item()
        raise RuntimeError(
            f"Index {i} of input takes value {flat[i].item()} which is not in the valid "
            f"range [0, {rows})"
        ) from None


def _scale_grad_by_freq(emb, input, rows: int):  # noqa: A002
    """emb unchanged, with the gradient of each looked-up row divided by how often its index
    occurs in `input` (torch's scale_grad_by_freq)."""
    flat = input.reshape(-1).long()
    ones = kiln.ones_like(flat, dtype=emb.dtype)
    counts = kiln.zeros(rows, dtype=emb.dtype, device=emb.device).index_add(0, flat, ones)
    scale = (1 / counts.index_select(0, flat)).reshape(input.shape).unsqueeze(-1)
    with kiln.no_grad():  # emb.detach(), in a form kiln.compile lowers
        frozen = emb.clone()
    return frozen + (emb - frozen) * scale


def _bag_ids(input, offsets, include_last_offset):  # noqa: A002
    """The bag of each index of 1-d `input` and whether it is in one (with include_last_offset,
    indices past the last offset are in none); torch's offset errors are raised by index ops that
    fail exactly when the offsets are bad."""
    n = input.shape[0]
    try:
        kiln.zeros(1, device=input.device).index_select(0, offsets[:1])  # offsets[0] == 0
        kiln.zeros(n + 1, device=input.device).index_select(0, offsets[-1:])  # <= len(input)
    except (IndexError, RuntimeError):
        first, last = offsets[0].item(), offsets[-1].item()
        if first != 0:
            raise RuntimeError(
                "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to "
                f"start from position 0. However, got {first}\n[ {offsets.type()}{{}} ]"
            ) from None
        raise RuntimeError(
            f"offsets[-1] can not be greater than input's length {n} but got offsets[-1] of {last}"
        ) from None
    starts = offsets[:-1] if include_last_offset else offsets
    position = kiln.arange(n, device=input.device)
    bag = kiln.searchsorted(starts.long(), position, right=True) - 1
    if include_last_offset:
        return bag.clamp_min(0), position < offsets[-1]
    return bag, None


def _bag_max(emb, bag, keep, bags: int):
    """Per-bag, per-column max of emb's rows (0 for an empty bag); the gradient goes to the
    first row holding each max, as torch's max_indices. scatter_reduce has no compiled lowering,
    so this mode runs eagerly under kiln.compile."""
    n, d = emb.shape
    neg_inf = kiln.full((), -math.inf, dtype=emb.dtype, device=emb.device)
    vals = kiln.where(keep.unsqueeze(1), emb, neg_inf)
    index = bag.unsqueeze(1).expand(n, d)
    with kiln.no_grad():
        best = kiln.full((bags, d), -math.inf, dtype=emb.dtype, device=emb.device)
        best = best.scatter_reduce(0, index, vals, "amax")
        row = kiln.arange(n, device=emb.device).unsqueeze(1).expand(n, d)
        is_best = (vals == best.index_select(0, bag)) & keep.unsqueeze(1)
        row = kiln.where(is_best, row, kiln.full_like(row, n))
        first = kiln.full((bags, d), n, dtype=row.dtype, device=emb.device)
        first = first.scatter_reduce(0, index, row, "amin")
    found = first < n
    out = emb.gather(0, first.clamp_max(n - 1))
    return kiln.where(found, out, kiln.zeros_like(out))


@torch_schema(
    "embedding_bag(Tensor input, Tensor weight, Tensor? offsets=None, float? max_norm=None, "
    "float norm_type=2, bool scale_grad_by_freq=False, str mode='mean', bool sparse=False, "
    "Tensor? per_sample_weights=None, bool include_last_offset=False, "
    "int? padding_idx=None) -> Tensor"
)
def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,  # noqa: A002
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):  # fmt: skip
    """Sums, means or maxes of bags of rows of `weight`: the rows of 2-d `input` (B, N), or the
    runs of 1-d `input` that `offsets` starts. Entries equal to padding_idx are left out of
    their bag (and of the mean's count); an empty bag gives zeros. `sparse` gradients are dense
    in kiln."""
    if weight.dtype == kiln.int64 and input.is_floating_point():
        warnings.warn(
            "Argument order of nn.functional.embedding_bag was changed. Usage "
            "`embedding_bag(weight, input, ...)` is deprecated, and should now be "
            "`embedding_bag(input, weight, ...)`.",
            stacklevel=user_stacklevel(),
        )
        weight, input = input, weight  # noqa: A001
    padding_idx = _check_bag_args(input, weight, offsets, per_sample_weights, mode,
                                  scale_grad_by_freq, sparse, padding_idx)  # fmt: skip
    input = input.long()  # noqa: A001
    if offsets is not None:
        offsets = offsets.long()
    if max_norm is not None:
        _embedding_renorm_(weight, input, float(max_norm), float(norm_type))
    emb = _lookup(input, weight)
    if scale_grad_by_freq:
        emb = _scale_grad_by_freq(emb, input, weight.shape[0])
    if per_sample_weights is not None:
        emb = emb * per_sample_weights.unsqueeze(-1)
    keep = None if padding_idx is None else input != padding_idx
    if input.dim() == 2:
        return _bag_fixed(emb, keep, mode)
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    if bags <= 0 or input.shape[0] == 0:
        return kiln.zeros((max(bags, 0), weight.shape[1]), dtype=weight.dtype,
                          device=weight.device)  # fmt: skip
    bag, in_bag = _bag_ids(input, offsets, include_last_offset)
    if in_bag is not None:
        keep = in_bag if keep is None else keep & in_bag
    if keep is None:
        keep = kiln.ones_like(bag, dtype=kiln.bool)
    if mode == "max":
        return _bag_max(emb, bag, keep, bags)
    emb = kiln.where(keep.unsqueeze(1), emb, kiln.zeros_like(emb))
    zeros = kiln.zeros((bags, emb.shape[1]), dtype=emb.dtype, device=emb.device)
    out = zeros.index_add(0, bag, emb)
    if mode == "sum":
        return out
    count = kiln.zeros(bags, dtype=emb.dtype, device=emb.device)
    count = count.index_add(0, bag, keep.to(emb.dtype))
    return out / count.clamp_min(1).unsqueeze(1)


def _bag_fixed(emb, keep, mode):
    """Bags of equal length: reductions over dim 1 of (B, N, D). The max is amax: kiln's
    max(dim) values carry no gradient."""
    if keep is None:
        if emb.shape[1] == 0:
            return emb.sum(1)
        if mode == "max":
            return emb.amax(1)
        return emb.sum(1) if mode == "sum" else emb.mean(1)
    mask = keep.unsqueeze(2)
    if mode == "max":
        neg_inf = kiln.full((), -math.inf, dtype=emb.dtype, device=emb.device)
        out = kiln.where(mask, emb, neg_inf).amax(1)
        return kiln.where(keep.sum(1, keepdim=True) > 0, out, kiln.zeros_like(out))
    out = kiln.where(mask, emb, kiln.zeros_like(emb)).sum(1)
    if mode == "sum":
        return out
    return out / keep.sum(1, keepdim=True).clamp_min(1).to(emb.dtype)

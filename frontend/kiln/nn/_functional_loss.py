"""Loss functions of kiln.nn.functional (torch's names, signatures and checks).

Each loss is one fused C++ kernel (kiln._C._*_loss); this module maps torch's reduction strings
(and the legacy size_average/reduce flags) to the kernels' integer codes.
"""

import warnings

from kiln import _C
from kiln._schema import torch_schema, user_stacklevel
from kiln.nn._functional_composite import _legacy_reduction

__all__ = [
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cross_entropy",
    "huber_loss",
    "kl_div",
    "l1_loss",
    "mse_loss",
    "nll_loss",
    "smooth_l1_loss",
]

_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def _reduction_enum(reduction):
    """torch.nn._reduction.get_enum: 'none' -> 0, 'mean' -> 1, 'sum' -> 2."""
    try:
        return _REDUCTIONS[reduction]
    except (KeyError, TypeError):
        raise ValueError(f"{reduction} is not a valid value for reduction") from None


def _warn_size_mismatch(input, target):
    if tuple(target.shape) != tuple(input.shape):
        warnings.warn(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}). This will likely lead to incorrect results due to broadcasting. "
            "Please ensure they have the same size.",
            stacklevel=user_stacklevel(),
        )


# Bound from their ops.def rows (legacy size_average/reduce flags and warnings included).
nll_loss = _C._nn.nll_loss
cross_entropy = _C._nn.cross_entropy
mse_loss = _C._nn.mse_loss
l1_loss = _C._nn.l1_loss


@torch_schema(
    "smooth_l1_loss(Tensor input, Tensor target, Any size_average=None, "
    "Any reduce=None, str reduction='mean', float beta=1.0) -> Tensor"
)
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """Quadratic below ``beta``, linear above."""
    _warn_size_mismatch(input, target)
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return _C._smooth_l1_loss(input, target, _reduction_enum(reduction), beta)


@torch_schema(
    "huber_loss(Tensor input, Tensor target, str reduction='mean', float delta=1.0, "
    "Tensor? weight=None) -> Tensor"
)
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """Quadratic below ``delta``, linear (slope ``delta``) above."""
    _warn_size_mismatch(input, target)
    return _C._huber_loss(input, target, _reduction_enum(reduction), delta, weight)


@torch_schema(
    "binary_cross_entropy(Tensor input, Tensor target, Tensor? weight=None, "
    "Any size_average=None, Any reduce=None, str reduction='mean') -> Tensor"
)
def binary_cross_entropy(
    input, target, weight=None, size_average=None, reduce=None, reduction="mean"
):
    """Binary cross entropy of probabilities ``input`` in [0, 1]."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return _C._binary_cross_entropy(input, target, weight, _reduction_enum(reduction))


@torch_schema(
    "binary_cross_entropy_with_logits(Tensor input, Tensor target, Tensor? weight=None, "
    "Any size_average=None, Any reduce=None, str reduction='mean', "
    "Tensor? pos_weight=None) -> Tensor"
)
def binary_cross_entropy_with_logits(
    input,
    target,
    weight=None,
    size_average=None,
    reduce=None,
    reduction="mean",
    pos_weight=None,
):
    """Binary cross entropy of logits, computed stably (no sigmoid round trip)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return _C.binary_cross_entropy_with_logits(
        input, target, weight, pos_weight, _reduction_enum(reduction)
    )


@torch_schema(
    "kl_div(Tensor input, Tensor target, Any size_average=None, Any reduce=None, "
    "str reduction='mean', bool log_target=False) -> Tensor"
)
def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """KL divergence of log-probabilities ``input`` from ``target``; 'batchmean' divides the sum
    by the batch size."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if reduction == "mean":
        warnings.warn(
            "reduction: 'mean' divides the total loss by both the batch size and the support "
            "size.'batchmean' divides only by the batch size, and aligns with the KL div math "
            "definition.'mean' will be changed to behave the same as 'batchmean' in the next "
            "major release.",
            stacklevel=user_stacklevel(),
        )
    if reduction == "batchmean":
        total = _C.kl_div(input, target, 2, log_target=log_target)
        return total / input.shape[0] if input.dim() != 0 else total
    return _C.kl_div(input, target, _reduction_enum(reduction), log_target=log_target)

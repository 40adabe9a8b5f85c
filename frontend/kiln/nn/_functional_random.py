"""Functional dropout (kiln.nn.functional): dropout, dropout1d/2d/3d and the alpha variants.

torch's F forms: p is validated with ValueError, eval mode (training=False) returns the input
object itself, and the channel-wise forms accept inputs with or without a batch dimension.
"""

from __future__ import annotations

import warnings

import kiln
from kiln._schema import torch_schema

__all__ = [
    "alpha_dropout",
    "dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "feature_alpha_dropout",
]


def _check_p(p) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


@torch_schema(
    "dropout(Tensor input, float p=0.5, bool training=True, bool inplace=False) -> Tensor"
)
def dropout(input, p=0.5, training=True, inplace=False):
    """Zeroes each element with probability p and scales the rest by 1/(1-p) (training only)."""
    _check_p(p)
    return kiln.dropout(input, p, training, inplace)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Alpha dropout for SELU networks (keeps zero mean and unit variance)."""
    _check_p(p)
    return kiln.alpha_dropout(input, p, training, inplace)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Channel-wise alpha dropout of (N, C, ...) input."""
    _check_p(p)
    return kiln.feature_alpha_dropout(input, p, training, inplace)


def _channel_dropout(input, p, training, inplace, batched):
    """Feature dropout over (N, C, ...); unbatched (C, ...) input gets a leading batch dim."""
    if not training or p == 0:
        return input
    x = input if batched else input.unsqueeze(0)
    result = kiln.feature_dropout(x, p, training, inplace)
    if inplace:
        return input
    return result if batched else result.squeeze(0)


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, L) or (C, L) input."""
    _check_p(p)
    dim = input.dim()
    if dim not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {dim}D input. Note that "
            "dropout1d exists to provide channel-wise dropout on inputs with 1 spatial "
            "dimension, a channel dimension, and an optional batch dimension (i.e. 2D or 3D "
            "inputs)."
        )
    return _channel_dropout(input, p, training, inplace, batched=dim == 3)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, H, W) input.

    As in torch, 3-D input is read as (N, C, L) (with a warning), not as unbatched (C, H, W).
    """
    _check_p(p)
    dim = input.dim()
    if dim not in (3, 4):
        warnings.warn(
            f"dropout2d: Received a {dim}-D input to dropout2d, which is deprecated and will "
            "result in an error in a future release. To retain the behavior and silence this "
            "warning, please use dropout instead.",
            stacklevel=2,
        )
    if dim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D "
            "dropout behavior is desired - input is interpreted as shape (N, C, L), where C is "
            "the channel dim. To maintain the 1D channel-wise dropout behavior, please switch "
            "to using dropout1d instead.",
            stacklevel=2,
        )
    return _channel_dropout(input, p, training, inplace, batched=True)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of (N, C, D, H, W) or (C, D, H, W) input."""
    _check_p(p)
    dim = input.dim()
    if dim not in (4, 5):
        warnings.warn(
            f"dropout3d: Received a {dim}-D input to dropout3d, which is deprecated and will "
            "result in an error in a future release. To retain the behavior and silence this "
            "warning, please use dropout instead.",
            stacklevel=2,
        )
    return _channel_dropout(input, p, training, inplace, batched=dim == 5)

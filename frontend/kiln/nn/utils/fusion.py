"""Folding an eval-mode BatchNorm into the preceding convolution or linear layer
(torch.nn.utils.fusion).

In eval mode BatchNorm is the affine map ``y = (x - mean) / sqrt(var + eps) * w + b`` per
channel, so it can be absorbed into the layer's weight (scaled per output channel) and bias.
The fused module is a deep copy; the inputs are left untouched.
"""

from __future__ import annotations

import copy

import kiln
from kiln.nn.parameter import Parameter

__all__ = [
    "fuse_conv_bn_eval",
    "fuse_conv_bn_weights",
    "fuse_linear_bn_eval",
    "fuse_linear_bn_weights",
]


def fuse_conv_bn_eval(conv, bn, transpose: bool = False):
    """A new convolution computing ``bn(conv(x))`` of the eval-mode pair; ``transpose`` says
    the weight holds output channels in dim 1 (transposed convolutions)."""
    if conv.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused_conv = copy.deepcopy(conv)
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused_conv.weight, fused_conv.bias = fuse_conv_bn_weights(
        fused_conv.weight,
        fused_conv.bias,
        bn.running_mean,
        bn.running_var,
        bn.eps,
        bn.weight,
        bn.bias,
        transpose,
    )
    return fused_conv


def fuse_conv_bn_weights(
    conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose: bool = False
) -> tuple[Parameter, Parameter]:
    """The fused ``(weight, bias)`` Parameters; a missing conv bias or BatchNorm affine
    parameter counts as zeros/ones. The results keep the conv parameters' dtypes."""
    conv_weight_dtype = conv_w.dtype
    conv_bias_dtype = conv_b.dtype if conv_b is not None else conv_weight_dtype
    if conv_b is None:
        conv_b = kiln.zeros_like(bn_rm)
    if bn_w is None:
        bn_w = kiln.ones_like(bn_rm)
    if bn_b is None:
        bn_b = kiln.zeros_like(bn_rm)
    bn_var_rsqrt = kiln.rsqrt(bn_rv + bn_eps)
    trailing = [1] * (len(conv_w.shape) - 2)
    shape = [1, -1, *trailing] if transpose else [-1, 1, *trailing]
    fused_conv_w = (conv_w * (bn_w * bn_var_rsqrt).reshape(shape)).to(dtype=conv_weight_dtype)
    fused_conv_b = ((conv_b - bn_rm) * bn_var_rsqrt * bn_w + bn_b).to(dtype=conv_bias_dtype)
    return (
        Parameter(fused_conv_w, conv_w.requires_grad),
        Parameter(fused_conv_b, conv_b.requires_grad),
    )


def fuse_linear_bn_eval(linear, bn):
    """A new Linear computing ``bn(linear(x))`` of the eval-mode pair. ``bn`` normalizes the
    linear layer's output features, so it must have ``out_features`` channels (or one)."""
    if linear.training or bn.training:
        raise AssertionError("Fusion only for eval!")
    fused_linear = copy.deepcopy(linear)
    if linear.out_features != bn.num_features and bn.num_features != 1:
        raise AssertionError(
            "To fuse, linear.out_features == bn.num_features or bn.num_features == 1, "
            f"got linear.out_features={linear.out_features} and "
            f"bn.num_features={bn.num_features}"
        )
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("bn.running_mean and bn.running_var must not be None")
    fused_linear.weight, fused_linear.bias = fuse_linear_bn_weights(
        fused_linear.weight,
        fused_linear.bias,
        bn.running_mean,
        bn.running_var,
        bn.eps,
        bn.weight,
        bn.bias,
    )
    return fused_linear


def fuse_linear_bn_weights(
    linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b
) -> tuple[Parameter, Parameter]:
    """The fused ``(weight, bias)`` Parameters (a missing linear bias counts as zeros)."""
    linear_weight_dtype = linear_w.dtype
    linear_bias_dtype = linear_b.dtype if linear_b is not None else linear_weight_dtype
    if linear_b is None:
        linear_b = kiln.zeros_like(bn_rm)
    bn_scale = bn_w * kiln.rsqrt(bn_rv + bn_eps)
    fused_w = linear_w * bn_scale.unsqueeze(-1).to(dtype=linear_weight_dtype)
    fused_b = ((linear_b - bn_rm) * bn_scale + bn_b).to(dtype=linear_bias_dtype)
    return (
        Parameter(fused_w, linear_w.requires_grad),
        Parameter(fused_b, linear_b.requires_grad),
    )

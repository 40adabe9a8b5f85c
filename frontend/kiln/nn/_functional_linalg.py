"""Functional forms (kiln.nn.functional) for matrix products: linear and bilinear."""

from kiln import _C

__all__ = ["linear", "bilinear"]


linear = _C._nn.linear  # bound from its ops.def row


def bilinear(input1, input2, weight, bias=None):
    """F.bilinear: ``y[..., o] = x1[..., i] * weight[o, i, j] * x2[..., j] + bias[o]``."""
    return _C.bilinear(input1, input2, weight, bias)
